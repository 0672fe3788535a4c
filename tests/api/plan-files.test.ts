import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { PgeOptions } from '../../src/api/options.js';
import { PlannerGeneratorEvaluator } from '../../src/api/planner-generator-evaluator.js';
import { CallTimeoutError, ConfigurationError, InvalidOutputError } from '../../src/errors.js';
import { readLogFile } from '../../src/persistence/index.js';
import { inputOf } from '../../src/roles/prompts.js';
import { replayLog } from '../../src/runtime/replay-log.js';
import { PlanDocument, type PlanDocumentInput, type RunEventOf } from '../../src/schemas/index.js';
import { type FakeOpenAI, type FakeStep, startFakeOpenAI } from '../support/fake-openai-server.js';
import { answers, schemaOf } from '../support/scripted-deployment.js';
import { planOf } from '../support/scripts.js';

/**
 * Plans as files and jobs across runs, embedded, counted on the model server's wire through the
 * real openai SDK: a given plan asks no planner; `continue` runs exactly the steps that did not
 * pass and their dependents, and keeps the others' artifacts.
 */

let dir: string;
let openai: FakeOpenAI;
/** Step ids whose evaluations score 5 (below every threshold); the others score 9. */
let failing: Set<string>;
// biome-ignore lint/suspicious/noExplicitAny: request bodies as the SDK sent them.
type Body = any;

/** s1 and s2 depend on nothing, s3 on s2, s4 on s1. */
const PLAN: PlanDocumentInput = {
  version: 1,
  task: 'Write a four-part guide',
  scope: 'a guide',
  steps: [
    { id: 's1', title: 'Part one', description: 'write part one', expectedOutput: 'part one' },
    { id: 's2', title: 'Part two', description: 'write part two', expectedOutput: 'part two' },
    {
      id: 's3',
      title: 'Part three',
      description: 'extend part two',
      expectedOutput: 'part three',
      dependsOn: ['s2'],
    },
    {
      id: 's4',
      title: 'Part four',
      description: 'extend part one',
      expectedOutput: 'part four',
      dependsOn: ['s1'],
    },
  ],
  criteria: [
    { name: 'accuracy', weight: 'high', threshold: 7 },
    { name: 'clarity', description: 'clear' },
  ],
};

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'pge-plans-'));
  failing = new Set();
  openai = await startFakeOpenAI();
  openai.script((body: Body): FakeStep => {
    const schema = schemaOf(body) ?? '';
    const input = inputOf(body.messages) as { stepNumber?: number; plan?: { steps: { id: string }[] } };
    const stepId = input.stepNumber === undefined ? null : `s${input.stepNumber}`;
    const work = { output: `the work of ${stepId}`, notes: 'n', selfAssessment: [] };
    if (schema === 'pge_work') return { content: work };
    return { content: answers(stepId !== null && failing.has(stepId) ? 5 : 9, 4)[schema] ?? {} };
  });
});
afterEach(async () => {
  await openai.close();
  rmSync(dir, { recursive: true, force: true });
});

function harness(options: PgeOptions = {}): PlannerGeneratorEvaluator {
  return new PlannerGeneratorEvaluator({
    modelName: 'test-model',
    baseURL: openai.url,
    apiKey: 'sk-test-plans',
    workingDirectory: dir,
    maxRetries: 0,
    maxRetriesPerStep: 0,
    tools: false,
    ...options,
  });
}

/** The schema and step (by plan position) of every request since `from`. */
function askedSince(from: number): string[] {
  return openai
    .completions()
    .slice(from)
    .map((r) => {
      const body = r.body as Body;
      const { stepNumber } = inputOf(body.messages) as { stepNumber?: number };
      return `${schemaOf(body)}${stepNumber === undefined ? '' : `:s${stepNumber}`}`;
    });
}

/** The steps asked about, each once, in the order first asked. */
const stepsAsked = (asked: readonly string[]) => [
  ...new Set(asked.flatMap((a) => (a.includes(':') ? [a.split(':')[1]!] : []))),
];

