import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunEventOf } from '../../src/schemas/index.js';
import {
  closedRun,
  passingAnswer,
  schemaOf,
  startDeployment,
  submitRun,
  type TestDeployment,
} from '../support/deployment.js';

/**
 * Validators on a distributed deployment: they are the generator worker's (`pge worker --role
 * generator --validate …`), run where its workspaces are, and the coordinator's chart calls the
 * evaluator only for work every one passed, with real processes on a real nats-server.
 */

let d: TestDeployment;
let workspaces: string;

beforeAll(async () => {
  d = await startDeployment();
  d.openai.script((body) => passingAnswer(body, 0));
  workspaces = mkdtempSync(join(tmpdir(), 'pge-validator-worker-'));
  for (const role of ['coordinator', 'planner', 'evaluator'] as const) await d.worker(role);
  await d.worker('persistence', ['--working-dir', d.logs]);
  // Every first attempt fails its check; it writes what it was given where the worker keeps workspaces.
  await d.worker('generator', [
    '--working-dir',
    workspaces,
    '--validate',
    'cat > "attempt-$PGE_STEP_NUMBER-$PGE_ATTEMPT.txt"',
    '--validate',
    'test "$PGE_ATTEMPT" -gt 1 || { echo "first drafts are never good enough" >&2; exit 4; }',
  ]);
}, 60_000);

afterAll(async () => {
  const { codes, refusals } = await d.close();
  rmSync(workspaces, { recursive: true, force: true });
  expect(codes).toEqual(codes.map(() => 0));
  expect(refusals).toEqual([]);
}, 60_000);

describe('validators on NATS workers', () => {
  it("runs the generator worker's validators in its workspace; the evaluator is asked only for work they passed", async () => {
    const runId = await submitRun(d.client, 'a task with checks');
    const events = await closedRun(d.client, runId);
    expect(events.at(-1)).toMatchObject({ type: 'run.completed', payload: { passed: true, stepsTotal: 3 } });

    const works = events.filter(
      (e): e is RunEventOf<'step.work.completed'> => e.type === 'step.work.completed',
    );
    expect(
      works.map((e) => [e.payload.stepNumber, e.payload.attempt, e.payload.validation!.map((v) => v.passed)]),
    ).toEqual([
      [1, 1, [true, false]],
      [1, 2, [true, true]],
      [2, 1, [true, false]],
      [2, 2, [true, true]],
      [3, 1, [true, false]],
      [3, 2, [true, true]],
    ]);
    expect(works[0]!.payload.validation![1]).toMatchObject({
      exitCode: 4,
      output: 'first drafts are never good enough\n',
    });
    // Counted on the model server's wire: 6 works, 3 evaluations.
    const asked = (schema: string) => d.openai.completions().filter((r) => schemaOf(r.body) === schema);
    expect(asked('pge_work')).toHaveLength(6);
    expect(asked('pge_evaluation')).toHaveLength(3);
    const evaluated = events.flatMap((e) =>
      e.type === 'step.evaluation.requested' ? [e.payload.input.attempt] : [],
    );
    expect(evaluated).toEqual([2, 2, 2]);
    // The commands ran in the run's workspace on the generator's machine, the work's output on stdin.
    expect(readFileSync(join(workspaces, 'workspaces', runId, 'attempt-3-2.txt'), 'utf8')).toBe('the work');
  }, 60_000);
});
