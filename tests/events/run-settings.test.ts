import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { readLog } from '../../src/persistence/log-reader.js';
import {
  forkedSettings,
  type RunEventOf,
  type RunSettingOptions,
  RunSettings,
  runSettingsOf,
} from '../../src/schemas/index.js';
import { RunSubmissionOptions } from '../../src/schemas/submission.js';

/**
 * A run's settings are one schema (`RunSettings`, what `run.started` records), reached from the
 * options that set them (`runSettingsOf`), read back from old logs with the defaults they meant.
 */

const models = { planner: 'p', generator: 'g', evaluator: 'e' };

const options: RunSettingOptions = {
  maxSteps: 4,
  maxRetriesPerStep: 2,
  maxContractRounds: 3,
  onStepExhausted: 'replan',
  maxReplans: 1,
  maxParallelSteps: 2,
  defaultThresholds: { clarity: 8 },
  fallbackThreshold: 6,
  callTimeoutMs: 60_000,
};

describe('run settings', () => {
  it('from options: nothing set is left out, budgets and the gate deadline take their recorded shape, in the log order', () => {
    const none = runSettingsOf(
      { ...options, criteria: null, approve: [], approvalTimeoutMs: null, plan: null },
      { models },
    );
    expect(JSON.stringify(none)).toBe(
      '{"maxSteps":4,"maxRetriesPerStep":2,"maxContractRounds":3,"onStepExhausted":"replan","maxReplans":1,' +
        '"maxParallelSteps":2,"defaultThresholds":{"clarity":8},"fallbackThreshold":6,' +
        '"budgets":{"maxCostUsd":null,"maxTokens":null,"maxDurationMs":null},"callTimeoutMs":60000,' +
        '"models":{"planner":"p","generator":"g","evaluator":"e"}}',
    );
    const acting = { tools: true, validators: [], workspace: '/w/run' };
    // Given in another order than the log's: the settings come in the log's.
    const all = runSettingsOf(
      {
        approvalTimeoutMs: 5_000,
        onApprovalTimeout: 'reject',
        approve: ['step', 'plan'],
        maxCostUsd: 2,
        criteria: [{ name: 'Clarity', weight: 'high', description: 'clear', threshold: 7 }],
        ...options,
      },
      { models, acting },
    );
    expect(Object.keys(all)).toEqual([
      'maxSteps',
      'maxRetriesPerStep',
      'maxContractRounds',
      'onStepExhausted',
      'maxReplans',
      'maxParallelSteps',
      'defaultThresholds',
      'fallbackThreshold',
      'criteria',
      'approve',
      'budgets',
      'callTimeoutMs',
      'approvalDeadline',
      'models',
      'acting',
    ]);
    expect(all).toMatchObject({
      criteria: [{ name: 'clarity' }],
      budgets: { maxCostUsd: 2, maxTokens: null, maxDurationMs: null },
      approvalDeadline: { timeoutMs: 5_000, policy: 'reject' },
      acting,
    });
    // A deadline without its policy stops the run.
    expect(runSettingsOf({ ...options, approvalTimeoutMs: 1 }, { models }).approvalDeadline).toEqual({
      timeoutMs: 1,
      policy: 'stop',
    });
  });

  it('reads a log written before steps could run side by side as one step at a time', () => {
    const path = join(import.meta.dirname, '../fixtures/logs/demo-run.md');
    const text = readFileSync(path, 'utf8');
    expect(text).not.toContain('maxParallelSteps');
    const started = readLog(text, path)[0] as RunEventOf<'run.started'>;
    expect(started.payload.settings.maxParallelSteps).toBe(1);
  });

  it('parses what it records unchanged, so a log rewritten from parsed events keeps its bytes', () => {
    const settings = runSettingsOf({ ...options, approve: ['contract'], approvalTimeoutMs: 9 }, { models });
    expect(JSON.stringify(RunSettings.parse(JSON.parse(JSON.stringify(settings))))).toBe(
      JSON.stringify(settings),
    );
  });

  it('a fork changes what it is given, budgets in their place, and takes its own models and acting', () => {
    const parent = runSettingsOf(
      { ...options, maxCostUsd: 1, maxTokens: 500 },
      { models, acting: { tools: true, validators: [], workspace: '/w/parent' } },
    );
    const fork = forkedSettings(
      parent,
      { maxRetriesPerStep: 0, maxCostUsd: null, maxDurationMs: 1_000, fallbackThreshold: undefined },
      { models: { ...models, planner: 'q' } },
    );
    expect(fork).toEqual({
      ...parent,
      maxRetriesPerStep: 0,
      budgets: { maxCostUsd: null, maxTokens: 500, maxDurationMs: 1_000 },
      models: { ...models, planner: 'q' },
      acting: undefined,
    });
    expect('acting' in fork).toBe(false);
  });

  it("a submission's overrides are the options, each optional, unknown names refused", () => {
    expect(RunSubmissionOptions.parse({ maxParallelSteps: 3 })).toEqual({ maxParallelSteps: 3 });
    expect(RunSubmissionOptions.safeParse({ maxParallelStep: 3 }).success).toBe(false);
    expect(RunSubmissionOptions.safeParse({ models }).success).toBe(false);
    expect(RunSubmissionOptions.safeParse({ maxParallelSteps: 0 }).error?.issues[0]?.message).toBe(
      'maxParallelSteps must be >= 1, got 0',
    );
  });
});
