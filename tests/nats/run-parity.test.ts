import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { HarnessResult } from '../../src/api/result.js';
import type { NatsRole } from '../../src/bus/permissions.js';
import { PRESENCE_INTERVAL_MS } from '../../src/bus/subjects.js';
import { type FakeOpenAI, startFakeOpenAI } from '../support/fake-openai-server.js';
import { type SecuredNatsServer, startSecuredNatsServer } from '../support/nats-server.js';
import { type PgeProcess, startPge, startWorkersAtOnce } from '../support/processes.js';
import { answers, schemaOf, scriptedStep, startWorkers, taskHas } from '../support/scripted-deployment.js';
import { storedEvents } from '../support/stored-events.js';

/**
 * `pge run --nats` prints what `pge run` prints: the same scripted run, in a deployment of real
 * `pge worker` processes on a private nats-server and in one process, gives the same result object
 * with `--json` and the same output by `--output-type`; only what differs between two runs (ids,
 * times, where the log is) differs. Flags that would have no effect on a deployment are refused.
 */

const MODEL = { OPENAI_API_KEY: 'sk-test-parity', PGE_MODEL: 'test-model' };
/** A task whose every model call is refused: the run fails on an error. */
const REFUSED = 'a task the model refuses';

let nats: SecuredNatsServer;
let openai: FakeOpenAI;
let logs: string;
let here: string;
let workers: PgeProcess[] = [];

beforeAll(async () => {
  nats = await startSecuredNatsServer();
  openai = await startFakeOpenAI();
  openai.script((body) => {
    if (taskHas(body, REFUSED)) return { status: 400, error: { message: 'refused by the test' } };
    const schema = schemaOf(body);
    return scriptedStep(schema ? answers(9)[schema] : undefined, 5);
  });
  logs = mkdtempSync(join(tmpdir(), 'pge-parity-logs-'));
  here = mkdtempSync(join(tmpdir(), 'pge-parity-client-'));
  const env = (role: NatsRole) => ({
    ...nats.env(role),
    ...MODEL,
    OPENAI_BASE_URL: openai.url,
    // The coordinator's own model setting is not what serves the roles: run.started must not name it.
    ...(role === 'coordinator' ? { PGE_MODEL: 'the-coordinators-model' } : {}),
  });
  workers = await startWorkers(env, logs);
  // A second generator, on another model: a role served by two models names both.
  await startWorkersAtOnce(
    [['generator', ['--worker-id', 'gen-other']]],
    (role) => ({ ...env(role), PGE_MODEL: 'other-model' }),
    workers,
  );
  // Every worker has said which model serves it (it says so every PRESENCE_INTERVAL_MS).
  await new Promise((resolve) => setTimeout(resolve, PRESENCE_INTERVAL_MS + 500));
}, 60_000);

afterAll(async () => {
  await Promise.all(workers.map((p) => p.stop('SIGKILL')));
  await openai?.close();
  await nats?.stop();
  rmSync(logs, { recursive: true, force: true });
  rmSync(here, { recursive: true, force: true });
}, 60_000);

/** `pge run "<task>" …flags` on the deployment, with the client credential. */
async function remote(task: string, ...flags: string[]): Promise<PgeProcess> {
  const run = startPge(['run', task, '--nats', nats.url, '--creds', nats.creds.client, ...flags], {
    OPENAI_API_KEY: 'sk-test-client',
  });
  await run.exited();
  return run;
}

/** `pge run "<task>" …flags` in one process, on the same scripted model, in a directory of its own. */
async function embedded(task: string, ...flags: string[]): Promise<PgeProcess> {
  const run = startPge(['run', task, ...flags], { ...MODEL, OPENAI_BASE_URL: openai.url }, here);
  await run.exited();
  return run;
}

/** A result with what two runs of one script cannot share (ids, times, the log's place) taken out. */
function comparable(result: HarnessResult) {
  const { harnessId: _h, runId: _r, outputPath: _o, totalDuration: _d, summary, ...rest } = result;
  const byPhase = Object.fromEntries(
    Object.entries(rest.usageByPhase).map(([phase, usage]) => [phase, { ...usage, latencyMs: 0 }]),
  );
  return {
    ...rest,
    usageByPhase: byPhase,
    summary: summary.replace(/[\d.]+s elapsed\. Shared state: .*/, ''),
  };
}

