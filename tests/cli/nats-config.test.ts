import { mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Account, decode, encodeUser, fmtCreds } from '@nats-io/jwt';
import { createUser, fromSeed } from '@nats-io/nkeys';
import { connect, credsAuthenticator } from '@nats-io/transport-node';
import { afterEach, describe, expect, it } from 'vitest';
import { NATS_ROLES, type NatsRole, ROLE_PERMISSIONS } from '../../src/bus/permissions.js';
import { subjectMatches } from '../../src/bus/subjects.js';
import { writeNatsConfig } from '../../src/runtime/nats-config.js';
import { freePort, startNatsServer } from '../support/nats-server.js';
import { startPge } from '../support/processes.js';
import { runCli } from './run-cli.js';

/** `pge nats-config`: the files it writes, what they hold, and what re-running and rotating do. */

const dirs: string[] = [];
async function freshDir(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'pge-nats-config-test-'));
  dirs.push(dir);
  return dir;
}
afterEach(async () => {
  await Promise.all(dirs.splice(0).map((dir) => rm(dir, { recursive: true, force: true })));
});

const mode = async (file: string) => (await stat(file)).mode & 0o777;

/** Whether `role` may publish on `subject`: an allow entry matches and no deny entry does. */
function mayPublish(role: NatsRole, subject: string): boolean {
  const { allow, deny } = ROLE_PERMISSIONS[role].publish;
  return allow.some((p) => subjectMatches(p, subject)) && !deny.some((p) => subjectMatches(p, subject));
}

