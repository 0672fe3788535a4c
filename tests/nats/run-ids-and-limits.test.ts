import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type JetStreamManager, jetstreamManager } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NatsRole } from '../../src/bus/permissions.js';
import { SUBMIT_ANSWER_MS } from '../../src/bus/subjects.js';
import { readLogFile } from '../../src/persistence/index.js';
import type { RunEvent } from '../../src/schemas/index.js';
import { readRunToEnd } from '../support/deployment.js';
import { type SecuredNatsServer, startSecuredNatsServer } from '../support/nats-server.js';
import { type PgeProcess, startPge } from '../support/processes.js';

/**
 * Run ids and limits on a deployment of real `pge worker` processes (demo models) on a private
 * nats-server started from `pge nats-config`, driven by a client that imports nothing from pge and
 * holds the `client` credential: a run id is never reused (a resubmission within JetStream's
 * 2-minute duplicate window is refused, by the coordinator that ran it and by one that never saw
 * it), a distinct run is never de-duplicated, the coordinators apply the stream limits of their
 * config file and flags (no other role may change a stream), and a task over the limit or with a
 * NUL is refused.
 */

const HOUR = 3_600_000;
const MIB = 1024 ** 2;

let nats: SecuredNatsServer;
let logs: string;
let configFile: string;
let nc: NatsConnection;
let jsm: JetStreamManager;
const processes: PgeProcess[] = [];
let coordinator: PgeProcess;

function worker(role: NatsRole, extra: string[] = []): PgeProcess {
  // In the test's directory: the demo generator writes its deliverables into workspaces there.
  const p = startPge(
    ['worker', '--role', role, '--demo', '--config', configFile, ...extra],
    nats.env(role),
    logs,
  );
  processes.push(p);
  return p;
}

beforeAll(async () => {
  nats = await startSecuredNatsServer();
  logs = mkdtempSync(join(tmpdir(), 'pge-limits-'));
  configFile = join(logs, 'pge.config.json');
  // One config file for every worker: each applies the stream limits it is given.
  writeFileSync(
    configFile,
    JSON.stringify({ streamMaxAgeMs: HOUR, streamMaxBytes: 256 * MIB, maxTaskBytes: 2048 }),
  );
  coordinator = worker('coordinator');
  worker('persistence', ['--working-dir', logs]);
  for (const role of ['planner', 'generator', 'evaluator'] as const) worker(role);
  await Promise.all(processes.map((p) => p.waitFor(/ready/)));
  nc = await connect(nats.connectOptions('client'));
  jsm = await jetstreamManager(nc);
}, 60_000);

afterAll(async () => {
  await nc?.close();
  const codes = await Promise.all(processes.map((p) => p.stop('SIGTERM')));
  await nats?.stop();
  rmSync(logs, { recursive: true, force: true });
  expect(codes).toEqual(processes.map(() => 0));
  // Every process did its job within its credential.
  expect(nats.refusals()).toEqual([]);
}, 60_000);

/** Submits on `pge.runs.submit` as any NATS client does; resolves with the reply. */
async function submit(body: object): Promise<{ runId?: string; error?: { name: string; message: string } }> {
  const reply = await nc.request('pge.runs.submit', JSON.stringify(body), { timeout: SUBMIT_ANSWER_MS });
  return reply.json();
}

/** Messages PGE_EVENTS holds for one run. */
async function storedEvents(runId: string): Promise<number> {
  const info = await jsm.streams.info('PGE_EVENTS', { subjects_filter: `pge.run.${runId}.evt.>` });
  return Object.values(info.state.subjects ?? {}).reduce((n, count) => n + count, 0);
}

/** The run's log as the persistence worker wrote it, once it holds `count` events. */
async function loggedEvents(runId: string, count: number): Promise<RunEvent[]> {
  let logged: RunEvent[] = [];
  for (let i = 0; i < 200 && logged.length < count; i++) {
    await new Promise((r) => setTimeout(r, 50));
    logged = await readLogFile(join(logs, `pge_shared_state_${runId}.md`)).catch(() => []);
  }
  return logged;
}

const isOneRun = (events: RunEvent[], runId: string) =>
  events.every((e, i) => e.runId === runId && e.seq === i + 1 && e.id.startsWith(`${runId}-${i + 1}-`));

