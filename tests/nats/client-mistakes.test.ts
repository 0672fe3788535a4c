import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { writeNatsConfig } from '../../src/runtime/nats-config.js';
import {
  freePort,
  type SecuredNatsServer,
  startNatsServer,
  startSecuredNatsServer,
} from '../support/nats-server.js';
import { type PgeProcess, startPge } from '../support/processes.js';

/**
 * The mistakes a newcomer makes with a client command (`pge run --nats`, `pge runs`, …) as they
 * meet them, each said with what to do: no server at the URL, a secured server and no credential,
 * another role's credential; none ends with a pointer to `--help`, which would not help.
 */

let nats: SecuredNatsServer;
let coordinator: PgeProcess;
beforeAll(async () => {
  nats = await startSecuredNatsServer();
  coordinator = startPge(['worker', '--role', 'coordinator', '--demo'], nats.env('coordinator'));
  await coordinator.waitFor(/ready/, 60_000);
}, 90_000);
afterAll(async () => {
  await coordinator?.stop('SIGKILL');
  await nats?.stop();
});

/** Runs `pge …args` to its end: its exit code and the lines of its stderr. */
async function pge(args: string[], env: Record<string, string> = {}) {
  const process = startPge(args, env);
  const code = await process.exited();
  return {
    code,
    lines: process
      .stderr()
      .split('\n')
      .filter((line) => line !== ''),
  };
}

describe('a secured server', () => {
  it.each([['run', 'Write a haiku'], ['runs']])(
    'tells pge %s without a credential to give it client.creds with --creds or NATS_CREDS',
    async (...args) => {
      const { code, lines } = await pge([...args, '--nats', nats.url]);
      expect(code).toBe(2);
      expect(lines).toEqual([
        `pge: cannot connect to NATS at ${nats.url}: Authorization Violation`,
        `The server asks for a credential and none was given: give pge ${args[0]} --creds client.creds of pge nats-config (or NATS_CREDS).`,
      ]);
    },
    30_000,
  );

  it("tells pge run with the observer's credential that it needs client.creds", async () => {
    const { code, lines } = await pge(['run', 'Write a haiku'], nats.env('observer'));
    expect(code).toBe(2);
    expect(lines).toEqual([
      'pge: request on pge.runs.submit failed: Permissions Violation for Publish to "pge.runs.submit"',
      `This credential (${nats.creds.observer}) is for the observer, not the client: give pge run --creds client.creds of pge nats-config.`,
    ]);
  }, 30_000);

  it("tells pge runs with another server's credential that this one does not accept it", async () => {
    const elsewhere = await mkdtemp(join(tmpdir(), 'pge-other-nats-'));
    try {
      const { creds } = await writeNatsConfig({ dir: elsewhere, host: '127.0.0.1' });
      const { code, lines } = await pge(['runs', '--nats', nats.url, '--creds', creds.client]);
      expect(code).toBe(2);
      expect(lines).toEqual([
        `pge: cannot connect to NATS at ${nats.url}: Authorization Violation`,
        `The server no longer accepts this credential (${creds.client}) (Authorization Violation): it was revoked (pge nats-config --rotate) or is not this server's; give pge runs --creds its current client.creds.`,
      ]);
    } finally {
      await rm(elsewhere, { recursive: true, force: true });
    }
  }, 30_000);
});

describe('no server at the URL', () => {
  it.each([
    ['run', 'Write a haiku'],
    ['worker', '--role', 'planner', '--demo'],
  ])(
    'tells pge %s that none answers, and how to start one, not to read the help',
    async (...args) => {
      const url = `nats://127.0.0.1:${await freePort()}`;
      const { code, lines } = await pge([...args, '--nats', url]);
      expect(code).toBe(2);
      expect(lines).toEqual([
        `pge: cannot connect to NATS at ${url}: connection refused`,
        'No NATS server answers at that URL: start one (nats-server -js, or a secured one: pge nats-config), or give this command the URL of yours with --nats <url> or NATS_URL.',
      ]);
    },
    30_000,
  );
});

it('pge run --nats takes --submit-timeout, and gives up when no coordinator answered within it', async () => {
  const server = await startNatsServer();
  try {
    const { code, lines } = await pge([
      'run',
      'Write a haiku',
      '--nats',
      server.url,
      '--submit-timeout',
      '3s',
    ]);
    expect(code).toBe(3);
    // Sent again for the 3 s given, not the default minute.
    expect(lines).toEqual([
      expect.stringMatching(
        /^pge: no coordinator answered the submission of run \S+: is one running\? \(pge worker --role coordinator; \d+ tries in 3 s, /,
      ),
    ]);
  } finally {
    await server.stop();
  }
}, 60_000);