function writePlan(name: string, plan: PlanDocumentInput): string {
  const path = join(dir, name);
  writeFileSync(path, JSON.stringify(plan, null, 2));
  return path;
}

describe('a given plan', () => {
  it('runs with no planner call, and the log says the plan was given from its file', async () => {
    const file = writePlan('plan.json', PLAN);
    const pge = harness({ plan: file, maxParallelSteps: 1 });
    await pge.run('Write a four-part guide');
    await pge.close();
    const asked = askedSince(0);
    expect(asked.filter((a) => a.startsWith('pge_plan'))).toEqual([]);
    expect(stepsAsked(asked)).toEqual(['s1', 's2', 's3', 's4']);
    const result = pge.lastResult!;
    expect(result.passed).toBe(true);
    const events = await readLogFile(result.outputPath);
    const plan = events.find((e) => e.type === 'plan.created') as RunEventOf<'plan.created'>;
    expect(plan.payload.given).toEqual({ file });
    expect(events.some((e) => e.type === 'plan.requested')).toBe(false);
    // Thresholds as a planner's plan gets them: the file's, else the fallback (6 by default).
    expect(plan.payload.criteria.map((c) => [c.name, c.weight, c.threshold])).toEqual([
      ['accuracy', 'high', 7],
      ['clarity', 'standard', 6],
    ]);
    expect((await replayLog(result.outputPath)).identical).toBe(true);
  });

  it('is refused with the file and the field at fault, before any call', async () => {
    const bad = writePlan('bad.json', {
      ...PLAN,
      steps: [PLAN.steps[0]!, { ...PLAN.steps[1]!, dependsOn: ['s9'] }],
    });
    expect(() => harness({ plan: bad })).toThrow(ConfigurationError);
    expect(() => harness({ plan: bad })).toThrow(
      `${bad}: steps[1].dependsOn: step "s2" depends on "s9", which is not an earlier step`,
    );
    expect(openai.completions()).toHaveLength(0);
  });

  it("keeps a fixed rubric over the file's", async () => {
    const pge = harness({
      plan: { ...PLAN },
      criteria: [{ name: 'accuracy', weight: 'high', description: 'right', threshold: 8 }],
    });
    failing = new Set();
    await pge.run('Write a four-part guide');
    await pge.close();
    const events = await readLogFile(pge.lastResult!.outputPath);
    const plan = events.find((e) => e.type === 'plan.created') as RunEventOf<'plan.created'>;
    expect(plan.payload.given).toEqual({ file: null });
    expect(plan.payload.criteria.map((c) => c.name)).toEqual(['accuracy']);
  });
});

