import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import type { NatsRole } from '../../src/bus/permissions.js';
import { parseWorkerCommand } from '../../src/cli/worker-process.js';
import { writeNatsConfig } from '../../src/runtime/nats-config.js';
import { runCli } from '../cli/run-cli.js';

/**
 * docker-compose.yml as far as it can be checked without a Docker engine: it parses, it has the
 * services the docs promise, and each pge service runs a real `pge` subcommand whose flags pge accepts.
 */

const ROOT = join(import.meta.dirname, '..', '..');
interface Service {
  image?: string;
  working_dir?: string;
  build?: string;
  command?: string[];
  environment?: Record<string, string>;
  volumes?: string[];
  depends_on?: Record<string, unknown>;
  healthcheck?: { test: string[] };
}
/** Where the services mount the directory `pge nats-config` wrote. */
const CONFIG_MOUNT = '/etc/pge-nats';
const compose = parse(readFileSync(join(ROOT, 'docker-compose.yml'), 'utf8'), { merge: true }) as {
  services: Record<string, Service>;
  volumes: Record<string, unknown>;
};

describe('docker-compose.yml', () => {
  it('has NATS with JetStream and a volume, and every pge process', () => {
    expect(Object.keys(compose.services).sort()).toEqual([
      'coordinator',
      'evaluator',
      'generator',
      'nats',
      'persistence',
      'planner',
    ]);
    const nats = compose.services.nats!;
    expect(nats.command).toEqual(['-c', `${CONFIG_MOUNT}/nats-server.conf`]);
    expect(nats.volumes).toContain('nats-data:/data');
    expect(Object.keys(compose.volumes)).toContain('nats-data');
  });

  it('runs the server and every process on the files `pge nats-config --dir nats-config --store-dir /data` writes', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'pge-compose-config-'));
    try {
      const files = await writeNatsConfig({ dir, storeDir: '/data' });
      const config = readFileSync(files.configFile, 'utf8');
      // JetStream on, in the nats-data volume; monitoring on loopback, where the healthcheck (run
      // inside the server's container) asks, and nowhere else.
      expect(config).toMatch(/^jetstream \{ store_dir: "\/data" \}$/m);
      expect(config).toMatch(/^http: "127\.0\.0\.1:8222"$/m);
      expect(compose.services.nats!.healthcheck?.test.join(' ')).toContain('http://127.0.0.1:8222/healthz');
      const inContainer = (path: string) => join(dir, path.replace(`${CONFIG_MOUNT}/`, ''));
      expect(existsSync(inContainer(compose.services.nats!.command![1]!))).toBe(true);
      expect(compose.services.nats!.volumes).toContain(
        `./nats-config/nats-server.conf:${CONFIG_MOUNT}/nats-server.conf:ro`,
      );
      for (const [name, service] of Object.entries(compose.services)) {
        // No container gets the directory: keys/ and other roles' credentials stay on the host.
        const mounted = (service.volumes ?? []).filter((v) => v.startsWith('./nats-config'));
        expect(
          mounted.every((v) => /^\.\/nats-config\/[\w-]+\.(creds|conf):/.test(v)),
          name,
        ).toBe(true);
        if (name === 'nats') continue;
        expect(mounted, name).toEqual([`./nats-config/${name}.creds:${CONFIG_MOUNT}/${name}.creds:ro`]);
        // Each process connects with its own role's credential.
        expect(service.environment?.NATS_CREDS, name).toBe(`${CONFIG_MOUNT}/${name}.creds`);
        expect(inContainer(service.environment!.NATS_CREDS!)).toBe(files.creds[name as NatsRole]);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('runs a real `pge worker` subcommand in each pge service, with flags pge accepts', () => {
    const roles: string[] = [];
    for (const [name, service] of Object.entries(compose.services)) {
      if (name === 'nats') continue;
      expect(service.build).toBe('.');
      expect(service.depends_on).toHaveProperty('nats');
      const command = service.command!;
      expect(command[0]).toBe('worker');
      // Compose fills `${NAME:-default}` from the shell; a shell without NAME gives the default.
      const environment = Object.entries(service.environment ?? {}).map(([k, v]) => [
        k,
        String(v).replace(/\$\{\w+:-([^}]*)\}/g, '$1'),
      ]);
      const env = { ...Object.fromEntries(environment), NATS_URL: 'nats://nats:4222' } as Record<
        string,
        string
      >;
      // A scratch directory stands in for the container's working directory.
      const cwd = mkdtempSync(join(tmpdir(), 'pge-compose-'));
      const plan = parseWorkerCommand(command.slice(1), { env, cwd });
      rmSync(cwd, { recursive: true, force: true });
      expect(plan.role).toBe(name);
      roles.push(plan.role);
    }
    expect(roles.sort()).toEqual(['coordinator', 'evaluator', 'generator', 'persistence', 'planner']);
  });

  it('passes the OpenAI settings through and points every process at the nats service', () => {
    for (const [name, service] of Object.entries(compose.services)) {
      if (name === 'nats') continue;
      expect(service.environment).toMatchObject({
        NATS_URL: 'nats://nats:4222',
        // Compose interpolation, not template strings: the values come from the user's shell.
        OPENAI_API_KEY: ['$', '{OPENAI_API_KEY:-}'].join(''),
        OPENAI_BASE_URL: ['$', '{OPENAI_BASE_URL:-}'].join(''),
      });
    }
  });

  it('runs the image entry point on bin/pge.js, built from the repository', () => {
    const dockerfile = readFileSync(join(ROOT, 'Dockerfile'), 'utf8');
    expect(dockerfile).toMatch(/ENTRYPOINT \["node", "\/app\/bin\/pge\.js"\]/);
    expect(dockerfile).toMatch(/npm ci/);
  });
});

