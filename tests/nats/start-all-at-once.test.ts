import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { NATS_ROLES } from '../../src/bus/permissions.js';
import {
  closedRun,
  passingAnswer,
  startDeployment,
  submitRun,
  type TestDeployment,
} from '../support/deployment.js';
import { type SecuredNatsServer, startSecuredNatsServer } from '../support/nats-server.js';
import { type PgeProcess, startWorkersAtOnce } from '../support/processes.js';

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
let deployment: TestDeployment | undefined;
const processes: PgeProcess[] = [];

afterEach(async () => {
  await Promise.all(processes.splice(0).map((p) => p.stop('SIGTERM')));
  await deployment?.close();
  await nats?.stop();
  nats = deployment = undefined;
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
    const d = await startDeployment();
    deployment = d;
    d.openai.script((body) => passingAnswer(body, 0));
    const roles = [
      ['planner', []],
      ['generator', []],
      ['evaluator', []],
      ['persistence', ['--working-dir', d.logs]],
      ['coordinator', []],
    ] as const;
    await startWorkersAtOnce(roles, d.env, processes);
    const runId = await submitRun(d.client, 'a task for a deployment started at once');
    const events = await closedRun(d.client, runId, 20_000);
    expect(events.at(-1)).toMatchObject({ type: 'run.completed', payload: { passed: true } });
    for (const p of processes) expect(p.stderr()).not.toMatch(/cannot pull/);
  }, 60_000);
});