describe('continue', () => {
  it("runs exactly the failed step and its dependents, reusing the others' artifacts", async () => {
    failing = new Set(['s2']);
    const first = harness({ plan: writePlan('plan.json', PLAN), maxParallelSteps: 1 });
    await first.run('Write a four-part guide');
    await first.close();
    const firstResult = first.lastResult!;
    expect(firstResult.passed).toBe(false);

    failing = new Set();
    const since = openai.completions().length;
    const next = harness({ maxParallelSteps: 1 });
    await next.continue(firstResult.outputPath);
    await next.close();
    const asked = askedSince(since);
    // No planner, and only s2 and s3 (which depends on s2): s1 and s4 are kept.
    expect(asked.filter((a) => a.startsWith('pge_plan'))).toEqual([]);
    expect(stepsAsked(asked)).toEqual(['s2', 's3']);
    const result = next.lastResult!;
    expect(result.passed).toBe(true);
    const events = await readLogFile(result.outputPath);
    const started = events[0] as RunEventOf<'run.started'>;
    expect(started.payload.job).toEqual({ id: firstResult.runId, run: 2 });
    expect(started.payload.continues?.runId).toBe(firstResult.runId);
    expect(started.payload.continues?.carried.map((c) => c.stepId)).toEqual(['s1', 's4']);
    const kept = events.filter((e) => e.type === 'step.carried') as RunEventOf<'step.carried'>[];
    expect(kept.map((e) => [e.payload.stepId, e.payload.fromRunId])).toEqual([
      ['s1', firstResult.runId],
      ['s4', firstResult.runId],
    ]);
    // The kept steps' artifacts are the earlier run's, and s4 still received s1's.
    expect(result.stepLogs.map((s) => [s.stepId, s.keptFrom])).toEqual([
      ['s1', firstResult.runId],
      ['s4', firstResult.runId],
      ['s2', null],
      ['s3', null],
    ]);
    expect(result.finalArtifact).toContain('the work of s4');
    const closing = events.at(-1) as RunEventOf<'run.completed'>;
    expect([closing.payload.stepsPassed, closing.payload.stepsTotal]).toEqual([4, 4]);
    expect((await replayLog(result.outputPath)).identical).toBe(true);
  });

  it('carries a job across three runs until every step has passed', async () => {
    failing = new Set(['s2', 's4']);
    const runs: PlannerGeneratorEvaluator[] = [harness({ plan: writePlan('plan.json', PLAN) })];
    await runs[0]!.run('Write a four-part guide');
    const progress = () => {
      const r = runs.at(-1)!.lastResult!;
      return `${r.totalStepsCompleted}/${r.totalSteps}`;
    };
    // s3 ran on s2's best attempt (onStepExhausted: advance) and passed: s1 and s3.
    expect(progress()).toBe('2/4');
    failing = new Set(['s4']);
    runs.push(harness());
    await runs[1]!.continue(runs[0]!.lastResult!.outputPath);
    expect(progress()).toBe('3/4');
    failing = new Set();
    const since = openai.completions().length;
    runs.push(harness());
    await runs[2]!.continue(runs[1]!.lastResult!.outputPath);
    expect(progress()).toBe('4/4');
    expect(stepsAsked(askedSince(since))).toEqual(['s4']);
    for (const pge of runs) await pge.close();
    const third = (await readLogFile(runs[2]!.lastResult!.outputPath))[0] as RunEventOf<'run.started'>;
    expect(third.payload.job).toEqual({ id: runs[0]!.lastResult!.runId, run: 3 });
    // s1 passed in the first run, s2 and s3 in the second: each is named where it passed.
    expect(third.payload.continues?.carried.map((c) => [c.stepId, c.runId])).toEqual([
      ['s1', runs[0]!.lastResult!.runId],
      ['s2', runs[1]!.lastResult!.runId],
      ['s3', runs[1]!.lastResult!.runId],
    ]);
    // Nothing is left: a fourth continue is refused.
    await expect(harness().continue(runs[2]!.lastResult!.outputPath)).rejects.toThrow(/nothing left to do/);
  });

  it('with an edited plan runs what it adds or changes, and drops what it removes', async () => {
    const first = harness({ plan: writePlan('plan.json', PLAN), maxParallelSteps: 1 });
    await first.run('Write a four-part guide');
    await first.close();
    expect(first.lastResult!.passed).toBe(true);

    const edited = writePlan('edited.json', {
      ...PLAN,
      steps: [
        PLAN.steps[0]!,
        PLAN.steps[1]!,
        { ...PLAN.steps[3]!, description: 'extend part one, with examples' },
        {
          id: 's5',
          title: 'Part five',
          description: 'close',
          expectedOutput: 'part five',
          dependsOn: ['s2'],
        },
      ],
    });
    const since = openai.completions().length;
    const next = harness({ maxParallelSteps: 1 });
    await next.continue(first.lastResult!.outputPath, { plan: edited });
    await next.close();
    // s3 is dropped; s4 changed (third in the edited plan) and s5 added (fourth) run.
    expect(stepsAsked(askedSince(since))).toEqual(['s3', 's4']);
    // s4 is given the artifact s1 kept from the first run.
    const work = openai
      .completions()
      .slice(since)
      .map((r) => r.body as Body)
      .find(
        (b) => schemaOf(b) === 'pge_work' && (inputOf(b.messages) as { stepNumber: number }).stepNumber === 3,
      );
    expect((inputOf(work.messages) as { dependencies: unknown[] }).dependencies).toEqual([
      { stepId: 's1', title: 'Part one', output: 'the work of s1' },
    ]);
    const events = await readLogFile(next.lastResult!.outputPath);
    const plan = events.find((e) => e.type === 'plan.created') as RunEventOf<'plan.created'>;
    expect(plan.payload.plan.steps.map((s) => s.id)).toEqual(['s1', 's2', 's4', 's5']);
    expect(plan.payload.given).toEqual({ file: edited });
    expect(next.lastResult!.totalStepsCompleted).toBe(4);
  });
});

