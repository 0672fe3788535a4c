import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { NATS_ROLES, type NatsRole } from '../../src/bus/permissions.js';
import { closedRun, passingAnswer, submitRun } from '../support/deployment.js';
import { type FakeOpenAI, startFakeOpenAI } from '../support/fake-openai-server.js';
import { type SecuredNatsServer, startSecuredNatsServer } from '../support/nats-server.js';
import { type PgeProcess, startPge } from '../support/processes.js';

/**
 * A deployment whose processes all start at the same moment on a fresh server from `pge
 * nats-config`. nats-server 2.9.10 registers an account at its first use; when connections of
 * different accounts arrive together, two registrations of `PGE` can race, and an account built
 * during the losing one keeps imports into a copy of `PGE` that nothing serves: its role's pulls and
 * requests then go unanswered (docs/distributed.md). The generated
 * configuration has the system account import from `PGE`, so the server registers every account
 * while it starts, before it takes a connection.
 */

let nats: SecuredNatsServer | undefined;
let openai: FakeOpenAI | undefined;
let logs: string | undefined;
const processes: PgeProcess[] = [];

afterEach(async () => {
  await Promise.all(processes.splice(0).map((p) => p.stop('SIGTERM')));
  await openai?.close();
  await nats?.stop();
  if (logs) rmSync(logs, { recursive: true, force: true });
  nats = openai = logs = undefined;
});

/** The accounts a configuration preloads (the system account's and every role's), by public key. */
function preloadedAccounts(configFile: string): string[] {
  const config = readFileSync(configFile, 'utf8');
  const preload = config.slice(config.indexOf('resolver_preload: {'));
  return [...preload.matchAll(/^\s+(A[A-Z0-9]{55}): /gm)].map((m) => m[1]!);
}

describe('a fresh server from pge nats-config', () => {
  it('has registered every account before any client connects', async () => {
    nats = await startSecuredNatsServer({ monitor: true });
    const accounts = preloadedAccounts(join(nats.configDir, 'nats-server.conf'));
    expect(accounts).toHaveLength(NATS_ROLES.length + 1); // one per role, and the system account
    const registered = (await (await fetch(`${nats.monitorUrl}/accountz`)).json()) as { accounts: string[] };
    expect(registered.accounts).toEqual(expect.arrayContaining(accounts));
    const connections = (await (await fetch(`${nats.monitorUrl}/connz`)).json()) as {
      num_connections: number;
    };
    expect(connections.num_connections).toBe(0);
  });
});

describe('every role started at the same moment', () => {
  it('serves runs', async () => {
    nats = await startSecuredNatsServer();
    openai = await startFakeOpenAI();
    openai.script((body) => passingAnswer(body, 0));
    logs = mkdtempSync(join(tmpdir(), 'pge-all-at-once-'));
    const env = (role: NatsRole) => ({
      ...nats!.env(role),
      OPENAI_BASE_URL: openai!.url,
      OPENAI_API_KEY: 'sk-test-all-at-once',
      PGE_MODEL: 'test-model',
    });
    const roles = [
      ['planner', []],
      ['generator', []],
      ['evaluator', []],
      ['persistence', ['--working-dir', logs]],
      ['coordinator', []],
    ] as const;
    for (const [role, flags] of roles)
      processes.push(startPge(['worker', '--role', role, ...flags], env(role)));
    await Promise.all(processes.map((p) => p.waitFor(/ready/, 30_000)));
    const runId = await submitRun(nats.connectOptions('client'), 'a task for a deployment started at once');
    const events = await closedRun(nats.connectOptions('client'), runId, 20_000);
    expect(events.at(-1)).toMatchObject({ type: 'run.completed', payload: { passed: true } });
    for (const p of processes) expect(p.stderr()).not.toMatch(/cannot pull/);
  }, 60_000);
});
