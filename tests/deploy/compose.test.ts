import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import type { NatsRole } from '../../src/bus/permissions.js';
import { parseWorkerCommand } from '../../src/cli/worker-command.js';
import { writeNatsConfig } from '../../src/runtime/nats-config.js';

/**
 * docker-compose.yml as far as it can be checked without a Docker engine: it parses, it has the
 * services the docs promise, and each pge service runs a real `pge` subcommand whose flags pge accepts.
 */

const ROOT = join(import.meta.dirname, '..', '..');
interface Service {
  image?: string;
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
      // JetStream on, in the nats-data volume; monitoring where the healthcheck asks.
      expect(config).toMatch(/^jetstream \{ store_dir: "\/data" \}$/m);
      expect(config).toMatch(/^http: "0\.0\.0\.0:8222"$/m);
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
