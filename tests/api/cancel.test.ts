import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { PlannerGeneratorEvaluator } from '../../src/api/planner-generator-evaluator.js';
import { CallTimeoutError } from '../../src/errors.js';
import { readLogFile } from '../../src/persistence/index.js';
import type { RunEvent } from '../../src/schemas/index.js';
import { type FakeOpenAI, type FakeStep, startFakeOpenAI } from '../support/fake-openai-server.js';
import { planOf } from '../support/scripts.js';

/**
 * Leaving a state stops its call actor, and stopping it cancels the call end to end: through the
 * real openai SDK, the model server sees the HTTP request aborted.
 */

const ANSWERS: Record<string, object> = {
  pge_plan: planOf(1),
  pge_contract: { title: 'c', acceptanceCriteria: ['a'], expectedOutput: 'o', verificationMethod: 'v' },
  pge_contract_review: { status: 'approved', amendments: [], rationale: 'ok' },
};

let dir: string;
let openai: FakeOpenAI;
beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'pge-cancel-'));
  openai = await startFakeOpenAI();
  // biome-ignore lint/suspicious/noExplicitAny: the request body as the SDK sent it.
  openai.script((body: any): FakeStep => {
    const content = ANSWERS[body?.response_format?.json_schema?.name];
    // The work call hangs: a model that takes its time, until the client gives up.
    return content
      ? { content }
      : { content: { output: 'late', notes: '', selfAssessment: [] }, delayMs: 60_000 };
  });
});
afterEach(async () => {
  await openai.close();
  rmSync(dir, { recursive: true, force: true });
});

const workRequests = () =>
  openai.completions().filter((r) => r.body?.response_format?.json_schema?.name === 'pge_work');

async function until(check: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 500 && !check(); i++) await new Promise((resolve) => setTimeout(resolve, 10));
  if (!check()) throw new Error(`timed out waiting for ${what}`);
}

describe('an interrupted run cancels its call in flight', () => {
  it('aborts the HTTP request to the model and records the cancel before the closing event', async () => {
    const events: RunEvent[] = [];
    const pge = new PlannerGeneratorEvaluator({
      modelName: 'test-model',
      baseURL: openai.url,
      apiKey: 'sk-test-cancel',
      workingDirectory: dir,
      maxRetries: 0,
      onEvent: (e) => events.push(e),
    });
    try {
      const running = pge.run('Write a haiku');
      await until(() => workRequests().length === 1, 'the work request');
      expect(workRequests()[0]!.abortedAt).toBeNull();
      pge.interrupt();
      await running;
      expect(pge.lastResult?.status).toBe('interrupted');
      await until(() => workRequests()[0]!.abortedAt !== null, 'the model server to see the abort');
      // Cancelled, not retried: the SDK made no second request.
      expect(workRequests()).toHaveLength(1);
      const types = events.map((e) => e.type);
      expect(types.slice(-2)).toEqual(['request.cancelled', 'run.failed']);
      const logged = await readLogFile(pge.lastResult!.outputPath);
      expect(logged.map((e) => e.type)).toEqual(types);
    } finally {
      await pge.close();
    }
  });
});

describe('a call past its deadline (callTimeoutMs)', () => {
  it('is cancelled end to end and fails as a role failure: the run ends failed, loudly, with its log', async () => {
    const events: RunEvent[] = [];
    const pge = new PlannerGeneratorEvaluator({
      modelName: 'test-model',
      baseURL: openai.url,
      apiKey: 'sk-test-deadline',
      workingDirectory: dir,
      maxRetries: 0,
      maxRetriesPerStep: 0,
      callTimeoutMs: 300,
      onEvent: (e) => events.push(e),
    });
    try {
      await expect(pge.run('Write a haiku')).rejects.toThrow(CallTimeoutError);
      expect(pge.lastResult?.status).toBe('failed');
      await until(() => workRequests()[0]?.abortedAt != null, 'the model server to see the abort');
      expect(workRequests()).toHaveLength(1);
      const types = events.map((e) => e.type);
      const work = events.find((e) => e.type === 'step.work.requested')!;
      const cancelled = events.find((e) => e.type === 'request.cancelled');
      expect(cancelled?.payload).toMatchObject({
        requestId: work.id,
        phase: 'work',
        reason: expect.stringMatching(/within 300 ms/),
      });
      const failed = events.find((e) => e.type === 'role.failed');
      expect(failed?.payload).toMatchObject({
        requestId: work.id,
        phase: 'work',
        error: { name: 'CallTimeoutError', retryable: true },
      });
      expect(types.indexOf('request.cancelled')).toBeLessThan(types.indexOf('role.failed'));
      expect(types.at(-1)).toBe('run.failed');
      expect(events.at(-1)?.payload).toMatchObject({ reason: 'error' });
      const logged = await readLogFile(pge.lastResult!.outputPath);
      expect(logged.map((e) => e.type)).toEqual(types);
    } finally {
      await pge.close();
    }
  });
});

describe('a long-lived instance', () => {
  it('adds no abort listener per call to a long-lived signal (no MaxListenersExceededWarning over 12 runs)', async () => {
    // biome-ignore lint/suspicious/noExplicitAny: the request body as the SDK sent it.
    openai.script((body: any): FakeStep => {
      const name = body?.response_format?.json_schema?.name;
      if (name === 'pge_work') return { content: { output: 'done', notes: '', selfAssessment: [] } };
      if (name === 'pge_evaluation')
        return {
          content: {
            scores: [
              { criterion: 'accuracy', score: 9, evidence: 'e' },
              { criterion: 'clarity', score: 9, evidence: 'e' },
            ],
            findings: [],
            actionableFeedback: [],
            summary: 's',
          },
        };
      return { content: ANSWERS[name]! };
    });
    const warnings: Error[] = [];
    const onWarning = (warning: Error) => warnings.push(warning);
    process.on('warning', onWarning);
    const pge = new PlannerGeneratorEvaluator({
      modelName: 'test-model',
      baseURL: openai.url,
      apiKey: 'sk-test-listeners',
      workingDirectory: dir,
    });
    try {
      for (let i = 0; i < 12; i++) {
        await pge.run(`Write haiku ${i}`);
        expect(pge.lastResult?.passed).toBe(true);
      }
      // Warnings are emitted on the next tick.
      await new Promise((resolve) => setImmediate(resolve));
      expect(warnings.map((w) => w.name)).not.toContain('MaxListenersExceededWarning');
      expect(openai.completions()).toHaveLength(12 * 5);
    } finally {
      process.off('warning', onWarning);
      await pge.close();
    }
  });
});
