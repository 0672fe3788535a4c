import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { encodeUser, fmtCreds } from '@nats-io/jwt';
import { createUser, fromSeed } from '@nats-io/nkeys';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROLE_PERMISSIONS } from '../../src/bus/permissions.js';
import { subjects } from '../../src/bus/subjects.js';
import { writeNatsConfig } from '../../src/runtime/nats-config.js';
import { type SecuredNatsServer, startSecuredNatsServer } from '../support/nats-server.js';
import { type PgeProcess, startPge } from '../support/processes.js';

/**
 * Mistakes on a server started from `pge nats-config`, each told in one sentence (docs/security.md,
 * "Troubleshooting"): a worker started with a credential that cannot serve its role exits instead
 * of printing a stack trace every few seconds for ever; a submission with no coordinator running
 * says so within 5 s, not after the submission's 30 s; a worker whose credential is revoked exits 3.
 */

let nats: SecuredNatsServer;
let coordinator: PgeProcess;
const started: PgeProcess[] = [];

beforeAll(async () => {
  nats = await startSecuredNatsServer();
  coordinator = startPge(['worker', '--role', 'coordinator', '--demo'], nats.env('coordinator'));
  started.push(coordinator);
  await coordinator.waitFor(/ready/, 60_000);
}, 90_000);

afterAll(async () => {
  await Promise.all(started.map((p) => p.stop('SIGKILL')));
  await nats?.stop();
});

/** `pge worker --role <role>` with `creds`, started like any other process of the deployment. */
function worker(role: string, creds: string): PgeProcess {
  const process = startPge(['worker', '--role', role, '--demo', '--creds', creds, '--nats', nats.url], {});
  started.push(process);
  return process;
}

/**
 * A credential of `account` (a seed file under keys/) with `permissions`, written as `name`.creds:
 * one `pge nats-config` did not issue, or issued for what a role needed before.
 */
async function mint(
  account: string,
  name: string,
  permissions: { pub: string[]; sub: string[] },
): Promise<string> {
  const seed = (await readFile(join(nats.configDir, 'keys', account), 'utf8')).trim();
  const user = createUser();
  const jwt = await encodeUser(name, user, fromSeed(new TextEncoder().encode(seed)), {
    pub: { allow: permissions.pub },
    sub: { allow: permissions.sub },
    subs: -1,
    data: -1,
    payload: -1,
  });
  const creds = join(nats.configDir, `${name}.creds`);
  await writeFile(creds, fmtCreds(jwt, user), { mode: 0o600 });
  return creds;
}

/** The exit code, or 'still running' once `ms` passed: a worker in a loop never exits. */
function exitWithin(process: PgeProcess, ms: number): Promise<number | null | 'still running'> {
  return Promise.race([
    process.exited(),
    new Promise<'still running'>((resolve) => setTimeout(() => resolve('still running'), ms)),
  ]);
}

const linesOf = (text: string) => text.split('\n').filter((line) => line.trim() !== '');