describe('pge run --nats prints what pge run prints', () => {
  it('--json: the same result object as an embedded run of the same script', async () => {
    const [onNats, local] = await Promise.all([
      remote('Write a haiku', '--json'),
      embedded('Write a haiku', '--json'),
    ]);
    expect(await onNats.exited(), onNats.stderr()).toBe(0);
    expect(await local.exited(), local.stderr()).toBe(0);
    const a = JSON.parse(onNats.stdout()) as HarnessResult;
    const b = JSON.parse(local.stdout()) as HarnessResult;
    expect(Object.keys(a).sort()).toEqual(Object.keys(b).sort());
    expect(comparable(a)).toEqual(comparable(b));
    expect(a).toMatchObject({ passed: true, status: 'completed', totalSteps: 3, totalStepsCompleted: 3 });
    expect(a.finalArtifact).toContain('## Step 1: Step 1\n\nthe work');
    expect(a.totalDuration).toBeGreaterThan(0);
    // The log is where the persistence worker writes it: its file name, in its --working-dir.
    expect(a.outputPath).toBe(`pge_shared_state_${a.runId}.md`);
    expect(existsSync(join(logs, a.outputPath))).toBe(true);
    expect(a.summary).toContain(`Shared state: ${a.outputPath}`);
    expect(onNats.stderr()).toContain(
      `the log of run ${a.runId} is ${a.outputPath}, written by the persistence worker in its --working-dir`,
    );
  }, 60_000);

  it('a run that fails on an error: exit 3, the error on stderr, and the same result with --json', async () => {
    const [onNats, local] = await Promise.all([remote(REFUSED, '--json'), embedded(REFUSED, '--json')]);
    expect(await local.exited(), local.stderr()).toBe(3);
    expect(await onNats.exited(), onNats.stderr()).toBe(3);
    const a = JSON.parse(onNats.stdout()) as HarnessResult;
    const b = JSON.parse(local.stdout()) as HarnessResult;
    expect(comparable(a)).toEqual(comparable(b));
    expect(a).toMatchObject({ status: 'failed', passed: false, error: { name: 'ModelRequestError' } });
    // The sentence embedded pge prints for the error, then where the log is.
    const said = (run: PgeProcess) => run.stderr().match(/^pge: (?!the log).*refused by the test.*$/m)?.[0];
    expect(said(onNats)).toBeDefined();
    expect(said(onNats)).toBe(said(local));
  }, 60_000);

  it('prints the artifact and the summary, and honours --output-type', async () => {
    const final = await remote('Write a limerick');
    expect(await final.exited(), final.stderr()).toBe(0);
    expect(final.stdout()).toMatch(
      /^## Step 1: Step 1\n\nthe work\n\n## Step 2: Step 2\n\nthe work\n\n## Step 3: Step 3\n\nthe work\n\nPGE Harness completed: 3\/3 steps passed.*Shared state: pge_shared_state_\S+\.md\n$/,
    );
    const [onNats, local] = await Promise.all([
      remote('Write a sonnet', '--output-type', 'json'),
      embedded('Write a sonnet', '--output-type', 'json'),
    ]);
    expect(await onNats.exited(), onNats.stderr()).toBe(0);
    // A document on stdout alone, the summary with the progress, as embedded.
    const transcript = JSON.parse(onNats.stdout()) as { role: string; content: string }[];
    const localTranscript = JSON.parse(local.stdout()) as { role: string; content: string }[];
    expect(transcript.map((m) => m.role)).toEqual(localTranscript.map((m) => m.role));
    expect(transcript.slice(0, -1)).toEqual(localTranscript.slice(0, -1));
    expect(onNats.stderr()).toMatch(/PGE Harness completed: 3\/3 steps passed/);
  }, 60_000);

  it('refuses flags that would have no effect on a deployment, with exit 2 and where they belong', async () => {
    const refusals: [string[], RegExp][] = [
      [
        ['--model', 'gpt-4.1'],
        /--model has no effect on a run on NATS \(--nats\): the role workers .* hold the models/,
      ],
      [
        ['--log', 'mine.md'],
        /--log has no effect on a run on NATS \(--nats\): the persistence worker writes/,
      ],
      [
        ['--working-dir', 'runs'],
        /--working-dir has no effect on a run on NATS \(--nats\): .*pge worker --role persistence/,
      ],
      [['--no-tools'], /--no-tools has no effect on a run on NATS \(--nats\): .*pge worker/],
      [['--validate', 'npm test'], /--validate has no effect .*give it to `pge worker --role generator`/],
    ];
    for (const [flags, message] of refusals) {
      // Refused before connecting: nothing listens on port 1.
      const run = startPge(['run', 'Write a haiku', '--nats', 'nats://127.0.0.1:1', ...flags], MODEL, here);
      expect(await run.exited(), flags.join(' ')).toBe(2);
      expect(run.stderr()).toMatch(message);
    }
    // What does act under --nats is taken: a run setting, and how the run is shown.
    const taken = await remote('Write a ballad', '--max-retries', '1', '--verbose', '--output-type', 'str');
    expect(await taken.exited(), taken.stderr()).toBe(0);
    expect(taken.stdout()).toMatch(/^User: Write a ballad/);
  }, 60_000);

  it('run.started names the models the workers say serve each role, two for a role served by two', async () => {
    const run = await remote('Write an ode', '--json');
    expect(await run.exited(), run.stderr()).toBe(0);
    const { runId } = JSON.parse(run.stdout()) as HarnessResult;
    const events = await storedEvents(nats.connectOptions('client'), `pge.run.${runId}.evt.>`);
    const started = events.find((e) => e.type === 'run.started');
    expect(started?.type === 'run.started' && started.payload.settings.models).toEqual({
      planner: 'test-model',
      generator: 'other-model, test-model',
      evaluator: 'test-model',
    });
    // Each call names the model of the worker that made it.
    const calls = events.flatMap((e) => (e.type === 'model.call.completed' ? [e.payload] : []));
    expect(calls.length).toBeGreaterThan(0);
    for (const call of calls)
      expect(call.model).toBe(call.worker === 'gen-other' ? 'other-model' : 'test-model');
  }, 60_000);

  it('refuses --max-cost while a worker has no price for its model, as an embedded run does', async () => {
    const [onNats, local] = await Promise.all([
      remote('Write an epic', '--max-cost', '1'),
      embedded('Write an epic', '--max-cost', '1'),
    ]);
    expect(await local.exited(), local.stderr()).toBe(2);
    expect(local.stderr()).toMatch(/maxCostUsd cannot be kept: no price is known for model test-model/);
    expect(await onNats.exited(), onNats.stderr()).toBe(2);
    expect(onNats.stderr()).toMatch(
      /maxCostUsd cannot be kept: no price is known for .*test-model \((planner|generator|evaluator) worker [\w-]+\).*whose calls would count as free; give the workers a price \(pge worker --price /,
    );
    expect(onNats.stderr()).toMatch(/other-model \(generator worker gen-other\)/);
    // Refused before it started: no plan was asked for.
    expect(onNats.stderr()).not.toMatch(/plan created/);
  }, 60_000);

  it("lets a worker speak for its own role only: a presence on another role's subject is refused", async () => {
    const admin = await connect(nats.connectOptions('admin'));
    const heard: string[] = [];
    try {
      admin.subscribe('pge.workers.*', {
        callback: (_error, msg) => void heard.push(`${msg.subject} ${msg.json<{ worker: string }>().worker}`),
      });
      await admin.flush();
      const forge = async (as: NatsRole, role: string) => {
        const nc = await connect(nats.connectOptions(as));
        try {
          const presence = {
            role,
            worker: `forged-by-${as}`,
            model: 'gpt-4.1',
            priced: true,
            ts: new Date().toISOString(),
          };
          nc.publish(`pge.workers.${role}`, JSON.stringify(presence));
          await nc.flush();
        } finally {
          await nc.close().catch(() => undefined);
        }
      };
      await forge('planner', 'generator');
      await forge('client', 'planner');
      await forge('evaluator', 'evaluator');
      // Long enough for every real worker to say it is there again.
      await new Promise((resolve) => setTimeout(resolve, PRESENCE_INTERVAL_MS + 300));
      expect(heard.filter((line) => line.includes('forged-by-'))).toEqual([
        'pge.workers.evaluator forged-by-evaluator',
      ]);
      // The real workers are heard all the while.
      expect(heard.some((line) => line.startsWith('pge.workers.generator gen-other'))).toBe(true);
      expect(nats.refusals().filter((line) => line.includes('Subject "pge.workers.'))).toHaveLength(2);
    } finally {
      await admin.close();
    }
  }, 30_000);
});
