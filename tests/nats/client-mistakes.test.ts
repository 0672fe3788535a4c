import { expect, it } from 'vitest';
import { startNatsServer } from '../support/nats-server.js';
import { startPge } from '../support/processes.js';

/**
 * The mistakes a newcomer makes with a client command (`pge run --nats`, `pge runs`, …) as they
 * meet them, and the flags its help offers.
 */

/** Runs `pge …args` to its end: its exit code and the lines of its stderr. */
async function pge(args: string[], env: Record<string, string> = {}) {
  const process = startPge(args, env);
  const code = await process.exited();
  return { code, lines: process.stderr().split('\n').filter((line) => line !== '') };
}

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
