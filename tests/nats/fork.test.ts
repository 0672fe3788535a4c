import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SUBMIT_ANSWER_MS } from '../../src/bus/subjects.js';
import { inputOf } from '../../src/roles/prompts.js';
import type { RunEvent, RunEventOf } from '../../src/schemas/index.js';
import { stepsAskedSince } from '../support/continue-fixtures.js';
import {
  closedRun,
  loggedRun,
  pgeAsClient,
  startDeployment,
  submitRun,
  type TestDeployment,
  until,
} from '../support/deployment.js';
import { type PgeProcess, startPge } from '../support/processes.js';
import { answers, schemaOf, scriptedStep, taskHas } from '../support/scripted-deployment.js';
import { storedEvents } from '../support/stored-events.js';

/**
 * `pge fork --nats <url> <runId> --from-step N` on a deployment of real `pge worker` processes on a
 * private, secured nats-server, with the client credential: the coordinator that takes the fork
 * reads the parent's events from the stream, records the fork's first events under its run id and
 * drives it live from step N (no model is asked about the steps before, counted on the scripted
 * model server's wire); the persistence worker writes its log, and the coordinator, which shares
 * the generators' working directory here, starts the fork's workspace as a copy of the parent's. Forks of a run still going, of an
 * unknown run, from a step the run never started, or with settings that would change the steps
 * before, are refused with one sentence, exit 2, and nothing recorded or asked.
 */

const SLOW = 'a task whose work takes a minute';
const TASK = 'Write a guide to rivers';

let d: TestDeployment;
/** The coordinator's working directory, where the generators' workspaces would be on a shared volume. */
let shared: string;
let coordinator: PgeProcess;

beforeAll(async () => {
  d = await startDeployment();
  // The first attempt of step 1 scores 5, below the thresholds: the parent retries it once.
  d.openai.script((body) => {
    const schema = schemaOf(body) ?? '';
    const { stepNumber, attempt } = inputOf(body.messages) as { stepNumber?: number; attempt?: number };
    const score = stepNumber === 1 && attempt === 1 ? 5 : 9;
    return scriptedStep(answers(score, 3)[schema], taskHas(body, SLOW) && schema === 'pge_work' ? 60_000 : 5);
  });
  shared = mkdtempSync(join(tmpdir(), 'pge-fork-shared-'));
  coordinator = startPge(['worker', '--role', 'coordinator'], d.env('coordinator'), shared);
  await coordinator.waitFor(/ready/, 30_000);
  await d.worker('persistence', ['--working-dir', d.logs]);
  for (const role of ['planner', 'generator', 'evaluator'] as const) await d.worker(role);
}, 90_000);

afterAll(async () => {
  await coordinator?.stop('SIGTERM');
  rmSync(shared, { recursive: true, force: true });
  // Nothing the client did was refused: its credential may fork as it may submit.
  const { refusals } = await d.close();
  expect(refusals).toEqual([]);
}, 60_000);

/** The `run.started` of every run the stream holds. */
const starts = async () => storedEvents(d.client, 'pge.run.*.evt.run.started');