describe('pge nats-config', () => {
  it('writes a server config without secrets and one owner-only credential per role', async () => {
    const dir = await freshDir();
    const cli = await runCli(['nats-config', '--dir', dir, '--port', '14222', '--monitor-port', '0'], {
      cwd: dir,
    });
    expect(cli.code, cli.stderr).toBe(0);
    const files = (await readdir(dir)).sort();
    expect(files).toEqual([...NATS_ROLES.map((role) => `${role}.creds`), 'keys', 'nats-server.conf'].sort());
    for (const role of NATS_ROLES) {
      const creds = await readFile(join(dir, `${role}.creds`), 'utf8');
      expect(creds).toMatch(/-----BEGIN NATS USER JWT-----/);
      expect(creds).toMatch(/-----BEGIN USER NKEY SEED-----\nSU/);
      expect(await mode(join(dir, `${role}.creds`))).toBe(0o600);
    }
    expect(await mode(join(dir, 'keys'))).toBe(0o700);
    // One account per role but the coordinator's, whose seeds only the owner reads.
    const keys = (await readdir(join(dir, 'keys'))).filter((file) => file.endsWith('.nk')).sort();
    expect(keys).toEqual(
      ['account.nk', 'operator.nk', 'system.nk', ...NATS_ROLES.slice(1).map((r) => `${r}-account.nk`)].sort(),
    );
    for (const file of keys) expect(await mode(join(dir, 'keys', file))).toBe(0o600);
    const config = await readFile(join(dir, 'nats-server.conf'), 'utf8');
    expect(config).toMatch(/^listen: "0\.0\.0\.0:14222"$/m);
    expect(config).not.toMatch(/^http:/m);
    expect(config).toMatch(/^resolver: MEMORY$/m);
    // Seeds (S…) appear nowhere in the config; the output names files, never their content.
    expect(config).not.toMatch(/\bS[OAU][A-Z2-7]{50,}/);
    expect(cli.stdout).not.toMatch(/\bS[OAU][A-Z2-7]{50,}|eyJ/);
    expect(cli.stdout).toMatch(/start the server: nats-server -c .*nats-server\.conf/);
  });

  it('writes one owner-only config per server of a cluster, routed to the others, and goes back to one server', async () => {
    const dir = await freshDir();
    const cli = await runCli(
      ['nats-config', '--dir', dir, '--cluster', '3', '--cluster-hosts', 'nats-1, nats-2,nats-3'],
      { cwd: dir },
    );
    expect(cli.code, cli.stderr).toBe(0);
    expect((await readdir(dir)).filter((file) => file.endsWith('.conf')).sort()).toEqual([
      'nats-server-1.conf',
      'nats-server-2.conf',
      'nats-server-3.conf',
    ]);
    const password = (await readFile(join(dir, 'keys', 'route-password'), 'utf8')).trim();
    expect(password).toMatch(/^[\w-]{32}$/);
    expect(await mode(join(dir, 'keys', 'route-password'))).toBe(0o600);
    for (const i of [1, 2, 3]) {
      const file = join(dir, `nats-server-${i}.conf`);
      expect(await mode(file)).toBe(0o600);
      const config = await readFile(file, 'utf8');
      expect(config).toMatch(new RegExp(`^server_name: pge-${i}$`, 'm'));
      // Every host on the same ports; each server its own store.
      expect(config).toMatch(/^listen: "0\.0\.0\.0:4222"$/m);
      expect(config).toMatch(/^ {2}listen: "0\.0\.0\.0:6222"$/m);
      expect(config).toContain(
        `jetstream { store_dir: ${JSON.stringify(join(dir, 'jetstream', `pge-${i}`))} }`,
      );
      const routes = config.match(/^ {2}routes: \[(.*)\]$/m)?.[1];
      const others = [1, 2, 3].filter((j) => j !== i);
      expect(routes).toBe(
        others.map((j) => `"nats-route://pge-route:${password}@nats-${j}:6222"`).join(', '),
      );
      expect(config).toContain(`authorization { user: pge-route, password: "${password}" }`);
    }
    expect(cli.stdout).toContain('start each server with its file, on its host');

    // Run again without --cluster: still the cluster, with the credentials kept.
    const creds = await readFile(join(dir, 'planner.creds'), 'utf8');
    expect((await runCli(['nats-config', '--dir', dir], { cwd: dir })).code).toBe(0);
    expect(await readFile(join(dir, 'planner.creds'), 'utf8')).toBe(creds);
    expect((await readdir(dir)).filter((file) => file.endsWith('.conf'))).toHaveLength(3);
    // --cluster 1: one server again.
    expect((await runCli(['nats-config', '--dir', dir, '--cluster', '1'], { cwd: dir })).code).toBe(0);
    expect((await readdir(dir)).filter((file) => file.endsWith('.conf'))).toEqual(['nats-server.conf']);
    // One machine: ports counted up from the ones given.
    const local = await freshDir();
    const files = await writeNatsConfig({
      dir: local,
      host: '127.0.0.1',
      cluster: [1, 2].map((i) => ({
        host: '127.0.0.1',
        port: 4221 + i,
        clusterPort: 6221 + i,
        monitorPort: 0,
      })),
    });
    expect(files.configFiles).toHaveLength(2);
    expect(await readFile(files.configFiles[1]!, 'utf8')).toMatch(/^listen: "127\.0\.0\.1:4223"$/m);
    const usage = await runCli(['nats-config', '--dir', local, '--cluster', '3', '--cluster-hosts', 'a,b'], {
      cwd: local,
    });
    expect(usage.code).toBe(2);
    expect(usage.stderr).toContain('--cluster-hosts names 2 hosts for --cluster 3');
  });

  it('binds the unauthenticated monitoring port to loopback unless --monitor-host names another address', async () => {
    const dir = await freshDir();
    const cli = await runCli(['nats-config', '--dir', dir, '--cluster', '2'], { cwd: dir });
    expect(cli.code, cli.stderr).toBe(0);
    for (const i of [1, 2]) {
      const config = await readFile(join(dir, `nats-server-${i}.conf`), 'utf8');
      // Clients on every interface, monitoring on loopback only.
      expect(config).toMatch(new RegExp(`^listen: "0\\.0\\.0\\.0:${4221 + i}"$`, 'm'));
      expect(config).toMatch(new RegExp(`^http: "127\\.0\\.0\\.1:${8221 + i}"$`, 'm'));
    }
    const named = await runCli(
      ['nats-config', '--dir', dir, '--cluster', '1', '--monitor-host', '10.1.2.3'],
      {
        cwd: dir,
      },
    );
    expect(named.code, named.stderr).toBe(0);
    expect(await readFile(join(dir, 'nats-server.conf'), 'utf8')).toMatch(/^http: "10\.1\.2\.3:8222"$/m);
    // A re-run keeps the address it was given, as it keeps the ports.
    expect((await runCli(['nats-config', '--dir', dir], { cwd: dir })).code).toBe(0);
    const config = await readFile(join(dir, 'nats-server.conf'), 'utf8');
    expect(config).toMatch(/^listen: "0\.0\.0\.0:4222"$/m);
    expect(config).toMatch(/^http: "10\.1\.2\.3:8222"$/m);
  });

  it("leaves a running server's monitoring unreachable at any address but loopback by default", async () => {
    // Linux routes all of 127.0.0.0/8 to loopback: 127.0.0.2 stands for another interface, which a
    // port bound to every interface answers and one bound to 127.0.0.1 refuses.
    const healthy = (host: string, port: number) =>
      fetch(`http://${host}:${port}/healthz`).then(
        (response) => response.ok,
        () => false,
      );
    for (const monitorHost of [undefined, '0.0.0.0']) {
      const dir = await freshDir();
      const monitorPort = await freePort();
      const files = await writeNatsConfig({
        dir,
        monitorPort,
        ...(monitorHost === undefined ? {} : { monitorHost }),
      });
      const server = await startNatsServer({ configFile: files.configFile });
      try {
        expect(await healthy('127.0.0.1', monitorPort)).toBe(true);
        expect(await healthy('127.0.0.2', monitorPort), `monitor host ${monitorHost}`).toBe(
          monitorHost === '0.0.0.0',
        );
      } finally {
        await server.stop();
      }
    }
  });

  it('says a flag needs its value rather than taking the next flag as one, and checks a port', async () => {
    const dir = await freshDir();
    const taken = await runCli(['nats-config', '--dir', '--port', '4223'], { cwd: dir });
    expect(taken.code).toBe(2);
    expect(taken.stderr).toContain('--dir needs a value: --dir <dir>');
    const port = await runCli(['nats-config', '--dir', dir, '--port', 'x'], { cwd: dir });
    expect(port.code).toBe(2);
    expect(port.stderr).toContain('--port expects an integer >= 0, got "x"');
  });

  it('says which directory it cannot write, as a usage error (exit 2)', async () => {
    const dir = await freshDir();
    const file = join(dir, 'a-file');
    await writeFile(file, '');
    const cli = await runCli(['nats-config', '--dir', join(file, 'nats')], { cwd: dir });
    expect(cli.code).toBe(2);
    expect(cli.stderr).toMatch(/cannot write the NATS config into .*a-file\/nats: ENOTDIR/);
  });

  it('keeps the credentials it issued when run again; --rotate issues new ones and revokes the old', async () => {
    const dir = await freshDir();
    const first = await writeNatsConfig({ dir, host: '127.0.0.1', monitorPort: 0 });
    expect(first.issued).toEqual([...NATS_ROLES]);
    const oldClient = await readFile(first.creds.client, 'utf8');
    const again = await writeNatsConfig({ dir, host: '127.0.0.1', monitorPort: 0 });
    expect(again.issued).toEqual([]);
    expect(await readFile(first.creds.client, 'utf8')).toBe(oldClient);

    const server = await startNatsServer({ configFile: again.configFile });
    const as = (creds: string) =>
      connect({
        servers: server.url,
        authenticator: credsAuthenticator(new TextEncoder().encode(creds)),
        reconnect: false,
      });
    const coordinator = startPge(['worker', '--role', 'coordinator'], {
      NATS_URL: server.url,
      NATS_CREDS: first.creds.coordinator,
    });
    try {
      await coordinator.waitFor(/ready/, 30_000);
      await (await as(oldClient)).close();
      const config = await readFile(again.configFile, 'utf8');
      // Given nothing but --rotate, the server's settings stay as they were (a reload could not
      // change its address anyway).
      const rotated = await writeNatsConfig({ dir, rotate: true });
      const settingsOf = (text: string) =>
        text.split('\n').filter((l) => /^(listen|http|jetstream)\b/.test(l));
      expect(settingsOf(await readFile(rotated.configFile, 'utf8'))).toEqual(settingsOf(config));
      expect(rotated.issued).toEqual([...NATS_ROLES]);
      expect(rotated.revokedBefore).not.toBeNull();
      const newClient = await readFile(rotated.creds.client, 'utf8');
      expect(newClient).not.toBe(oldClient);
      server.reload();
      // The server applies the new revocation list once it has read the config again. It may
      // close the socket before its refusal is read (EPIPE): only its own word counts.
      let refused: unknown = null;
      for (let i = 0; i < 100 && !/Authorization Violation/.test(String(refused)); i++) {
        try {
          await (await as(oldClient)).close();
          refused = null;
        } catch (error) {
          refused = error;
        }
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      expect(String(refused)).toMatch(/Authorization Violation/);
      await (await as(newClient)).close();
      // A process whose credential was revoked exits (3) for its supervisor to restart it.
      expect(await coordinator.exited()).toBe(3);
      expect(coordinator.stderr()).toMatch(/the server no longer accepts this credential .* it was revoked/);
    } finally {
      await coordinator.stop('SIGKILL');
      await server.stop();
    }
  }, 30_000);

  it('moves a directory written with every role in PGE to an account per role, keeping PGE and the coordinator', async () => {
    const dir = await freshDir();
    const first = await writeNatsConfig({ dir, host: '127.0.0.1', monitorPort: 0 });
    // As an earlier pge nats-config left it: no role accounts, the client's user signed by PGE.
    for (const file of await readdir(join(dir, 'keys')))
      if (file.endsWith('-account.nk')) await rm(join(dir, 'keys', file));
    const core = fromSeed(
      new TextEncoder().encode((await readFile(join(dir, 'keys', 'account.nk'), 'utf8')).trim()),
    );
    const user = createUser();
    const old = await encodeUser('pge-client', user, core);
    await writeFile(first.creds.client, fmtCreds(old, user));
    const coordinatorCreds = await readFile(first.creds.coordinator, 'utf8');

    const moved = await writeNatsConfig({ dir });
    expect(moved.issued).toEqual(NATS_ROLES.filter((role) => role !== 'coordinator'));
    expect(await readFile(first.creds.coordinator, 'utf8')).toBe(coordinatorCreds);
    const issuer = async (role: NatsRole) =>
      decode((await readFile(first.creds[role], 'utf8')).split('\n')[1]!).iss;
    expect(await issuer('coordinator')).toBe(core.getPublicKey());
    expect(await issuer('client')).not.toBe(core.getPublicKey());
    // The server knows each account that signed a credential.
    const config = await readFile(moved.configFile, 'utf8');
    for (const role of NATS_ROLES) expect(config).toContain(`${await issuer(role)}:`);
  });

  it('gives each role only its part of the bus', () => {
    const run = 'pge-20261123-101500-1a2b3c4d';
    const events = `pge.run.${run}.evt.run.completed`;
    // Only coordinators publish events, work and cancels; only the server republishes what is stored.
    for (const role of NATS_ROLES) {
      expect(mayPublish(role, `pge.stored.${run}.evt.run.completed`), role).toBe(false);
      expect(mayPublish(role, events), role).toBe(role === 'coordinator');
      expect(mayPublish(role, 'pge.work.planner'), role).toBe(role === 'coordinator');
      expect(mayPublish(role, `pge.run.${run}.cancel`), role).toBe(role === 'coordinator');
    }
    // A role worker answers for its own role only; clients and observers answer for none.
    for (const answering of ['planner', 'generator', 'evaluator'] as const) {
      for (const role of NATS_ROLES) {
        const allowed = role === answering || role === 'coordinator';
        expect(mayPublish(role, `pge.run.${run}.result.${answering}`), `${role} → ${answering}`).toBe(
          allowed,
        );
      }
    }
    // Submitting is the client's (and the coordinator's only to answer); observers publish nothing of pge's.
    expect(NATS_ROLES.filter((role) => mayPublish(role, 'pge.runs.submit'))).toEqual(['client']);
    expect(
      ROLE_PERMISSIONS.observer.publish.allow.every(
        (s) => s.startsWith('$JS.API.') || s === 'pge.errors.rejected.observer',
      ),
    ).toBe(true);
    // Each role reports refused messages on its own subject only.
    for (const role of NATS_ROLES) {
      expect(
        NATS_ROLES.filter((reporter) => mayPublish(role, `pge.errors.rejected.${reporter}`)),
        role,
      ).toEqual([role]);
    }
    // No role but the coordinator creates streams or makes, changes or deletes any consumer.
    for (const role of NATS_ROLES.filter((r) => r !== 'coordinator')) {
      expect(mayPublish(role, '$JS.API.STREAM.CREATE.PGE_EVENTS'), role).toBe(false);
      expect(mayPublish(role, '$JS.API.STREAM.DELETE.PGE_EVENTS'), role).toBe(false);
      for (const api of [
        'CONSUMER.CREATE.PGE_EVENTS.reader',
        'CONSUMER.CREATE.PGE_EVENTS.reader.pge.run.x.evt.>',
        `CONSUMER.CREATE.PGE_WORK.pge-${role}.pge.work.${role}`,
        `CONSUMER.DURABLE.CREATE.PGE_WORK.pge-${role}`,
        'CONSUMER.DURABLE.CREATE.PGE_EVENTS.pge-persistence',
        'CONSUMER.DELETE.PGE_EVENTS.pge-persistence',
      ]) {
        expect(mayPublish(role, `$JS.API.${api}`), `${role}: ${api}`).toBe(false);
      }
      expect(mayPublish(role, '$JS.API.CONSUMER.MSG.NEXT.PGE_WORK.pge-generator'), role).toBe(
        role === 'generator',
      );
    }
  });

  it('gives every request across accounts a short way back, and has control cross as a stream', async () => {
    const dir = await freshDir();
    await writeNatsConfig({ dir, monitorPort: 0 });
    const config = await readFile(join(dir, 'nats-server.conf'), 'utf8');
    const accounts = [...config.matchAll(/^ {2}(A\w+): (\S+)$/gm)].map((m) => decode<Account>(m[2]!));
    const named = (name: string) => accounts.find((a) => a.name === name)!;
    const core = named('PGE');
    const services = (core.nats.exports ?? []).filter((e) => e.type === 'service');
    expect(services.length).toBeGreaterThan(10);
    for (const service of services) {
      const pull = service.subject.startsWith('$JS.API.CONSUMER.MSG.NEXT.');
      expect(service.response_type, service.subject).toBe(pull ? 'Stream' : 'Singleton');
      // A pull's messages come for 5 s; a submission and a takeover are answered within 30 s (as
      // long as their requesters wait); the rest at once.
      const waits: Record<string, number> = { 'pge.runs.submit': 30_000, 'pge.runs.resume': 30_000 };
      const threshold = pull ? 10_000 : (waits[service.subject] ?? 5_000);
      expect(service.response_threshold, service.subject).toBe(threshold * 1e6);
    }
    // Nobody answers control: the client's and persistence's accounts export it, PGE imports it.
    expect(services.map((e) => e.subject)).not.toContain('pge.run.*.control');
    for (const role of ['client', 'persistence']) {
      const account = named(`PGE_${role.toUpperCase()}`);
      expect(account.nats.exports, role).toContainEqual(
        expect.objectContaining({ subject: 'pge.run.*.control', type: 'stream' }),
      );
      expect(core.nats.imports).toContainEqual(
        expect.objectContaining({ subject: 'pge.run.*.control', type: 'stream', account: account.sub }),
      );
    }
  });
});
