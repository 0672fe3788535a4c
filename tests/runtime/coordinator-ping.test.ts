import { afterEach, beforeEach, expect, it } from 'vitest';
import { InProcessBus } from '../../src/bus/in-process-bus.js';
import { COORDINATOR_PING_MS, subjects } from '../../src/bus/subjects.js';
import { UnansweredRequestError } from '../../src/errors.js';
import { answerPings, NO_COORDINATOR_MS } from '../../src/runtime/coordinator-ping.js';
import { submitAndFollow } from '../../src/runtime/services.js';

/**
 * A submission tells no coordinator from a slow one by a ping beside it (as across a secured
 * server's accounts, where nothing serving a request is silence): a coordinator that answers the
 * ping keeps the submission's own timeout; with the ping unanswered, it gives up after
 * `COORDINATOR_PING_MS`.
 */

let bus: InProcessBus;
beforeEach(() => {
  bus = new InProcessBus();
});
afterEach(async () => {
  await bus.close();
});

/** A coordinator that takes submissions and answers after `ms` (or never, with null). */
function slowCoordinator(ms: number | null): void {
  bus.subscribe(subjects.submit, async (message) => {
    if (ms === null) return;
    await new Promise((resolve) => setTimeout(resolve, ms));
    await message.respond({ runId: (message.data as { runId: string }).runId });
  });
}

it('waits for a coordinator that answers the ping, however long it takes to answer the submission', async () => {
  slowCoordinator(COORDINATOR_PING_MS + 1_000);
  answerPings(bus, 'coordinator-1', 'pge-coordinator');
  const { runId, stop } = await submitAndFollow(bus, { task: 'Write a haiku' }, () => {}, {
    runId: 'slow-run',
  });
  stop();
  expect(runId).toBe('slow-run');
}, 10_000);

it('says that no coordinator answered once two pings in a row went unanswered, not at the submission timeout', async () => {
  // Something takes the submission and never answers; nothing answers pings.
  slowCoordinator(null);
  bus.subscribe(subjects.coordinatorPing, () => undefined);
  const started = Date.now();
  const submitted = submitAndFollow(bus, { task: 'Write a haiku' }, () => {}, { runId: 'lost-run' });
  await expect(submitted).rejects.toBeInstanceOf(UnansweredRequestError);
  await expect(submitted).rejects.toThrow(
    `no coordinator answered the submission of run lost-run: is one running? (pge worker --role coordinator; no coordinator answered 2 pings within ${NO_COORDINATOR_MS} ms)`,
  );
  expect(Date.now() - started).toBeGreaterThanOrEqual(NO_COORDINATOR_MS - 50);
  expect(Date.now() - started).toBeLessThan(NO_COORDINATOR_MS + 2_000);
}, 15_000);

it('waits for a coordinator whose first ping was lost (a server of a cluster dying) and that answers the next', async () => {
  slowCoordinator(NO_COORDINATOR_MS + 1_000);
  let pings = 0;
  bus.subscribe(subjects.coordinatorPing, async (message) => {
    pings++;
    if (pings > 1) await message.respond({ coordinator: 'coordinator-1' });
  });
  const { runId, stop } = await submitAndFollow(bus, { task: 'Write a haiku' }, () => {}, {
    runId: 'ping-lost-run',
  });
  stop();
  expect(runId).toBe('ping-lost-run');
  expect(pings).toBe(2);
}, 15_000);