describe('pge fork --nats', () => {
  let parent: { runId: string };

  beforeAll(async () => {
    const run = await pgeAsClient(d, ['run', TASK, '--max-retries', '1', '--json']);
    expect(run.code, run.stderr).toBe(0);
    parent = JSON.parse(run.stdout);
  }, 60_000);

  it('forks a finished run from step 2: the fork names its parent, asks nothing about step 1, and passes', async () => {
    // What the parent's generators left in its workspace, in the working directory the coordinator shares.
    mkdirSync(join(shared, 'workspaces', parent.runId), { recursive: true });
    writeFileSync(join(shared, 'workspaces', parent.runId, 'part-1.md'), 'the first part');
    const since = d.openai.completions().length;
    const fork = await pgeAsClient(d, [
      'fork',
      parent.runId,
      '--from-step',
      '2',
      '--max-retries',
      '2',
      '--json',
    ]);
    expect(fork.code, fork.stderr).toBe(0);
    // As the embedded fork, it shows the steps it runs, not the ones it took from its parent.
    expect(fork.stderr).toContain('step 2/3');
    expect(fork.stderr).not.toContain('step 1/3');
    const result = JSON.parse(fork.stdout);
    expect(result).toMatchObject({ passed: true, totalStepsCompleted: 3 });
    expect(result.runId).not.toBe(parent.runId);
    // No planner call, no call about step 1: only steps 2 and 3 were asked about.
    expect(stepsAskedSince(d.openai, since)).toEqual([2, 3]);

    const stored = await closedRun(d.client, result.runId);
    const started = stored[0] as RunEventOf<'run.started'>;
    expect(started.payload.parent).toEqual({
      runId: parent.runId,
      logPath: `pge_shared_state_${parent.runId}.md`,
      fromStep: 2,
    });
    expect(started.payload.task).toBe(TASK);
    expect(started.payload.settings.maxRetriesPerStep).toBe(2);
    // Step 1's retry is the parent's, taken over with the rest of its events before step 2.
    const parentEvents = await closedRun(d.client, parent.runId);
    const cut = parentEvents.findIndex((e) => e.type === 'step.started' && e.payload.stepNumber === 2);
    expect(stored.slice(1, cut).map((e) => e.type)).toEqual(parentEvents.slice(1, cut).map((e) => e.type));
    expect(stored.slice(0, cut).every((e) => e.runId === result.runId && e.id.startsWith(result.runId))).toBe(
      true,
    );
    expect(stored[cut]).toMatchObject({ type: 'run.resumed', payload: { fromSeq: cut } });

    expect(readFileSync(join(shared, 'workspaces', result.runId, 'part-1.md'), 'utf8')).toBe(
      'the first part',
    );

    // The persistence worker wrote the fork's log from the stream, as for any run.
    const logged = await loggedRun(d.logs, result.runId, stored.length);
    expect(logged.map((e) => e.id)).toEqual(stored.map((e) => e.id));
    expect(readFileSync(join(d.logs, `pge_shared_state_${result.runId}.md`), 'utf8')).toContain(
      `- **Forked from**: run ${parent.runId}`,
    );
  }, 60_000);

  it('refuses a fork of an unknown run, from a step never started, or that would change the steps before', async () => {
    const since = d.openai.completions().length;
    const runsBefore = (await starts()).length;

    const unknown = await pgeAsClient(d, ['fork', 'pge-no-such-run', '--from-step', '1']);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain("pge: no run pge-no-such-run in the deployment's events stream\n");

    const notStarted = await pgeAsClient(d, ['fork', parent.runId, '--from-step', '7']);
    expect(notStarted.code).toBe(2);
    expect(notStarted.stderr).toContain(
      `pge: cannot fork run ${parent.runId} from step 7: its run started steps 1, 2, 3\n`,
    );

    // Step 1 took a retry: with none it would have gone another way.
    const diverging = await pgeAsClient(d, ['fork', parent.runId, '--from-step', '2', '--max-retries', '0']);
    expect(diverging.code).toBe(2);
    expect(diverging.stderr).toMatch(
      new RegExp(
        `pge: cannot fork run ${parent.runId} from step 2 with these settings: the events before it would not be the same \\(at seq \\d+: the log has step\\.retry\\.scheduled`,
      ),
    );

    // A flag of the workers is refused before anything is sent.
    const model = await pgeAsClient(d, ['fork', parent.runId, '--from-step', '2', '--model', 'other']);
    expect(model.code).toBe(2);
    expect(model.stderr).toContain('--model has no effect on a fork on NATS (--nats)');

    expect(d.openai.completions().length).toBe(since);
    expect((await starts()).length).toBe(runsBefore);
  }, 60_000);

  it('answers a fork submitted again under its run id with that run, started once; another use of the id is refused', async () => {
    const nc = await connect(d.client);
    const submit = async (submission: object) =>
      (await nc.request('pge.runs.submit', JSON.stringify(submission), { timeout: SUBMIT_ANSWER_MS })).json<{
        runId?: string;
        error?: { message: string };
      }>();
    try {
      const runId = `pge-fork-again-${Date.now()}`;
      const fork = { runId, fork: { runId: parent.runId, fromStep: 3 } };
      // A submitter whose answer was lost sends the same submission again.
      expect(await submit(fork)).toEqual({ runId });
      expect(await submit(fork)).toEqual({ runId });
      const other = await submit({ runId, fork: { runId: parent.runId, fromStep: 2 } });
      expect(other.error?.message).toContain(`run id ${runId} is taken`);
      const stored = await closedRun(d.client, runId);
      expect(stored.filter((e) => e.type === 'run.started')).toHaveLength(1);
      expect(stored.at(-1)).toMatchObject({ type: 'run.completed', payload: { passed: true } });
    } finally {
      await nc.close();
    }
  }, 60_000);

  it('refuses a fork of a run still going', async () => {
    const runId = await submitRun(d.client, SLOW);
    await until(
      () => storedEvents(d.client, `pge.run.${runId}.evt.>`),
      (events: RunEvent[]) => events.some((e) => e.type === 'step.work.requested'),
      'the run to be at work',
      30_000,
    );
    const going = await pgeAsClient(d, ['fork', runId, '--from-step', '1']);
    expect(going.code).toBe(2);
    expect(going.stderr).toMatch(
      new RegExp(
        `pge: run ${runId} has not ended \\(its last event is [\\w.]+\\): fork it once it has ended\\n`,
      ),
    );
    const cancelled = await pgeAsClient(d, ['cancel', runId, '--by', 'test']);
    expect(cancelled.code, cancelled.stderr).toBe(0);
    await closedRun(d.client, runId);
  }, 60_000);
});
