import { afterAll, beforeAll, expect, it } from 'vitest';
import { STREAM_WAIT_MS } from '../../src/bus/nats-streams.js';
import { type SecuredNatsServer, startSecuredNatsServer } from '../support/nats-server.js';
import { startPge } from '../support/processes.js';

/**
 * A role worker started before any coordinator, on a secured server where only a coordinator may
 * make pge's streams: it waits for them for STREAM_WAIT_MS in all (docs/distributed.md), not that
 * long per stream, then exits 2 saying to start a coordinator.
 */

let nats: SecuredNatsServer;
beforeAll(async () => {
  nats = await startSecuredNatsServer();
}, 60_000);
afterAll(async () => {
  await nats?.stop();
});

it(
  'a role worker with no coordinator waits for the streams once, then exits 2 saying to start one',
  async () => {
    const started = Date.now();
    const worker = startPge(['worker', '--role', 'planner', '--demo'], nats.env('planner'));
    expect(await worker.exited(), worker.stderr()).toBe(2);
    const waited = Date.now() - started;
    expect(waited).toBeGreaterThanOrEqual(STREAM_WAIT_MS);
    // The three streams are waited for together: well under twice the wait.
    expect(waited).toBeLessThan(STREAM_WAIT_MS + 20_000);
    expect(worker.stderr()).toContain('start a coordinator (pge worker --role coordinator)');
    expect(worker.stderr()).not.toContain('ready');
  },
  3 * STREAM_WAIT_MS + 30_000,
);
