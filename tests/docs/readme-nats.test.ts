import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { type NatsServerHandle, startNatsServer } from '../support/nats-server.js';
import { type PgeProcess, ROOT, startPge } from '../support/processes.js';

/**
 * README's "Scale out on NATS" as a newcomer follows it: its commands, run as written (but on a
 * server of the test's own, on a free port), finish a run with no API key; and its secured server
 * is bound as docs/security.md binds it.
 */

const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
const security = readFileSync(join(ROOT, 'docs', 'security.md'), 'utf8');

/** The shell blocks of README's section `title`, each as its commands (split at `&`, comments dropped). */
function commandsOf(title: string): string[][][] {
  const section = readme.slice(readme.indexOf(`## ${title}\n`)).split(/\n## /)[0]!;
  return [...section.matchAll(/```sh\n([\s\S]*?)```/g)].map(([, block]) =>
    block!
      .split('\n')
      .map((line) => line.replace(/\s+#.*$/, ''))
      .flatMap((line) => line.split(/\s&(?!&)\s*/))
      .filter((command) => command.trim() !== '')
      .map((command) => [...command.matchAll(/"([^"]*)"|(\S+)/g)].map(([, quoted, word]) => quoted ?? word!)),
  );
}

const [open, secured] = commandsOf('Scale out on NATS');

let tmp: string | undefined;
let server: NatsServerHandle | undefined;
const started: PgeProcess[] = [];
afterEach(async () => {
  await Promise.all(started.splice(0).map((p) => p.stop('SIGKILL')));
  await server?.stop();
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

describe("README's Scale out on NATS", () => {
  it('runs a task offline, with no API key, as its commands are written', async () => {
    tmp = mkdtempSync(join(tmpdir(), 'pge-readme-'));
    const env: Record<string, string> = {};
    const workers: PgeProcess[] = [];
    let run: string[] | undefined;
    for (const command of open!) {
      if (command[0] === 'nats-server') {
        // On this machine only, as the README binds it; the test's own server takes a free port.
        expect(command).toEqual(expect.arrayContaining(['-js', '-a', '127.0.0.1']));
        server = await startNatsServer();
      } else if (command[0] === 'export') {
        expect(command[1]).toMatch(/^NATS_URL=/);
        env.NATS_URL = server!.url;
      } else {
        expect(command.slice(0, 2)).toEqual(['npx', 'pge']);
        const args = command.slice(2);
        if (args[0] === 'run') run = args;
        else workers.push(startPge(args, env, tmp));
      }
    }
    started.push(...workers);
    await Promise.all(workers.map((worker) => worker.waitFor(/ready/, 60_000)));
    expect(run).toBeDefined();
    const submitted = startPge(run!, env, tmp);
    started.push(submitted);
    expect(await submitted.exited(), submitted.stderr()).toBe(0);
  }, 120_000);

  it('gives its role workers --demo and binds its secured server as docs/security.md does', () => {
    const roleWorkers = [...open!, ...secured!].filter((c) =>
      /^(planner|generator|evaluator)$/.test(c[c.indexOf('--role') + 1] ?? ''),
    );
    expect(roleWorkers.length).toBeGreaterThan(0);
    for (const worker of roleWorkers) expect(worker).toContain('--demo');
    const config = secured!.find((c) => c.includes('nats-config'))!;
    expect(config.slice(config.indexOf('nats-config'), config.indexOf('&&'))).toEqual([
      'nats-config',
      '--dir',
      './nats',
      '--host',
      '127.0.0.1',
    ]);
    expect(security).toContain('npx pge nats-config --dir ./nats --host 127.0.0.1\n');
  });

  it('says what to do when port 4222 is taken, here and in docs/security.md', () => {
    for (const doc of [readme, security]) expect(doc).toMatch(/When port 4222 is taken, give `--port 4223`/);
  });
});
