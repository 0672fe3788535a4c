import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { HarnessResult } from '../../src/api/result.js';
import type { RunEvent } from '../../src/schemas/index.js';
import { type FakeOpenAI, startFakeOpenAI } from '../support/fake-openai-server.js';
import { type SecuredNatsServer, startSecuredNatsServer } from '../support/nats-server.js';
import { type PgeProcess, startPge } from '../support/processes.js';
import { answers, schemaOf, scriptedStep, startWorkers, taskHas } from '../support/scripted-deployment.js';
import { seqsUpTo, storedEvents } from '../support/stored-events.js';

/**
 * Following runs of a distributed deployment through faults, with real processes: `pge worker`
 * processes on a private nats-server started from `pge nats-config` that the test restarts,
 * followers (`pge run --nats` with the client credential, `pge follow` with the observer one) that
 * must end, and the stream that must hold every event of every run once.
 */

const HANGING = 'a task whose work hangs';
/** A run that hangs too, whose followers are interrupted; it is left to go on. */
const LEFT = 'a run left to its deployment';
const FAILING = 'a task that scores low';
/** Runs of many quick steps: their coordinator publishes events all the time. */
const BUSY = 'a busy task';
const BUSY_STEPS = 8;

let nats: SecuredNatsServer;
let openai: FakeOpenAI;
let logs: string;
let workers: PgeProcess[] = [];

beforeAll(async () => {
  nats = await startSecuredNatsServer();
  openai = await startFakeOpenAI();
  openai.script((body) => {
    const schema = schemaOf(body);
    if (schema === 'pge_work' && (taskHas(body, HANGING) || taskHas(body, LEFT)))
      return scriptedStep(answers().pge_work, 60_000);
    if (taskHas(body, BUSY)) return scriptedStep(schema ? answers(9, BUSY_STEPS)[schema] : undefined, 10);
    const score = taskHas(body, FAILING) ? 3 : 9;
    return scriptedStep(schema ? answers(score)[schema] : undefined, 40);
  });
  logs = mkdtempSync(join(tmpdir(), 'pge-follow-'));
  workers = await startWorkers(
    (role) => ({
      ...nats.env(role),
      OPENAI_BASE_URL: openai.url,
      OPENAI_API_KEY: 'sk-test-follow',
      PGE_MODEL: 'test-model',
    }),
    logs,
  );
}, 60_000);

afterAll(async () => {
  await Promise.all(workers.map((p) => p.stop('SIGKILL')));
  await openai?.close();
  await nats?.stop();
  rmSync(logs, { recursive: true, force: true });
  // Every process did its job within its credential, through the crash too.
  expect(nats.refusals()).toEqual([]);
}, 60_000);

/** `pge run --nats … --json` with the client credential: the run's result on stdout. */
const runRemote = (task: string, ...flags: string[]) =>
  startPge(['run', task, '--nats', nats.url, '--creds', nats.creds.client, '--json', ...flags], {
    OPENAI_API_KEY: 'sk-test-client',
  });

/** The closing event of the run whose result `pge run --nats --json` printed, as the stream holds it. */
async function closingOf(run: PgeProcess): Promise<RunEvent> {
  const { runId } = JSON.parse(run.stdout()) as HarnessResult;
  const events = await storedEvents(nats.connectOptions('observer'), `pge.run.${runId}.evt.>`);
  return events.reduce((a, b) => (b.seq > a.seq ? b : a));
}
const coordinator = () => workers[0]!;