describe('run ids on NATS', () => {
  it('refuses a reused run id within the duplicate window, on the coordinator that ran it and on a new one', async () => {
    const runId = 'chosen-run-id';
    const started = Date.now();
    expect(await submit({ task: 'the first run', runId })).toEqual({ runId });
    const events = await readRunToEnd(nc, runId);
    expect(isOneRun(events, runId)).toBe(true);
    expect(events.at(-1)).toMatchObject({ type: 'run.completed', payload: { passed: true } });

    const refusal = {
      error: {
        name: 'ConfigurationError',
        message: expect.stringContaining(`run id ${runId} is taken`),
        retryable: false,
      },
    };
    // The coordinator that ran it remembers it.
    expect(await submit({ task: 'the same id again', runId })).toEqual(refusal);
    // A coordinator that never saw it finds its events in PGE_EVENTS.
    await coordinator.stop('SIGTERM');
    coordinator = worker('coordinator');
    await coordinator.waitFor(/ready/);
    expect(await submit({ task: 'and once more', runId })).toEqual(refusal);
    expect(Date.now() - started).toBeLessThan(120_000); // all within JetStream's duplicate window

    // Nothing of the refused submissions reached the stream or the log.
    expect(await storedEvents(runId)).toBe(events.length);
    expect(await loggedEvents(runId, events.length)).toEqual(events);
    expect(coordinator.stderr()).not.toMatch(/run chosen-run-id started/);
  }, 60_000);

  it('never de-duplicates a distinct run, even with an id that extends another', async () => {
    const ids = ['twin', 'twin-1', 'twin-1-2'];
    const replies = await Promise.all(ids.map((runId) => submit({ task: `run ${runId}`, runId })));
    expect(replies).toEqual(ids.map((runId) => ({ runId })));
    for (const runId of ids) {
      const events = await readRunToEnd(nc, runId);
      expect(isOneRun(events, runId)).toBe(true);
      expect(events.at(-1)).toMatchObject({ type: 'run.completed', payload: { passed: true } });
      expect(await storedEvents(runId)).toBe(events.length);
      expect(await loggedEvents(runId, events.length)).toEqual(events);
    }
  }, 60_000);
});

describe('limits on NATS', () => {
  /** `[max_age in ms, max_bytes]` of every pge stream, read back from the server. */
  async function streamLimits(): Promise<[number, number][]> {
    const read: [number, number][] = [];
    for (const name of ['PGE_EVENTS', 'PGE_WORK', 'PGE_RESULTS']) {
      const { config } = await jsm.streams.info(name);
      read.push([config.max_age / 1e6, config.max_bytes]);
    }
    return read;
  }

  it('gives the streams the limits of the workers’ config file, and a coordinator’s flag overrides it', async () => {
    const fromConfig: [number, number] = [HOUR, 256 * MIB];
    const fromFlags: [number, number] = [2 * 24 * HOUR, 128 * MIB];
    expect(await streamLimits()).toEqual([fromConfig, fromConfig, fromConfig]);
    // A role worker's credential may not change a stream: its flags leave the limits as they are.
    const planner = worker('planner', ['--stream-max-age', '3d', '--stream-max-bytes', '64M']);
    await planner.waitFor(/ready/);
    expect(await streamLimits()).toEqual([fromConfig, fromConfig, fromConfig]);
    const another = worker('coordinator', ['--stream-max-age', '2d', '--stream-max-bytes', '128M']);
    await another.waitFor(/ready/);
    expect(await streamLimits()).toEqual([fromFlags, fromFlags, fromFlags]);
    // One coordinator again, so that the next test's submissions all reach `coordinator`.
    expect(await another.stop('SIGTERM')).toBe(0);
    // A client that only submits and follows runs leaves the limits as the workers set them.
    const run = startPge(['run', 'Write a haiku', '--nats', nats.url, '--creds', nats.creds.client], {});
    expect(await run.exited(), run.stderr()).toBe(0);
    expect((await streamLimits())[0]).toEqual(fromFlags);
  }, 60_000);

  it('ends a role worker that cannot start once connected (no API key) with exit 2, at once', async () => {
    const started = Date.now();
    const worker = startPge(['worker', '--role', 'planner'], { ...nats.env('planner'), OPENAI_API_KEY: '' });
    expect(await worker.exited(), worker.stderr()).toBe(2);
    expect(worker.stderr()).toContain('OPENAI_API_KEY is not set');
    expect(worker.stderr()).not.toContain('ready');
    // Its connection to the server no longer holds the process.
    expect(Date.now() - started).toBeLessThan(15_000);
  }, 60_000);

  it('refuses a task over the coordinator’s maxTaskBytes, or with a NUL, and starts no run', async () => {
    const over = await submit({ task: 'x'.repeat(3000), runId: 'too-long' });
    expect(over.error?.message).toContain('the task is 3000 bytes, more than maxTaskBytes allows (2048)');
    const nul = await submit({ task: 'binary\u0000data', runId: 'with-a-nul' });
    expect(nul.error?.message).toMatch(/NUL character \(at character 6\)/);
    expect(await storedEvents('too-long')).toBe(0);
    expect(await storedEvents('with-a-nul')).toBe(0);

    // pge run --nats: its own limit refuses before it connects; the coordinator's refusal is exit 2 too.
    const local = startPge(
      ['run', 'y'.repeat(600), '--max-task-bytes', '512', '--nats', 'nats://127.0.0.1:1'],
      {},
    );
    expect(await local.exited()).toBe(2);
    expect(local.stderr()).toMatch(/the task is 600 bytes, more than maxTaskBytes allows \(512\)/);
    const remote = startPge(['run', 'z'.repeat(3000), '--nats', nats.url, '--creds', nats.creds.client], {});
    expect(await remote.exited()).toBe(2);
    expect(remote.stderr()).toMatch(/the task is 3000 bytes, more than maxTaskBytes allows \(2048\)/);
    expect(coordinator.stderr()).not.toMatch(/started: (x|z){80}/);
  }, 60_000);
});
