import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { jetstreamManager } from '@nats-io/jetstream';
import { type ConnectionOptions, connect, type NatsConnection } from '@nats-io/transport-node';
import { EVENTS_STREAM, storedAfter } from '../../src/bus/nats-streams.js';
import type { NatsRole } from '../../src/bus/permissions.js';
import { SUBMIT_ANSWER_MS } from '../../src/bus/subjects.js';
import { readLogFile } from '../../src/persistence/index.js';
import type { RunEvent } from '../../src/schemas/index.js';
import { type FakeOpenAI, type FakeStep, startFakeOpenAI } from './fake-openai-server.js';
import { type SecuredNatsServer, startSecuredNatsServer } from './nats-server.js';
import { type PgeProcess, startPge } from './processes.js';
import { answers, schemaOf, scriptedStep } from './scripted-deployment.js';
import { storedEvents } from './stored-events.js';

export { schemaOf };

/**
 * The distributed deployment as users run it, for multi-process tests: `pge worker` processes on
 * a private nats-server started from `pge nats-config` (each process with its role's credential),
 * models served by a scripted OpenAI-compatible server that answers every call of a three-step
 * run, and clients that import nothing from pge (plain nats.js, with the `client` credential).
 */

/** A passing answer for every call of a run, after `delayMs`; anything else is a 400. */
// biome-ignore lint/suspicious/noExplicitAny: the request body as the SDK sent it.
export function passingAnswer(body: any, delayMs: number): FakeStep {
  return scriptedStep(answers()[schemaOf(body) ?? ''], delayMs);
}

/** A private nats-server with authorization on, a scripted model server and a directory for logs. */
export interface TestDeployment {
  readonly nats: SecuredNatsServer;
  readonly openai: FakeOpenAI;
  readonly logs: string;
  /** How an outside client connects (the `client` credential): for `submitRun`, `storedEvents`, … */
  readonly client: ConnectionOptions;
  /** The environment of a `pge` process of `role`: its credential, and the model server. */
  env(role: NatsRole): Record<string, string>;
  /**
   * Starts `pge worker --role <role> …extra` with its role's credential (and `extraEnv`) and waits
   * until it is ready.
   */
  worker(role: NatsRole, extra?: readonly string[], extraEnv?: Record<string, string>): Promise<PgeProcess>;
  /**
   * Stops every process still running (SIGTERM), the servers, and deletes the logs; returns the
   * exit codes and what the server refused (`SecuredNatsServer.refusals`).
   */
  close(): Promise<{ codes: (number | null)[]; refusals: string[] }>;
}

/** Starts the servers; workers are started by the test, each with `worker()`. */
export async function startDeployment(): Promise<TestDeployment> {
  const nats = await startSecuredNatsServer();
  const openai = await startFakeOpenAI();
  const logs = mkdtempSync(join(tmpdir(), 'pge-dist-'));
  const env = (role: NatsRole) => ({
    ...nats.env(role),
    OPENAI_BASE_URL: openai.url,
    OPENAI_API_KEY: 'sk-test-distributed',
    PGE_MODEL: 'test-model',
  });
  const processes: PgeProcess[] = [];
  return {
    nats,
    openai,
    logs,
    client: nats.connectOptions('client'),
    env,
    async worker(role, extra = [], extraEnv = {}) {
      const process = startPge(['worker', '--role', role, ...extra], { ...env(role), ...extraEnv });
      processes.push(process);
      await process.waitFor(/ready/, 30_000);
      return process;
    },
    async close() {
      const codes = await Promise.all(processes.map((p) => p.stop('SIGTERM')));
      await openai.close();
      await nats.stop();
      rmSync(logs, { recursive: true, force: true });
      return { codes, refusals: nats.refusals() };
    },
  };
}

/**
 * Submits a run as any client would (connecting with `connection`), with the submission's `options`
 * when given (`{ approve: ['plan'] }`), and returns its id.
 */
export async function submitRun(
  connection: ConnectionOptions,
  task: string,
  options?: object,
): Promise<string> {
  const nc = await connect(connection);
  try {
    const reply = await nc.request('pge.runs.submit', JSON.stringify({ task, options }), {
      timeout: SUBMIT_ANSWER_MS,
    });
    return reply.json<{ runId: string }>().runId;
  } finally {
    await nc.close();
  }
}

/** Runs `pge <args>` as a client of `d` (the `client` credential); resolves with its exit code and output. */
export async function pgeAsClient(d: TestDeployment, args: readonly string[]) {
  const cli = startPge([...args, '--nats', d.nats.url, '--creds', d.nats.creds.client], {});
  const code = await cli.exited();
  return { code, stdout: cli.stdout(), stderr: cli.stderr() };
}

/** Polls `probe` every 50 ms until it returns a value that `done` accepts; throws after `timeoutMs`. */
export async function until<T>(
  probe: () => Promise<T> | T,
  done: (value: T) => boolean,
  what: string,
  timeoutMs = 20_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (done(value)) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}: ${JSON.stringify(value)}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** True when the run's closing event is among `events`. */
export const closed = (events: readonly RunEvent[]): boolean =>
  events.some((e) => e.type === 'run.completed' || e.type === 'run.failed');

/** The stored events of a run, once its closing event is stored. */
export function closedRun(
  connection: ConnectionOptions,
  runId: string,
  timeoutMs = 20_000,
): Promise<RunEvent[]> {
  return until(
    () => storedEvents(connection, `pge.run.${runId}.evt.>`),
    closed,
    `run ${runId} to close`,
    timeoutMs,
  );
}

/**
 * The events of run `runId` as the persistence worker wrote them to its log in `logs`, once the
 * log holds `count` of them (the worker writes after the stream stores).
 */
export function loggedRun(logs: string, runId: string, count: number): Promise<RunEvent[]> {
  return until(
    async () => {
      const file = readdirSync(logs).find((f) => f.includes(runId));
      // A log read in the middle of a write may not parse yet: read it again.
      return file ? readLogFile(join(logs, file)).catch(() => [] as RunEvent[]) : [];
    },
    (logged) => logged.length === count,
    `the log of run ${runId} to hold ${count} events`,
  );
}

/**
 * Reads a run's events from PGE_EVENTS as pge's readers do (lookups from the stream's leader, from
 * the first, looking again while there is nothing new), calling `onEvent` on each as it arrives,
 * until the closing event.
 */
export async function readRunToEnd(
  nc: NatsConnection,
  runId: string,
  onEvent: (event: RunEvent) => Promise<void> | void = () => undefined,
): Promise<RunEvent[]> {
  const jsm = await jetstreamManager(nc);
  const events: RunEvent[] = [];
  for (let seq = 1; events.at(-1)?.type !== 'run.completed' && events.at(-1)?.type !== 'run.failed'; ) {
    const m = await storedAfter(jsm, EVENTS_STREAM, `pge.run.${runId}.evt.>`, seq);
    if (m === null) {
      await new Promise((resolve) => setTimeout(resolve, 20));
      continue;
    }
    seq = m.seq + 1;
    const event = m.json<RunEvent>();
    events.push(event);
    await onEvent(event);
  }
  return events;
}
