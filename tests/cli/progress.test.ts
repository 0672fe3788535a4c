import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { PlannerGeneratorEvaluator } from '../../src/api/planner-generator-evaluator.js';
import { describeEvent, newRunState } from '../../src/cli/event-lines.js';
import { Progress } from '../../src/cli/progress.js';
import { DemoModel } from '../../src/roles/demo-model.js';
import type { RunEvent } from '../../src/schemas/index.js';

/**
 * The progress display, fed by a real run with the demo model: the plain lines a CI log gets, and
 * the live line a terminal gets, rewritten in place.
 */

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'pge-cli-progress-'));
});
afterEach(() => {
  rmSync(dir, { recursive: true, force: true });
});

/** A stream that records every write. */
function recorder(columns?: number) {
  const writes: string[] = [];
  return { writes, columns, write: (text: string) => writes.push(text), text: () => writes.join('') };
}

/** Runs the demo with `progress` as `onEvent`; `tap` sees each event after the display did. */
async function demoRun(progress: Progress, tap?: (event: RunEvent) => void): Promise<void> {
  const model = new DemoModel();
  const pge = new PlannerGeneratorEvaluator({
    plannerAgent: model,
    generatorAgent: model,
    evaluatorAgent: model,
    workingDirectory: dir,
    onEvent: (event) => {
      progress.onEvent(event);
      tap?.(event);
    },
  });
  try {
    await pge.run('Write a short guide to tea');
  } finally {
    progress.stop();
    await pge.close();
  }
}

describe('plain progress (not a TTY)', () => {
  it('prints one timestamped line per meaningful event', async () => {
    const stream = recorder();
    let clock = 0;
    await demoRun(new Progress({ stream, live: false, verbose: false, now: () => (clock += 10) }));
    const lines = stream.text().trimEnd().split('\n');
    expect(stream.text()).not.toContain('\r');
    expect(lines.every((l) => /^\[\d+\.\ds\] /.test(l))).toBe(true);
    const body = lines.map((l) => l.replace(/^\[\d+\.\ds\] /, ''));
    expect(body[0]).toMatch(/^run pge-\S+ started; log: .*pge_shared_state_/);
    expect(body).toContain(
      'plan created: 4 steps; thresholds: accuracy >= 7, clarity >= 7, completeness >= 6',
    );
    expect(body).toContain('step 1/4 contract round 1: 1 amendment requested');
    expect(body).toContain('step 1/4 contract agreed (2 rounds)');
    expect(body).toContain(
      'step 1/4 attempt 1 failed (below threshold): accuracy 5/7 ✗, clarity 7/7 ✓, completeness 6/6 ✓; mean 5.75',
    );
    expect(body).toContain('step 1/4 retry: attempt 2 will refine (mean 5.75)');
    expect(body).toContain('step 2/4 retry: attempt 3 will pivot (mean 5.75 -> 5.50, not improving)');
    expect(body).toContain('step 2/4 passed on attempt 3');
    expect(body.at(-1)).toMatch(/^run passed: 4\/4 steps passed, 3 retries, [\d,]+ tokens, \$0\.0000, /);
    expect(body.some((l) => l.startsWith('model call'))).toBe(false);
  });

  it('adds requests and model calls with verbose', async () => {
    const stream = recorder();
    await demoRun(new Progress({ stream, live: false, verbose: true }));
    expect(stream.text()).toMatch(
      /model call: evaluator evaluation \(pge-demo[^)]*\)\) \d+ in \+ \d+ out tokens/,
    );
    expect(stream.text()).toContain('generator: work requested (attempt 3)');
  });
});

describe('live progress (a TTY)', () => {
  it('rewrites one status line in place and keeps only milestones above it', async () => {
    const stream = recorder(200);
    const progress = new Progress({ stream, live: true, verbose: false, tickMs: 0 });
    const frames: string[] = [];
    await demoRun(progress, (event) => {
      if (event.type === 'step.evaluation.requested' && event.payload.input.stepNumber === 2)
        frames.push(progress.render());
    });
    // Every redraw starts by erasing the previous line.
    expect(stream.writes.filter((w) => w === '\r\x1b[2K').length).toBeGreaterThan(10);
    expect(frames[1]).toMatch(
      /^pge step 2\/4 · attempt 2 · evaluation · last: accuracy 6\/7 ✗, clarity 6\/7 ✗, completeness 5\/6 ✗ · [\d,]+ tokens, \$0\.0000 · \d+s$/,
    );
    const kept = stream.writes.filter((w) => w.endsWith('\n')).map((w) => w.trimEnd());
    expect(kept).toContain('step 2/4 passed on attempt 3');
    // Details live in the status line only; the run's end leaves no status line behind.
    expect(kept.some((l) => l.includes('retry'))).toBe(false);
    expect(stream.writes.at(-1)).toMatch(/^run passed: .*\n$/);
  });

  it('cuts the status line to the terminal width', async () => {
    const stream = recorder(40);
    const progress = new Progress({ stream, live: true, verbose: false, tickMs: 0 });
    await demoRun(progress);
    const frames = stream.writes.filter((w) => !w.endsWith('\n') && w !== '\r\x1b[2K');
    expect(frames.length).toBeGreaterThan(5);
    for (const frame of frames) expect(frame.length).toBeLessThanOrEqual(39);
    expect(frames.some((f) => f.endsWith('…'))).toBe(true);
  });
});