describe('a worker whose credential cannot serve its role', () => {
  it("exits 2 naming the role of another role's credential: a generator with the evaluator's", async () => {
    const generator = worker('generator', nats.creds.evaluator);
    expect(await exitWithin(generator, 15_000), generator.stderr()).toBe(2);
    expect(linesOf(generator.stderr())).toEqual([
      expect.stringMatching(
        /^pge worker generator \(.+\): this credential \(.*evaluator\.creds\) is for the evaluator, not the generator: start the generator with generator\.creds of pge nats-config$/,
      ),
    ]);
  }, 30_000);

  it("exits 2 naming the role of another role's credential: a coordinator with the client's", async () => {
    const second = worker('coordinator', nats.creds.client);
    expect(await exitWithin(second, 15_000), second.stderr()).toBe(2);
    expect(linesOf(second.stderr())).toEqual([
      expect.stringMatching(/: this credential \(.*client\.creds\) is for the client, not the coordinator: /),
    ]);
  }, 30_000);

  it('exits 2 at the first permission its role needs and is refused, when the credential names no role', async () => {
    // The evaluator's permissions, with replies in the shared inbox: nothing says whose it is.
    const { publish, subscribe } = ROLE_PERMISSIONS.evaluator;
    const creds = await mint('evaluator-account.nk', 'nameless', {
      pub: [...publish.allow],
      sub: ['_INBOX.>', ...subscribe.allow.filter((s) => !s.startsWith('_INBOX'))],
    });
    const generator = worker('generator', creds);
    expect(await exitWithin(generator, 20_000), generator.stderr()).toBe(2);
    expect(linesOf(generator.stderr())).toEqual([
      expect.stringMatching(
        /: the server does not let this credential \(.*nameless\.creds\) publish to \$JS\.API\.CONSUMER\.INFO\.PGE_WORK\.pge-generator, which the generator must: it is another role's, or was issued by an earlier pge; start the generator with generator\.creds of pge nats-config \(--rotate after an upgrade\)$/,
      ),
    ]);
  }, 40_000);

  it("exits 2 when its role's credential was issued by an earlier pge, without what its role needs now", async () => {
    // A coordinator's credential from before coordinators answered pings.
    const { publish, subscribe } = ROLE_PERMISSIONS.coordinator;
    const creds = await mint('account.nk', 'coordinator-before-pings', {
      pub: [...publish.allow],
      sub: subscribe.allow.filter((s) => s !== subjects.coordinatorPing),
    });
    const second = worker('coordinator', creds);
    expect(await exitWithin(second, 20_000), second.stderr()).toBe(2);
    expect(linesOf(second.stderr())).toEqual([
      expect.stringMatching(
        /: the server does not let this credential \(.*coordinator-before-pings\.creds\) subscribe to pge\.coordinators\.ping, which the coordinator must: it is another role's, or was issued by an earlier pge; .* \(--rotate after an upgrade\)$/,
      ),
    ]);
  }, 40_000);

  // Last but one: it stops the coordinator (the streams and consumers it made stay).
  it('a submission says within 5 s that no coordinator runs', async () => {
    expect(await coordinator.stop()).toBe(0);
    const started = Date.now();
    const run = startPge(['run', 'Write a haiku', '--nats', nats.url, '--creds', nats.creds.client], {
      OPENAI_API_KEY: 'sk-test-none',
    });
    expect(await exitWithin(run, 15_000), run.stderr()).toBe(3);
    expect(Date.now() - started).toBeLessThan(5_000);
    expect(linesOf(run.stderr())).toEqual([
      expect.stringMatching(
        /^pge: no coordinator answered the submission of run \S+: is one running\? \(pge worker --role coordinator; no coordinator answered 2 pings within \d+ ms\)$/,
      ),
    ]);
    // So does a resume.
    const asked = Date.now();
    const resume = startPge(['resume', 'pge-some-run', '--nats', nats.url, '--creds', nats.creds.client], {});
    expect(await exitWithin(resume, 15_000), resume.stderr()).toBe(3);
    expect(Date.now() - asked).toBeLessThan(5_000);
    expect(linesOf(resume.stderr())).toEqual([
      expect.stringMatching(
        /^pge: no coordinator answered the resume of run pge-some-run: is one running\? \(pge worker --role coordinator; no coordinator answered 2 pings within \d+ ms\)$/,
      ),
    ]);
  }, 30_000);

  // Last: the rotation revokes every credential of the deployment, the coordinator's too.
  it('exits 3 in one sentence when the server stops accepting its credential (revoked)', async () => {
    const planner = worker('planner', nats.creds.planner);
    await planner.waitFor(/ready/, 30_000);
    await writeNatsConfig({ dir: nats.configDir, rotate: true });
    nats.reload();
    expect(await exitWithin(planner, 15_000), planner.stderr()).toBe(3);
    expect(linesOf(planner.stderr())).toEqual([
      expect.stringMatching(/^pge worker planner ready /),
      expect.stringMatching(
        /^pge worker planner \(.+\): the server no longer accepts this credential \(.*planner\.creds\) \(Authorization Violation\): it was revoked \(pge nats-config --rotate\) or is not this server's; start the planner with its current planner\.creds$/,
      ),
    ]);
  }, 40_000);
});
