import { connect, type NatsConnection } from '@nats-io/transport-node';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { RunLeases } from '../../src/bus/run-leases.js';
import { type SecuredNatsServer, startSecuredNatsServer } from '../support/nats-server.js';

/**
 * Run leases in the JetStream KV bucket: one owner, renewed while it lives, taken over once when it
 * stops. Each coordinator connects with the coordinator's credential, the one role that keeps leases.
 */

let nats: SecuredNatsServer;
const connections: NatsConnection[] = [];
const opened: RunLeases[] = [];

beforeEach(async () => {
  nats = await startSecuredNatsServer();
});
afterEach(async () => {
  for (const leases of opened.splice(0)) leases.stop();
  await Promise.all(connections.splice(0).map((nc) => nc.close()));
  await nats.stop();
  // The coordinator's credential is all leases need.
  expect(nats.refusals()).toEqual([]);
});

interface Told {
  expired: string[];
  lost: string[];
  /** The owner each `onLost` named. */
  lostTo: string[];
}

async function coordinator(
  owner: string,
  leaseMs = 600,
  onError?: (error: unknown) => void,
): Promise<{ leases: RunLeases; told: Told; nc: NatsConnection }> {
  const nc = await connect(nats.connectOptions('coordinator'));
  connections.push(nc);
  const told: Told = { expired: [], lost: [], lostTo: [] };
  const leases = await RunLeases.open(nc, {
    owner,
    leaseMs,
    onExpired: (runId) => told.expired.push(runId),
    onLost: (runId, to) => {
      told.lost.push(runId);
      told.lostTo.push(to);
    },
    ...(onError ? { onError } : {}),
  });
  opened.push(leases);
  return { leases, told, nc };
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function until(check: () => boolean, what: string, timeoutMs = 5_000): Promise<void> {
  const started = Date.now();
  while (!check()) {
    if (Date.now() - started > timeoutMs) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

describe('run leases', () => {
  it('a run id can be claimed once', async () => {
    const a = await coordinator('a');
    const b = await coordinator('b');
    expect(await a.leases.claim('run-1')).toBe(true);
    expect(await b.leases.claim('run-1')).toBe(false);
    await until(() => b.leases.ownerOf('run-1') === 'a', 'b to see the lease');
  });

  it('a live owner keeps its run: nobody is told it expired over several lease terms', async () => {
    const a = await coordinator('a');
    const b = await coordinator('b');
    await a.leases.claim('run-1');
    await sleep(2_000);
    expect(b.told.expired).toEqual([]);
    expect(a.told.lost).toEqual([]);
  });

  it('a stopped owner’s run is taken over by exactly one of several coordinators', async () => {
    const a = await coordinator('a');
    const b = await coordinator('b');
    const c = await coordinator('c');
    await a.leases.claim('run-1');
    await until(() => b.leases.ownerOf('run-1') === 'a' && c.leases.ownerOf('run-1') === 'a', 'the lease');
    const stoppedAt = performance.now();
    a.leases.stop();
    await until(() => b.told.expired.length > 0 && c.told.expired.length > 0, 'the lease to expire');
    expect(performance.now() - stoppedAt).toBeLessThan(2_000);
    const won = await Promise.all([b.leases.takeOver('run-1'), c.leases.takeOver('run-1')]);
    expect(won.filter(Boolean)).toHaveLength(1);
    const winner = won[0] ? 'b' : 'c';
    await until(
      () => b.leases.ownerOf('run-1') === winner && c.leases.ownerOf('run-1') === winner,
      'the new owner',
    );
    // The winner renews: the loser is not told again.
    await sleep(1_500);
    expect([...b.told.expired, ...c.told.expired]).toEqual(['run-1', 'run-1']);
  });

  it('an owner cut off long enough is told its run was taken (onLost)', async () => {
    const a = await coordinator('a');
    const b = await coordinator('b');
    await a.leases.claim('run-1');
    await until(() => b.leases.ownerOf('run-1') === 'a', 'b to see the lease');
    // b takes the lease as if a's renewals had stopped reaching the server.
    const stolen = await (async () => {
      for (let i = 0; i < 20; i++) {
        // The revision b saw may be renewed under it; try until b's compare-and-set wins.
        if (await b.leases.takeOver('run-1')) return true;
        await sleep(10);
      }
      return false;
    })();
    expect(stolen).toBe(true);
    await until(() => a.told.lost.includes('run-1'), 'a to learn it lost the run');
    expect(a.leases.ownerOf('run-1')).toBe('b');
    // Told by the watch, a names the taker; by its refused renewal before the watch showed b's
    // write, it says another coordinator: never itself.
    expect(a.told.lostTo).toHaveLength(1);
    expect(['b', 'another coordinator']).toContain(a.told.lostTo[0]);
  });

  it('two processes of one name are told apart: the one whose lease was taken is told it lost the run', async () => {
    const a = await coordinator('same');
    const b = await coordinator('same');
    await a.leases.claim('run-1');
    await until(() => b.leases.ownerOf('run-1') === 'same', 'b to see the lease');
    let stolen = false;
    for (let i = 0; i < 20 && !stolen; i++) {
      // The revision b saw may be renewed under it; try until b's compare-and-set wins.
      stolen = await b.leases.takeOver('run-1');
      if (!stolen) await sleep(10);
    }
    expect(stolen).toBe(true);
    await until(() => a.told.lost.includes('run-1'), 'a to learn it lost the run');
    // a stopped renewing: b's lease is not taken back, and b is not told it lost anything.
    await sleep(1_000);
    expect(b.told.lost).toEqual([]);
  });

  it('a lease its holder lets expire (it could not drive the run) is told expired to every coordinator, the holder too', async () => {
    const a = await coordinator('a');
    const b = await coordinator('b');
    await a.leases.claim('run-1');
    await until(() => b.leases.ownerOf('run-1') === 'a', 'b to see the lease');
    await sleep(1_000);
    // Renewed so far: nobody was told.
    expect([...a.told.expired, ...b.told.expired]).toEqual([]);
    a.leases.letExpire('run-1');
    await until(() => a.told.expired.length > 0 && b.told.expired.length > 0, 'the lease to expire');
    // Still written in a's name, it is taken over like any other: here by a itself.
    expect(await a.leases.takeOver('run-1')).toBe(true);
    await until(() => b.leases.ownerOf('run-1') === 'a', 'b to see the new lease');
  });

  it('a takeover the server does not answer leaves the lease to be told expired again, not to nobody', async () => {
    const a = await coordinator('a');
    const b = await coordinator('b');
    await a.leases.claim('run-1');
    await until(() => b.leases.ownerOf('run-1') === 'a', 'b to see the lease');
    a.leases.stop();
    await until(() => b.told.expired.length === 1, 'the lease to expire');
    // b's takeover goes unanswered: the server hangs (SIGSTOP) until the request times out.
    nats.freeze();
    try {
      await expect(b.leases.takeOver('run-1')).rejects.toThrow(/timeout/i);
    } finally {
      nats.thaw();
    }
    await until(() => b.told.expired.length === 2, 'the lease to be told expired again');
    expect(await b.leases.takeOver('run-1')).toBe(true);
  });

  it('a claim the server leaves unanswered is asked again, and one stored whose answer was lost is still its own', async () => {
    const errors: unknown[] = [];
    const a = await coordinator('a', 600, (error) => errors.push(error));
    expect(await a.leases.claim('held')).toBe(true);
    // The server hangs (SIGSTOP) past a request's 5 s timeout: the create of run-1 is stored once it
    // answers again, after its answer was given up on, and the claim finds the lease to be its own.
    nats.freeze();
    const claimed = a.leases.claim('run-1');
    try {
      await sleep(7_000);
    } finally {
      nats.thaw();
    }
    expect(await claimed).toBe(true);
    expect(a.leases.ownerOf('run-1')).toBe('a');
    const b = await coordinator('b');
    expect(await b.leases.claim('run-1')).toBe(false);
    // The renewals of 'held' that timed out meanwhile were told once, not once per tick.
    expect(errors.map(String)).toEqual([
      expect.stringMatching(/leases cannot be renewed for now, renewing again/),
    ]);
  }, 30_000);

  it('a released run is forgotten: nobody takes it over', async () => {
    const a = await coordinator('a');
    const b = await coordinator('b');
    await a.leases.claim('run-1');
    await until(() => b.leases.ownerOf('run-1') === 'a', 'b to see the lease');
    await a.leases.release('run-1');
    await until(() => b.leases.ownerOf('run-1') === null, 'b to see the release');
    a.leases.stop();
    await sleep(1_000);
    expect(b.told.expired).toEqual([]);
  });
});