describe('followers through faults', () => {
  const finished: RunEvent[] = [];

  it('a nats-server crash with five runs in flight: every follower ends, every run is stored whole and once', async () => {
    const callsBefore = openai.completions().length;
    const runs = [1, 2, 3, 4, 5].map((n) => runRemote(`${BUSY} ${n}`, '--follow-timeout', '30s'));
    // Every run is under way when the server hangs, dies and comes back. Model calls end while it
    // hangs: their results wait in its socket, unanswered, and are lost when it dies.
    await Promise.all(runs.map((run) => run.waitFor(/step 1\/8 /, 20_000)));
    await nats.restart(500, { crash: true, frozenMs: 3_000 });
    const codes = await Promise.all(runs.map((run) => run.exited()));
    expect(codes, runs.map((run) => run.stderr()).join('\n---\n')).toEqual([0, 0, 0, 0, 0]);
    let calls = 0;
    for (const run of runs) {
      const closing = await closingOf(run);
      expect(closing).toMatchObject({
        type: 'run.completed',
        payload: { passed: true, stepsTotal: BUSY_STEPS },
      });
      const events = await storedEvents(nats.connectOptions('observer'), `pge.run.${closing.runId}.evt.>`);
      // seqs 1..n, each once: no gap, no duplicate.
      expect(events.map((e) => e.seq).sort((a, b) => a - b)).toEqual(seqsUpTo(closing.seq));
      finished.push(closing);
      calls += events.filter((e) => e.type === 'model.call.completed').length;
    }
    // Every result sent during the outage was stored once it was over. A work item whose ack went
    // into the frozen server's socket is handed out again after the ack wait (at least once): at
    // most the calls in flight at the crash, one per run, are repeated, and never applied twice.
    const made = openai.completions().length - callsBefore;
    expect(made).toBeGreaterThanOrEqual(calls);
    expect(made - calls).toBeLessThanOrEqual(runs.length);
    for (const worker of workers) expect(worker.stderr()).not.toMatch(/cannot publish|failed/);
    // A publish that went unanswered during the outage was sent again, not reported as a failure.
    expect(coordinator().stderr()).not.toMatch(/failed to complete|cannot publish/);
  }, 90_000);

  it('pge follow shows a finished run from its start and exits with its code', async () => {
    const failing = runRemote(FAILING, '--max-retries', '0');
    expect(await failing.exited(), failing.stderr()).toBe(1);
    const failed = await closingOf(failing);
    for (const [closing, code] of [
      [finished[0]!, 0],
      [failed, 1],
    ] as const) {
      const follow = startPge(
        ['follow', closing.runId, '--nats', nats.url, '--creds', nats.creds.observer],
        {},
      );
      expect(await follow.exited(), follow.stderr()).toBe(code);
      expect(follow.stderr()).toMatch(/plan created: \d+ steps/);
      // As pge run prints it: the artifact, then the summary.
      expect(follow.stdout()).toMatch(/^## Step 1: Step 1/);
      expect(follow.stdout().endsWith(`\n\n${(closing.payload as { summary: string }).summary}\n`)).toBe(
        true,
      );
    }
    const json = startPge(['follow', failed.runId, '--json', '--from-seq', '5'], nats.env('observer'));
    expect(await json.exited()).toBe(1);
    // The result pge run --nats printed; only the harness id is each process's own.
    const result = JSON.parse(failing.stdout()) as HarnessResult;
    expect(JSON.parse(json.stdout())).toEqual({ ...result, harnessId: expect.any(String) });
    // From event 5 on: the plan (event 3) is not shown again, the steps are.
    expect(json.stderr()).not.toMatch(/plan created/);
    expect(json.stderr()).toMatch(/step 1\/3/);
    const unknown = startPge(
      ['follow', 'no-such-run', '--nats', nats.url, '--creds', nats.creds.observer],
      {},
    );
    expect(await unknown.exited()).toBe(2);
    expect(unknown.stderr()).toMatch(/the stream holds no event of run no-such-run/);
  }, 60_000);

  it('Ctrl-C stops a follower at once with 130, while its run goes on: pge run --nats, then pge follow', async () => {
    const run = runRemote(LEFT);
    await run.waitFor(/contract/, 20_000);
    const started = Date.now();
    run.child.kill('SIGINT');
    expect(await run.exited(), run.stderr()).toBe(130);
    // Not after --follow-timeout (10 min by default): at once.
    expect(Date.now() - started).toBeLessThan(5_000);
    const runId = /no longer following run (\S+); it goes on in the deployment/.exec(run.stderr())?.[1];
    expect(runId).toBeDefined();

    const follow = startPge(['follow', runId!, '--nats', nats.url], nats.env('observer'));
    await follow.waitFor(/contract/, 20_000);
    const again = Date.now();
    follow.child.kill('SIGINT');
    expect(await follow.exited(), follow.stderr()).toBe(130);
    expect(Date.now() - again).toBeLessThan(5_000);
    expect(follow.stderr()).toContain(`pge: to follow it again: pge follow ${runId} --nats ${nats.url}`);
  }, 60_000);

  it('a follower whose coordinator is gone exits 3 after --follow-timeout, with the command to follow again', async () => {
    const run = runRemote(HANGING, '--follow-timeout', '2s');
    await run.waitFor(/contract/, 20_000);
    // The work call hangs: the run's next event would come from this coordinator, which dies.
    for (
      let i = 0;
      i < 500 &&
      !openai.completions().some((r) => taskHas(r.body, HANGING) && schemaOf(r.body) === 'pge_work');
      i++
    )
      await new Promise((resolve) => setTimeout(resolve, 20));
    await coordinator().stop('SIGKILL');
    const started = Date.now();
    const code = await run.exited();
    expect(code, run.stderr()).toBe(3);
    expect(Date.now() - started).toBeLessThan(10_000);
    const runId = /pge follow (\S+) --nats/.exec(run.stderr())?.[1];
    expect(run.stderr()).toMatch(/no progress of run \S+ for 2 s after event \d+ \(step\.work\.requested\)/);
    // With the credential it connected with: the command works as printed.
    expect(run.stderr()).toContain(
      `to follow it again: pge follow ${runId} --nats ${nats.url} --creds ${nats.creds.client}\n`,
    );
    expect(run.stdout()).toBe('');
  }, 60_000);
});