describe('plan (the planner alone)', () => {
  /** The planner answers a plan of `steps` steps whose clarity threshold is left open. */
  function planner(steps: number): void {
    openai.script((body: Body): FakeStep => {
      if (schemaOf(body) !== 'pge_plan') return { status: 400, error: { message: 'not the planner' } };
      const plan = planOf(steps, [
        { name: 'accuracy', threshold: 8 },
        { name: 'Clarity', threshold: null },
      ]);
      return { content: plan };
    });
  }

  it('asks the planner once and returns a plan document that a run takes with no planner call', async () => {
    planner(3);
    const pge = harness({ defaultThresholds: { clarity: 7 } });
    const doc = await pge.plan('Write a three-part guide');
    expect(askedSince(0)).toEqual(['pge_plan']);
    const asked = inputOf((openai.completions()[0]!.body as Body).messages);
    expect(asked).toEqual({ task: 'Write a three-part guide', maxSteps: 10, replan: null });
    expect(PlanDocument.parse(doc)).toEqual(doc);
    expect(doc.$schema).toBe('node_modules/pge/schemas/plan.schema.json');
    expect(doc.task).toBe('Write a three-part guide');
    expect(doc.steps.map((s) => [s.id, s.dependsOn])).toEqual([
      ['s1', []],
      ['s2', ['s1']],
      ['s3', ['s2']],
    ]);
    // The thresholds this harness would enforce: the plan's, else defaultThresholds.
    expect(doc.criteria.map((c) => [c.name, c.threshold])).toEqual([
      ['accuracy', 8],
      ['clarity', 7],
    ]);
    openai.script((body: Body): FakeStep => ({ content: answers(9, 3)[schemaOf(body) ?? ''] ?? {} }));
    const since = openai.completions().length;
    await harness({ plan: doc }).run(doc.task!);
    expect(askedSince(since).filter((a) => a.startsWith('pge_plan'))).toEqual([]);
    await pge.close();
  });

  it('keeps a fixed rubric, cuts a plan of too many steps after one re-ask, and starts no run', async () => {
    planner(5);
    const rubric = [{ name: 'accuracy', weight: 'high' as const, description: 'right', threshold: null }];
    const pge = harness({ maxSteps: 2, criteria: rubric, fallbackThreshold: 5 });
    const doc = await pge.plan('Write a guide');
    // The planner is re-asked once with the problem, then its plan is cut, as in a run.
    expect(askedSince(0)).toEqual(['pge_plan', 'pge_plan']);
    expect(inputOf((openai.completions()[0]!.body as Body).messages)).toMatchObject({ rubric, maxSteps: 2 });
    expect(doc.steps.map((s) => s.id)).toEqual(['s1', 's2']);
    expect(doc.criteria).toEqual([{ ...rubric[0], threshold: 5 }]);
    expect(pge.lastResult).toBeNull();
    expect(readdirSync(dir)).toEqual([]);
  });

  it('rejects with the error a run would fail with when the answer stays invalid', async () => {
    openai.script(() => ({ content: { scope: 'no steps' } }));
    const pge = harness({ maxRepairs: 1 });
    await expect(pge.plan('Write a guide')).rejects.toThrow(InvalidOutputError);
    expect(askedSince(0)).toEqual(['pge_plan', 'pge_plan']);
  });

  it('gives up after callTimeoutMs, as a run does', async () => {
    openai.script(() => ({ content: planOf(1), delayMs: 5_000 }));
    const pge = harness({ callTimeoutMs: 200 });
    const started = performance.now();
    await expect(pge.plan('Write a guide')).rejects.toThrow(
      new CallTimeoutError('no answer to plan.requested within 200 ms'),
    );
    expect(performance.now() - started).toBeLessThan(2_000);
  });
});