describe('describeEvent', () => {
  const base = { id: 'r-1', runId: 'r', seq: 1, ts: '2026-01-01T00:00:00.000Z' };
  const at = (payload: object, type: string) => ({ ...base, type, payload }) as unknown as RunEvent;
  const totals = {
    passed: false,
    stepsPassed: 1,
    stepsTotal: 2,
    totalRetries: 0,
    durationMs: 10,
    summary: '',
  };
  const usage = { promptTokens: 1000, completionTokens: 200, costUsd: 0.0123, calls: 3 };

  it('says why a run stopped and what a failed step keeps', () => {
    const state = { ...newRunState(0), steps: 2 };
    expect(
      describeEvent(
        at(
          { ...totals, usage, reason: 'budget', message: 'budget maxCostUsd (0.01) would be exceeded' },
          'run.failed',
        ),
        state,
        false,
      ),
    ).toEqual({
      text: 'run stopped (budget): budget maxCostUsd (0.01) would be exceeded; 1/2 steps passed, 1,200 tokens, $0.0123',
      milestone: true,
    });
    expect(
      describeEvent(
        at({ stepId: 's', stepNumber: 2, attempts: 4, bestAttempt: 2, policy: 'advance' }, 'step.failed'),
        state,
        false,
      )?.text,
    ).toBe('step 2/2 failed after 4 attempts (keeps attempt 2); on exhausted: advance');
  });

  it('reports an imposed contract and a failed role as milestones', () => {
    const state = { ...newRunState(0), steps: 1 };
    const contract = { title: 't', acceptanceCriteria: ['a'], expectedOutput: 'o', verificationMethod: 'v' };
    const imposed = at(
      {
        stepId: 's',
        stepNumber: 1,
        contract: { ...contract, rounds: 3, imposed: true },
        outstandingAmendments: ['x'],
      },
      'step.contract.imposed',
    );
    expect(describeEvent(imposed, state, false)).toEqual({
      text: 'step 1/1 contract imposed after 3 rounds (1 amendment added)',
      milestone: true,
    });
    const failed = at(
      {
        requestId: 'q',
        role: 'planner',
        phase: 'plan',
        error: { name: 'ModelTransportError', message: 'down', retryable: true },
        raw: null,
      },
      'role.failed',
    );
    expect(describeEvent(failed, state, false)?.text).toBe(
      'planner failed (plan): ModelTransportError: down',
    );
  });

  it("keeps each step's attempt and scores apart when steps run side by side", () => {
    const state = { ...newRunState(0), steps: 2 };
    const scores = [{ criterion: 'accuracy', score: 5, threshold: 7, passed: false }];
    const judged = {
      stepId: 'a',
      stepNumber: 1,
      attempt: 1,
      verdict: 'fail',
      reason: 'below_threshold',
      scores,
      weightedMean: 5,
    };
    const events = [
      at({ stepId: 'a', stepNumber: 1, title: 'A' }, 'step.started'),
      at({ stepId: 'b', stepNumber: 2, title: 'B' }, 'step.started'),
      at(judged, 'step.attempt.judged'),
      at({ input: { stepNumber: 2, attempt: 1 } }, 'step.work.requested'),
    ];
    for (const event of events) describeEvent(event, state, false);
    // Step 2 was judged on nothing yet: step 1's scores are not shown under its number.
    expect(state).toMatchObject({ step: 2, attempt: 1, phase: 'work', scores: null });
    describeEvent(at({ input: { stepNumber: 1, attempt: 2 } }, 'step.work.requested'), state, false);
    expect(state).toMatchObject({ step: 1, attempt: 2, phase: 'work', scores });
  });
});