/**
 * The coordinator copies a continued run's workspace into the directory its --workspaces names:
 * the one where every generator and evaluator keeps runs' workspaces (`<working_dir>/workspaces`),
 * in a volume they all mount there.
 */
function expectSharedWorkspaces(services: Record<string, Service>): void {
  const inContainer = (service: Service, path: string) => resolve(service.working_dir ?? '/app', path);
  const coordinator = services.coordinator!;
  const flag = coordinator.command!.indexOf('--workspaces');
  expect(flag).toBeGreaterThan(0);
  const workspaces = inContainer(coordinator, coordinator.command![flag + 1]!);
  for (const name of ['coordinator', 'generator', 'evaluator']) {
    const service = services[name]!;
    expect(service.volumes, name).toContain(`workspaces:${workspaces}`);
    if (name === 'coordinator') continue;
    expect(service.command, name).not.toContain('--working-dir');
    expect(inContainer(service, 'workspaces'), name).toBe(workspaces);
  }
}

describe('the workspaces of a deployment', () => {
  it.each(['docker-compose.yml', 'docker-compose.cluster.yml'])(
    '%s shares them between the coordinator, the generators and the evaluators',
    (file) => {
      const parsed = parse(readFileSync(join(ROOT, file), 'utf8'), { merge: true }) as {
        services: Record<string, Service>;
        volumes: Record<string, unknown>;
      };
      expect(Object.keys(parsed.volumes)).toContain('workspaces');
      expectSharedWorkspaces(parsed.services);
    },
  );
});

describe('docker-compose.cluster.yml', () => {
  const text = readFileSync(join(ROOT, 'docker-compose.cluster.yml'), 'utf8');
  const cluster = parse(text, { merge: true }) as { services: Record<string, Service> };
  const servers = ['nats-1', 'nats-2', 'nats-3'];

  it('runs three servers on the files the pge nats-config command in its header writes, each its own only', async () => {
    const command = text.match(/^# {3}npx pge (nats-config .*)$/m)?.[1]?.split(' ');
    expect(command).toEqual([
      'nats-config',
      '--dir',
      'nats-config',
      '--cluster',
      '3',
      '--cluster-hosts',
      servers.join(','),
      '--store-dir',
      '/data',
    ]);
    const cwd = mkdtempSync(join(tmpdir(), 'pge-compose-cluster-'));
    try {
      const cli = await runCli(command!, { cwd });
      expect(cli.code, cli.stderr).toBe(0);
      for (const [i, name] of servers.entries()) {
        const service = cluster.services[name]!;
        const file = `nats-server-${i + 1}.conf`;
        expect(service.command).toEqual(['-c', `${CONFIG_MOUNT}/${file}`]);
        // Its own file (with the routes' password) and its own store; no other server's, no credential.
        expect(service.volumes).toEqual([
          `./nats-config/${file}:${CONFIG_MOUNT}/${file}:ro`,
          `${name}-data:/data`,
        ]);
        const config = readFileSync(join(cwd, 'nats-config', file), 'utf8');
        expect(config).toContain(`server_name: pge-${i + 1}`);
        expect(config).toContain(`store_dir: "/data/pge-${i + 1}"`);
        expect(config).toMatch(/^http: "127\.0\.0\.1:8222"$/m);
        for (const other of servers.filter((s) => s !== name)) expect(config).toContain(`@${other}:6222"`);
        expect(service.healthcheck?.test.join(' ')).toContain('http://127.0.0.1:8222/healthz');
      }
    } finally {
      rmSync(cwd, { recursive: true, force: true });
    }
  });

  it('gives every pge process all three servers, 3 replicas, and its own credential only', () => {
    const roles: string[] = [];
    for (const [name, service] of Object.entries(cluster.services)) {
      if (servers.includes(name)) continue;
      expect(Object.keys(service.depends_on ?? {}).sort()).toEqual(servers);
      expect(service.volumes?.filter((v) => v.startsWith('./nats-config'))).toEqual([
        `./nats-config/${name}.creds:${CONFIG_MOUNT}/${name}.creds:ro`,
      ]);
      const environment = Object.entries(service.environment ?? {}).map(([k, v]) => [
        k,
        String(v).replace(/\$\{\w+:-([^}]*)\}/g, '$1'),
      ]);
      const env = Object.fromEntries(environment) as Record<string, string>;
      expect(env.NATS_URL).toBe(servers.map((s) => `nats://${s}:4222`).join(','));
      expect(env.NATS_CREDS).toBe(`${CONFIG_MOUNT}/${name}.creds`);
      const cwd = mkdtempSync(join(tmpdir(), 'pge-compose-'));
      const plan = parseWorkerCommand(service.command!.slice(1), { env, cwd });
      rmSync(cwd, { recursive: true, force: true });
      expect(plan.role).toBe(name);
      expect(plan.options.replicas).toBe(3);
      roles.push(plan.role);
    }
    expect(roles.sort()).toEqual(['coordinator', 'evaluator', 'generator', 'persistence', 'planner']);
  });
});
