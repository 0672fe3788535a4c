import type { JetStreamManager } from '@nats-io/jetstream';
import { AckPolicy, jetstream, jetstreamManager, RetentionPolicy, StorageType } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { connect, nanos } from '@nats-io/transport-node';
import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from 'vitest';
import type { DurableOptions } from '../../src/bus/bus.js';
import {
  enqueueWork,
  publishEvent,
  publishResult,
  readRunEvents,
  readRunOpening,
  serveWork,
  subscribeRejections,
  subscribeResults,
} from '../../src/bus/channels.js';
import type { MessageRejection } from '../../src/bus/codec.js';
import { NatsBus } from '../../src/bus/nats-bus.js';
import { connectNats, natsOptionsFromEnv } from '../../src/bus/nats-connection.js';
import { UNSERVED_MOVE_MS } from '../../src/bus/nats-helpers.js';
import { ensurePullConsumer, PGE_STREAMS, streamConfig } from '../../src/bus/nats-streams.js';
import { PULL_EXPIRES_MS } from '../../src/bus/nats-subscriptions.js';
import { RunLeases } from '../../src/bus/run-leases.js';
import { subjects, workerQueue } from '../../src/bus/subjects.js';
import { BusError, ConfigurationError, EventSeqTakenError } from '../../src/errors.js';
import type { RoleRequest, RunEvent } from '../../src/schemas/index.js';
import { fullRun } from '../persistence/fixtures.js';
import type { NatsServerHandle } from '../support/nats-server.js';
import { startNatsServer } from '../support/nats-server.js';
import { startPendingDuplicateProxy } from '../support/pending-duplicate-proxy.js';
import { seqsUpTo, storedEvents } from '../support/stored-events.js';
import { describeBusContract, freshRunId, planFailed, runStarted, stepStarted } from './bus-contract.js';

/**
 * NatsBus against real nats-servers: the bus contract on the run's shared server (global setup),
 * then what only JetStream gives — de-duplication, durable work queues shared by workers,
 * redelivery, durable ordered readers, rejections of raw messages, outages — on servers of this
 * file's own, and the connection's failure modes.
 */

const natsUrl = inject('natsUrl');

describeBusContract('NatsBus', () => NatsBus.connect({ servers: natsUrl }));

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Polls until `done()` holds; fails with `what` after `timeoutMs`. */
async function waitFor(what: string, done: () => boolean, timeoutMs = 5_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!done()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`);
    await sleep(10);
  }
}

/** A request of `type` for run `runId`, told apart by `n`; built from the persistence fixture run. */
function requestOf(
  type: 'step.work.requested' | 'step.evaluation.requested',
  runId: string,
  n: number,
): RoleRequest {
  const template = fullRun(runId).find((event) => event.type === type);
  if (!template) throw new Error(`the fixture run has no ${type}`);
  return { ...template, id: `${runId}-req-${n}`, seq: n } as RoleRequest;
}

/** Messages the stream holds on `subject`. */
async function storedOn(jsm: JetStreamManager, stream: string, subject: string): Promise<number> {
  const info = await jsm.streams.info(stream, { subjects_filter: subject });
  return info.state.subjects?.[subject] ?? 0;
}

describe('NatsBus on JetStream', () => {
  // A server of this file's own: its work queues are not shared with workers of other test files.
  let server: NatsServerHandle;
  let nc: NatsConnection;
  let jsm: JetStreamManager;
  const buses: NatsBus[] = [];
  const open = async (options: Parameters<typeof NatsBus.connect>[0] = {}): Promise<NatsBus> => {
    const bus = await NatsBus.connect({ servers: server.url, ...options });
    buses.push(bus);
    return bus;
  };

  beforeAll(async () => {
    server = await startNatsServer();
    nc = await connect({ servers: server.url });
    jsm = await jetstreamManager(nc);
  });
  afterEach(async () => {
    await Promise.all(buses.splice(0).map((bus) => bus.close()));
  });
  /** The names of the consumers of PGE_EVENTS that are not durable. */
  const throwaway = async () => {
    const found: string[] = [];
    for await (const info of jsm.consumers.list('PGE_EVENTS'))
      if (info.config.durable_name === undefined) found.push(info.name);
    return found;
  };
  afterAll(async () => {
    await nc?.close();
    await server?.stop();
  });

  it('creates its streams at start, and as a coordinator the durable consumers; connecting again reuses them', async () => {
    await open({ reporter: 'coordinator' });
    await open();
    const names: string[] = [];
    for await (const name of jsm.streams.names()) names.push(name);
    expect(names.sort()).toEqual(['PGE_EVENTS', 'PGE_RESULTS', 'PGE_WORK']);
    const work = await jsm.streams.info('PGE_WORK');
    expect(work.config).toMatchObject({ subjects: ['pge.work.>'], retention: 'interest', storage: 'file' });
    const events = await jsm.streams.info('PGE_EVENTS');
    expect(events.config).toMatchObject({
      subjects: [subjects.events('*')],
      retention: 'limits',
      duplicate_window: nanos(120_000),
    });
    expect((await jsm.streams.info('PGE_RESULTS')).config.subjects).toEqual([subjects.result('*')]);
    // Direct gets stay open to readers of other systems (pge's read from the leader); the durable
    // consumers every role reads through are made at start.
    expect(events.config.allow_direct).toBe(true);
    expect(events.config.republish).toEqual({
      src: subjects.events('*'),
      dest: 'pge.stored.{{wildcard(1)}}.evt.>',
    });
    const durables = async (stream: string) => {
      const found: string[] = [];
      for await (const c of jsm.consumers.list(stream)) if (c.config.durable_name) found.push(c.name);
      return found.sort();
    };
    expect(await durables('PGE_WORK')).toEqual(['pge-evaluator', 'pge-generator', 'pge-planner']);
    // Other tests of this file read PGE_EVENTS through durables of their own.
    expect((await durables('PGE_EVENTS')).filter((name) => name.startsWith('pge-'))).toEqual([
      'pge-persistence',
    ]);
  });

  it('takes on a subscription only what was published on its subject: a stored message JetStream delivers there is reported', async () => {
    const bus = await open();
    const taken: unknown[] = [];
    const reports: MessageRejection[] = [];
    bus.subscribe(subjects.submit, (m) => void taken.push(m.data), { queue: 'pge-coordinator' });
    bus.subscribe(subjects.rejected('*'), (m) => void reports.push(m.data as MessageRejection));
    await bus.flush();
    const runId = freshRunId();
    // A push consumer aimed at the coordinators' queue: the server delivers each stored event
    // there under the subject it was stored on.
    const name = `push-${runId}`;
    await jsm.consumers.add('PGE_EVENTS', {
      name,
      filter_subject: subjects.events(runId),
      deliver_subject: subjects.submit,
      deliver_group: 'pge-coordinator',
      ack_policy: AckPolicy.None,
    });
    try {
      await publishEvent(bus, runStarted(runId));
      await waitFor('the delivered copy was reported', () => reports.length === 1);
      expect(taken).toEqual([]);
      expect(reports[0]).toMatchObject({
        subject: subjects.event(runId, 'run.started'),
        problem: expect.stringContaining(`arrived on the subscription to ${subjects.submit}`),
      });
    } finally {
      await jsm.consumers.delete('PGE_EVENTS', name);
    }
  });

  it('stores an event re-sent with the same id once', async () => {
    const bus = await open();
    const runId = freshRunId();
    const event = runStarted(runId);
    await publishEvent(bus, event);
    await publishEvent(bus, event);
    await publishEvent(bus, runStarted(runId, 2));
    expect(await storedOn(jsm, 'PGE_EVENTS', subjects.event(runId, 'run.started'))).toBe(2);
  });

  it('keeps one event per run and seq: another coordinator’s event of a stored seq is refused with EventSeqTakenError', async () => {
    const bus = await open();
    const other = await open();
    const runId = freshRunId();
    const mine = runStarted(runId);
    await publishEvent(bus, mine);
    // The same seq under another id, as a coordinator that took the run over (or one that still
    // sends after losing it) records it.
    const theirs = { ...mine, id: `${runId}-1-theirs`, ts: new Date(Date.now() + 1).toISOString() };
    const refused = publishEvent(other, theirs);
    // Its next event is sent only once the one before is stored: refused with it, never sent.
    const next = publishEvent(other, stepStarted(runId, 2));
    await expect(refused).rejects.toBeInstanceOf(EventSeqTakenError);
    await expect(refused).rejects.toThrow(`run ${runId}'s event 1 is stored already`);
    await expect(next).rejects.toThrow(`run ${runId}'s event 2 was not sent`);
    await expect(next).rejects.toBeInstanceOf(EventSeqTakenError);
    // Sent again, an event is its own duplicate, not a conflict.
    await publishEvent(bus, mine);
    expect((await readRunEvents(bus, runId)).map((e) => e.id)).toEqual([mine.id]);
    // Once the run's events in flight are settled, the next is sent (a takeover of the run here).
    await publishEvent(other, stepStarted(runId, 2));
    expect((await readRunEvents(bus, runId)).map((e) => e.seq)).toEqual([1, 2]);
  });

  it('asks again when a copy of an event is acknowledged with seq 0, as nats-server 2.10 does while the first is being stored', async () => {
    const proxy = await startPendingDuplicateProxy(server.port, { times: 2 });
    try {
      const bus = await open({ servers: proxy.url });
      const runId = freshRunId();
      const event = runStarted(runId);
      await publishEvent(bus, event);
      // Its copy is acknowledged as a duplicate at seq 0 twice: that seq cannot be read, so the
      // bus asks again until the acknowledgement names the stored event, its own.
      await publishEvent(bus, event);
      expect(proxy.rewritten()).toBe(2);
      expect((await readRunEvents(bus, runId)).map((e) => e.id)).toEqual([event.id]);
      await bus.close();
    } finally {
      await proxy.close();
    }
  });

  it('sends no event of a run once its signal is aborted: one queued behind another is not sent', async () => {
    const bus = await open();
    const runId = freshRunId();
    const sending = new AbortController();
    const first = publishEvent(bus, runStarted(runId), sending.signal);
    // Sent once the first is stored: the abort comes before.
    const second = publishEvent(bus, stepStarted(runId, 2), sending.signal);
    sending.abort(new Error('the run was let go'));
    await first;
    await expect(second).rejects.toThrow('the run was let go');
    await expect(publishEvent(bus, stepStarted(runId, 3), sending.signal)).rejects.toThrow(
      'the run was let go',
    );
    expect((await readRunEvents(bus, runId)).map((e) => e.seq)).toEqual([1]);
  });

  it('keeps a work item queued, with its headers, while no worker runs and hands it to the first worker that starts', async () => {
    // The queue keeps what its consumers have not taken: the coordinator makes them at start.
    const producer = await open({ reporter: 'coordinator' });
    const runId = freshRunId();
    const traceparent = `00-${'1'.repeat(32)}-${'2'.repeat(16)}-01`;
    await enqueueWork(producer, requestOf('step.work.requested', runId, 1), { traceparent });
    await producer.close();
    expect(await storedOn(jsm, 'PGE_WORK', subjects.work('generator'))).toBeGreaterThanOrEqual(1);

    const worker = await open();
    const handled: string[] = [];
    const carried: (string | undefined)[] = [];
    serveWork(worker, 'generator', async (request, headers) => {
      if (request.runId !== runId) return;
      handled.push(request.id);
      carried.push(headers.traceparent);
    });
    await worker.flush();
    expect(handled).toEqual([`${runId}-req-1`]);
    expect(carried).toEqual([traceparent]);
    // Acknowledged, so the work queue let it go.
    await expect.poll(() => storedOn(jsm, 'PGE_WORK', subjects.work('generator'))).toBe(0);
  });

  it('shares the requests of a role among its workers, each request handled exactly once', async () => {
    const producer = await open({ reporter: 'coordinator' });
    const workers = await Promise.all([open(), open(), open()]);
    const runId = freshRunId();
    const handled: string[][] = [[], [], []];
    workers.forEach((worker, i) => {
      serveWork(worker, 'generator', async (request) => {
        if (request.runId !== runId) return;
        handled[i]!.push(request.id);
        await sleep(5);
      });
    });
    const total = 30;
    for (let n = 1; n <= total; n++) await enqueueWork(producer, requestOf('step.work.requested', runId, n));
    await waitFor('every request was handled', () => handled.flat().length >= total, 10_000);
    await Promise.all(workers.map((worker) => worker.flush()));
    const ids = handled.flat().sort();
    expect(ids).toEqual(Array.from({ length: total }, (_, i) => `${runId}-req-${i + 1}`).sort());
    for (const got of handled) expect(got.length).toBeGreaterThan(0);
  });

  it('serves a work queue with concurrency: one pull at a time for its free handlers, and no more are in flight or held', async () => {
    const producer = await open();
    const worker = await open();
    const runId = freshRunId();
    const pulls: number[] = [];
    nc.subscribe(`$JS.API.CONSUMER.MSG.NEXT.PGE_WORK.${workerQueue('evaluator')}`, {
      callback: (_, msg) => {
        pulls.push((JSON.parse(new TextDecoder().decode(msg.data)) as { batch: number }).batch);
      },
    });
    await nc.flush();
    const queue = () => jsm.consumers.info('PGE_WORK', workerQueue('evaluator'));
    let inFlight = 0;
    let most = 0;
    const handled: string[] = [];
    const releases: (() => void)[] = [];
    const releaseOne = () => releases.shift()?.();
    serveWork(
      worker,
      'evaluator',
      async (request) => {
        if (request.runId !== runId) return;
        inFlight++;
        most = Math.max(most, inFlight);
        await new Promise<void>((resolve) => releases.push(resolve));
        handled.push(request.id);
        inFlight--;
      },
      3,
    );
    // Idle: one pull, for all three handlers, and only one waits at the server.
    await waitFor('a pull', () => pulls.length >= 1);
    await sleep(300);
    expect(pulls).toEqual([3]);
    expect((await queue()).num_waiting).toBe(1);
    for (let n = 1; n <= 5; n++)
      await enqueueWork(producer, requestOf('step.evaluation.requested', runId, n));
    await waitFor('three requests in flight', () => inFlight === 3);
    await sleep(300);
    expect(inFlight).toBe(3);
    // A busy worker holds only what it handles, and asks for nothing: the other two items wait
    // for a worker with room.
    const busy = await queue();
    expect([busy.num_ack_pending, busy.num_pending, busy.num_waiting]).toEqual([3, 2, 0]);
    expect(pulls).toEqual([3]);
    // A handler ends: the next pull asks for the one handler free.
    releaseOne();
    await waitFor('a fourth request in flight', () => handled.length === 1 && inFlight === 3);
    expect(pulls).toEqual([3, 1]);
    while (handled.length < 5) {
      releaseOne();
      await sleep(10);
    }
    expect(most).toBe(3);
    expect(pulls.every((batch) => batch >= 1 && batch <= 3)).toBe(true);
    expect(handled.sort()).toEqual(Array.from({ length: 5 }, (_, i) => `${runId}-req-${i + 1}`).sort());
  });

  it('keeps one waiting pull per worker: workers × concurrency past the consumer’s max_waiting all get work', async () => {
    // A server of its own: its generator queue lets 4 pulls wait, fewer than the 3 × 4 handlers.
    const server = await startNatsServer();
    const errors: unknown[] = [];
    const connectTo = (options: Parameters<typeof NatsBus.connect>[0] = {}) =>
      NatsBus.connect({ servers: server.url, onHandlerError: (error) => errors.push(error), ...options });
    const coordinator = await connectTo({ reporter: 'coordinator' });
    const own = await connect({ servers: server.url });
    const workers: NatsBus[] = [];
    try {
      const ownJsm = await jetstreamManager(own);
      const { config } = await ownJsm.consumers.info('PGE_WORK', workerQueue('generator'));
      await ownJsm.consumers.delete('PGE_WORK', workerQueue('generator'));
      await ownJsm.consumers.add('PGE_WORK', { ...config, max_waiting: 4 });
      let pulls = 0;
      own.subscribe(`$JS.API.CONSUMER.MSG.NEXT.PGE_WORK.${workerQueue('generator')}`, {
        callback: () => void pulls++,
      });
      await own.flush();
      const runId = freshRunId();
      const inFlight = [0, 0, 0];
      const handled: string[] = [];
      let release = () => {};
      const gate = new Promise<void>((resolve) => {
        release = resolve;
      });
      for (const i of [0, 1, 2]) {
        const worker = await connectTo();
        workers.push(worker);
        serveWork(
          worker,
          'generator',
          async (request) => {
            inFlight[i]!++;
            await gate;
            handled.push(request.id);
          },
          4,
        );
      }
      // One pull each, none refused and made again: the server holds one waiting pull per worker.
      await waitFor('a pull per worker', () => pulls >= 3);
      await sleep(1_500);
      expect(pulls).toBe(3);
      expect((await ownJsm.consumers.info('PGE_WORK', workerQueue('generator'))).num_waiting).toBe(3);
      for (let n = 1; n <= 12; n++)
        await enqueueWork(coordinator, requestOf('step.work.requested', runId, n));
      await waitFor('every handler busy', () => inFlight.every((count) => count === 4));
      release();
      await waitFor('every request', () => handled.length === 12);
      expect(handled.sort()).toEqual(Array.from({ length: 12 }, (_, i) => `${runId}-req-${i + 1}`).sort());
      expect(errors).toEqual([]);
    } finally {
      await Promise.all([...workers, coordinator].map((bus) => bus.close()));
      await own.close();
      await server.stop();
    }
  }, 20_000);

  it('rejects raw messages that are not JSON or fail the schema, and the worker goes on serving', async () => {
    const worker = await open();
    const watcher = await open();
    const runId = freshRunId();
    const rejections: MessageRejection[] = [];
    subscribeRejections(watcher, (rejection) => void rejections.push(rejection));
    const handled: string[] = [];
    serveWork(worker, 'evaluator', async (request) => void handled.push(request.id));
    await worker.flush();
    await watcher.flush();

    const subject = subjects.work('evaluator');
    nc.publish(subject, 'not json');
    nc.publish(subject, JSON.stringify({ type: 'step.evaluation.requested', runId }));
    await nc.flush();
    await waitFor('two rejections arrived', () => rejections.length >= 2);
    expect(rejections).toEqual([
      { subject, problem: expect.stringMatching(/not JSON/), ts: expect.any(String) },
      {
        subject,
        problem: expect.stringMatching(/invalid message on pge\.work\.evaluator: .*id/s),
        ts: expect.any(String),
      },
    ]);

    const valid = requestOf('step.evaluation.requested', runId, 7);
    await enqueueWork(watcher, valid);
    await waitFor('the valid request was handled', () => handled.includes(valid.id));
    await worker.flush();
    // Terminated and acknowledged: nothing is left to redeliver.
    await expect.poll(() => storedOn(jsm, 'PGE_WORK', subject)).toBe(0);
    expect(rejections).toHaveLength(2);
  });

  it('delivers again a work item whose handler threw, and keeps a slow handler’s item from redelivery', async () => {
    const errors: unknown[] = [];
    const worker = await open({
      ackWaitMs: 1_000,
      nakDelayMs: 50,
      onHandlerError: (error) => errors.push(error),
    });
    const producer = await open({ reporter: 'coordinator' });
    const runId = freshRunId();
    const calls: string[] = [];
    serveWork(worker, 'planner', async (request) => {
      if (request.runId !== runId) return;
      calls.push(request.id);
      if (request.seq === 1 && calls.length === 1) throw new Error('model down');
      // Longer than ack_wait: only the handler's heartbeat keeps JetStream from redelivering it.
      if (request.seq === 2) await sleep(2_500);
    });
    const plan = fullRun(runId).find((event) => event.type === 'plan.requested') as RoleRequest;
    await enqueueWork(producer, { ...plan, id: `${runId}-p1`, seq: 1 });
    await waitFor('the failed request came back', () => calls.length >= 2);
    expect(calls).toEqual([`${runId}-p1`, `${runId}-p1`]);
    expect(errors.map((error) => (error as Error).message)).toEqual(['model down']);

    await enqueueWork(producer, { ...plan, id: `${runId}-p2`, seq: 2 });
    await waitFor('the slow request started', () => calls.length >= 3);
    await worker.flush();
    await sleep(300);
    expect(calls).toEqual([`${runId}-p1`, `${runId}-p1`, `${runId}-p2`]);
  });

  it('reads a stream through a durable consumer in order and resumes where it stopped', async () => {
    const producer = await open();
    const runId = freshRunId();
    const durable = `log-${runId}`;
    const seqs = (events: RunEvent[]) => events.map((event) => event.seq);
    const events = fullRun(runId);
    for (const event of events.slice(0, 5)) await publishEvent(producer, event);

    const firstReader = await open();
    const first: RunEvent[] = [];
    firstReader.subscribeDurable(subjects.events(runId), durable, async (message) => {
      first.push(message.data as RunEvent);
      await sleep(1);
    });
    await firstReader.flush();
    expect(seqs(first)).toEqual([1, 2, 3, 4, 5]);
    await firstReader.close();

    for (const event of events.slice(5, 8)) await publishEvent(producer, event);
    const secondReader = await open();
    const second: RunEvent[] = [];
    secondReader.subscribeDurable(subjects.events(runId), durable, (message) => {
      second.push(message.data as RunEvent);
    });
    await secondReader.flush();
    expect(seqs(second)).toEqual([6, 7, 8]);
    expect(second[0]).toEqual(events[5]);
  });

  it('reads a durable in batches: each once in stream order, a message given back after the rest of its batch', async () => {
    const producer = await open();
    const runId = freshRunId();
    const events = fullRun(runId).slice(0, 6);
    for (const event of events) await publishEvent(producer, event);
    const problems: unknown[] = [];
    const reader = await open({ nakDelayMs: 1, onHandlerError: (error) => problems.push(error) });
    const seen: number[] = [];
    let failed = false;
    reader.subscribeDurable(
      subjects.events(runId),
      `batch-${runId}`,
      (message) => {
        const { seq } = message.data as RunEvent;
        seen.push(seq);
        if (seq === 2 && !failed) {
          failed = true;
          throw new Error('a write that failed once');
        }
      },
      { batch: 4 },
    );
    await waitFor('every event, the one given back again', () => seen.length === 7);
    expect(seen.slice(0, 4)).toEqual([1, 2, 3, 4]);
    expect(seen.slice(4).sort()).toEqual([2, 5, 6]);
    expect(problems).toEqual([expect.objectContaining({ message: 'a write that failed once' })]);
    expect(() =>
      reader.subscribeDurable(subjects.events(runId), 'bad-batch', () => undefined, { batch: 0 }),
    ).toThrow(ConfigurationError);
  });

  /** The seqs of run `runId`'s events as `bus` reads them through durable `durable`, in arrival order. */
  const readSeqs = (bus: NatsBus, runId: string, durable: string, options?: DurableOptions): number[] => {
    const seen: number[] = [];
    bus.subscribeDurable(
      subjects.events(runId),
      durable,
      (message) => {
        seen.push((message.data as RunEvent).seq);
      },
      options,
    );
    return seen;
  };

  /** Like `readSeqs`, with the handler of event `heldSeq` held until `release` is called. */
  const readHolding = (
    bus: NatsBus,
    runId: string,
    durable: string,
    heldSeq: number,
    options: DurableOptions,
  ) => {
    const seen: number[] = [];
    let release = () => {};
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    bus.subscribeDurable(
      subjects.events(runId),
      durable,
      async (message) => {
        const { seq } = message.data as RunEvent;
        seen.push(seq);
        if (seq === heldSeq) await gate;
      },
      options,
    );
    return { seen, release: () => release() };
  };

  /** The acks of durable `durable` on PGE_EVENTS that cross the server, as a core subscriber sees them. */
  const watchAcks = (durable: string): { acks: number } => {
    const seen = { acks: 0 };
    nc.subscribe(`$JS.ACK.PGE_EVENTS.${durable}.>`, {
      callback: (_, msg) => {
        if (msg.data.length === 0 || new TextDecoder().decode(msg.data) === '+ACK') seen.acks++;
      },
    });
    return seen;
  };
  /** The seq of the last event acknowledged through `durable`, given the stream's last seq before the run's first event. */
  const ackedUpTo = async (durable: string, base: number) =>
    (await jsm.consumers.info('PGE_EVENTS', durable)).ack_floor.stream_seq - base;
  const lastStored = async () => (await jsm.streams.info('PGE_EVENTS')).state.last_seq;

  /** The first 8 events of a fresh run, stored, and where PGE_EVENTS stood before them. */
  const storedRun = async (prefix: string) => {
    const producer = await open();
    const runId = freshRunId();
    const base = await lastStored();
    for (const event of fullRun(runId).slice(0, 8)) await publishEvent(producer, event);
    return { runId, durable: `${prefix}-${runId}`, base, count: 8 };
  };

  it('acks a durable cumulatively with ackAll: fewer acks than messages, none past a handler that has not resolved', async () => {
    const { runId, durable, base, count } = await storedRun('all');
    const acked = watchAcks(durable);
    await nc.flush();
    const problems: unknown[] = [];
    const reader = await open({ nakDelayMs: 200, onHandlerError: (error) => problems.push(error) });
    const seen: number[] = [];
    let failures = 0;
    reader.subscribeDurable(
      subjects.events(runId),
      durable,
      (message) => {
        const { seq } = message.data as RunEvent;
        seen.push(seq);
        if (seq === 6 && failures < 2) {
          failures++;
          throw new Error('a write that failed');
        }
      },
      { batch: 4, ackAll: true },
    );
    // While seq 6 fails, nothing at or after it is acknowledged: it is tried again in place.
    await waitFor('seq 6 failed once', () => failures === 1);
    await sleep(100);
    expect(await ackedUpTo(durable, base)).toBe(5);
    await waitFor('every event', () => seen.length === 10);
    // Called in stream order, two side by side (half the batch): 7 and 8 while 6 is tried again.
    expect(seen.slice(0, 6)).toEqual([1, 2, 3, 4, 5, 6]);
    expect(seen.slice(6).sort()).toEqual([6, 6, 7, 8]);
    await expect.poll(() => ackedUpTo(durable, base)).toBe(8);
    const info = await jsm.consumers.info('PGE_EVENTS', durable);
    expect(info.config.ack_policy).toBe(AckPolicy.All);
    expect(info.num_ack_pending).toBe(0);
    expect(acked.acks).toBeGreaterThan(0);
    expect(acked.acks).toBeLessThan(count);
    expect(problems).toHaveLength(2);
  });

  it('with ackAll, runs handlers side by side in stream order and acks none past one still running', async () => {
    const { runId, durable, base } = await storedRun('side');
    const reader = await open();
    const options = { batch: 16, ackAll: true, ackWaitMs: 1_000 };
    const { seen, release } = readHolding(reader, runId, durable, 2, options);
    // Every handler is called while the one of seq 2 still runs, in stream order ...
    await waitFor('every event', () => seen.length === 8);
    expect(seen).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
    // ... and no ack covers seq 2 (held acks go out within 50 ms).
    await sleep(300);
    expect(await ackedUpTo(durable, base)).toBe(1);
    // The reader's process dies before seq 2 resolves: the next reader is handed 2-8 again.
    await reader.connection.close();
    release();
    const again = readSeqs(await open(), runId, durable, options);
    await waitFor('the rest again', () => again.length >= 7);
    expect(again.slice(0, 7)).toEqual([2, 3, 4, 5, 6, 7, 8]);
    await expect.poll(() => ackedUpTo(durable, base)).toBe(8);
  });

  it('with ackAll, a reader that starts first handles what an earlier reader held unacknowledged', async () => {
    const producer = await open();
    const runId = freshRunId();
    const durable = `takeover-${runId}`;
    const events = fullRun(runId).slice(0, 6);
    const base = await lastStored();
    for (const event of events.slice(0, 3)) await publishEvent(producer, event);
    // The earlier reader takes 1-3 and dies without acknowledging them.
    await ensurePullConsumer(jsm, {
      stream: 'PGE_EVENTS',
      durable,
      filter: subjects.events(runId),
      ackWaitMs: 30_000,
      maxDeliver: 5,
      maxAckPending: 4,
      ackAll: true,
    });
    const died = await connect({ servers: server.url });
    const consumer = await jetstream(died).consumers.get('PGE_EVENTS', durable);
    const held = await consumer.fetch({ max_messages: 3, expires: 2_000 });
    let taken = 0;
    for await (const _ of held) if (++taken === 3) break;
    await died.close();
    for (const event of events.slice(3)) await publishEvent(producer, event);

    const seen = readSeqs(await open(), runId, durable, { batch: 4, ackAll: true });
    await waitFor('every event', () => seen.length >= 6);
    // 1-3 first, from the stream: an ack of 4-6 before them would have covered them unhandled.
    expect(seen.slice(0, 6)).toEqual([1, 2, 3, 4, 5, 6]);
    await expect.poll(() => ackedUpTo(durable, base)).toBe(6);
  });

  it('with ackAll, handles from the stream a message delivered to another puller before acking past it', {
    timeout: 20_000,
  }, async () => {
    const producer = await open();
    const runId = freshRunId();
    const durable = `stolen-${runId}`;
    const events = fullRun(runId).slice(0, 3);
    const base = await lastStored();
    const reader = await open();
    // Half a batch of 2: with event 1 in hand the reader takes nothing more, and its pull expires.
    const { seen, release } = readHolding(reader, runId, durable, 1, { batch: 2, ackAll: true });
    await publishEvent(producer, events[0]!);
    await waitFor('the reader holds event 1', () => seen.length === 1);
    // While the reader is busy and its pull has expired at the server, another puller takes
    // event 2 and dies with it: the server counts it as delivered.
    await sleep(PULL_EXPIRES_MS + 500);
    const other = await connect({ servers: server.url });
    const consumer = await jetstream(other).consumers.get('PGE_EVENTS', durable);
    const pull = await consumer.fetch({ max_messages: 1, expires: 2_000 });
    await publishEvent(producer, events[1]!);
    const stolen: number[] = [];
    for await (const msg of pull) stolen.push(msg.info.streamSequence - base);
    await other.close();
    expect(stolen).toEqual([2]);
    release();
    await publishEvent(producer, events[2]!);
    await waitFor('every event', () => seen.length >= 3);
    expect(seen.slice(0, 3)).toEqual([1, 2, 3]);
    await expect.poll(() => ackedUpTo(durable, base)).toBe(3);
  });

  it('replaces a durable of another ack policy from its ack floor', async () => {
    const producer = await open();
    const runId = freshRunId();
    const durable = `policy-${runId}`;
    const events = fullRun(runId).slice(0, 5);
    for (const event of events.slice(0, 3)) await publishEvent(producer, event);
    const first = await open();
    const before = readSeqs(first, runId, durable);
    await first.flush();
    await first.close();
    expect(before).toEqual([1, 2, 3]);
    expect((await jsm.consumers.info('PGE_EVENTS', durable)).config.ack_policy).toBe(AckPolicy.Explicit);

    for (const event of events.slice(3)) await publishEvent(producer, event);
    const second = await open();
    const after = readSeqs(second, runId, durable, { ackAll: true });
    await second.flush();
    expect(after).toEqual([4, 5]);
    expect((await jsm.consumers.info('PGE_EVENTS', durable)).config.ack_policy).toBe(AckPolicy.All);
  });

  it('reads back what a stream holds of one run, in stored order, reporting what fails validation', async () => {
    const bus = await open();
    const runId = freshRunId();
    const other = freshRunId();
    const events = fullRun(runId);
    for (const event of events.slice(0, 6)) await publishEvent(bus, event);
    await publishEvent(bus, fullRun(other)[0]!);
    // Stored by any client, schema or not: JetStream does not validate.
    await jetstream(nc).publish(subjects.event(runId, 'step.started'), '{"not":"an event"}');
    await publishEvent(bus, events[6]!);
    const rejections: MessageRejection[] = [];
    subscribeRejections(bus, (rejection) => void rejections.push(rejection));
    await bus.flush();
    expect(await readRunEvents(bus, runId)).toEqual(events.slice(0, 7));
    await waitFor('the rejection', () => rejections.length === 1);
    expect(rejections[0]?.subject).toBe(subjects.event(runId, 'step.started'));
    // Through an ordered consumer (a coordinator's read): the same events, the same rejection.
    expect(await readRunEvents(bus, runId, { consumer: true })).toEqual(events.slice(0, 7));
    await waitFor('the second rejection', () => rejections.length === 2);
    expect(rejections[1]?.subject).toBe(subjects.event(runId, 'step.started'));
    expect(await readRunEvents(bus, freshRunId())).toEqual([]);
    expect(await readRunEvents(bus, freshRunId(), { consumer: true })).toEqual([]);
    await expect(bus.stored('pge.runs.submit')).rejects.toThrow(TypeError);
    await expect(bus.stored('pge.runs.submit', { consumer: true })).rejects.toThrow(TypeError);
    // Its opening alone (a restarted persistence worker's join): the first event stored, only.
    expect(await readRunOpening(bus, runId)).toEqual(events[0]);
    expect(await bus.stored(subjects.events(runId), { first: 3, consumer: true })).toEqual(
      events.slice(0, 3),
    );
    expect(await readRunOpening(bus, freshRunId())).toBeNull();
    await expect(bus.stored(subjects.events(runId), { first: 0 })).rejects.toThrow(TypeError);
    // The reads leave no consumer behind: only the durable ones of other tests remain.
    await expect.poll(throwaway).toEqual([]);
  });

  it('reads a long run through an ordered consumer across its pulls, and what was stored meanwhile', async () => {
    const bus = await open({ reporter: 'coordinator' });
    const runId = freshRunId();
    const other = freshRunId();
    const js = jetstream(nc);
    const events = [runStarted(runId), ...Array.from({ length: 599 }, (_, i) => stepStarted(runId, i + 2))];
    // Interleaved with another run's events, so the filter skips stream sequences.
    await Promise.all(
      events.flatMap((event, i) => [
        js.publish(subjects.event(runId, event.type), JSON.stringify(event)),
        ...(i % 50 === 0
          ? [js.publish(subjects.event(other, 'run.started'), JSON.stringify(runStarted(other, i + 1)))]
          : []),
      ]),
    );
    // The lookups it makes: the last message on the subject, and one after the last read.
    let lookups = 0;
    const watch = nc.subscribe('$JS.API.STREAM.MSG.GET.PGE_EVENTS', { callback: () => void lookups++ });
    await nc.flush();
    const read = await readRunEvents(bus, runId, { consumer: true });
    await nc.flush();
    watch.unsubscribe();
    expect(read.map((event) => event.seq)).toEqual(events.map((event) => event.seq));
    expect(lookups).toBe(2);
    expect(read).toEqual(await readRunEvents(bus, runId));
    // The consumer is deleted once read.
    await expect.poll(throwaway).toEqual([]);
  });

  it('runs on a connection it was given and leaves that connection open when it closes', async () => {
    const shared = await connect({ servers: server.url });
    const bus = await NatsBus.fromConnection(shared);
    const runId = freshRunId();
    const seen: RunEvent[] = [];
    bus.subscribe(subjects.events(runId), (message) => void seen.push(message.data as RunEvent));
    await publishEvent(bus, runStarted(runId));
    await bus.close();
    expect(seen.map((event) => event.id)).toEqual([`${runId}-1`]);
    expect(shared.isClosed()).toBe(false);
    await expect(publishEvent(bus, runStarted(runId, 2))).rejects.toBeInstanceOf(BusError);
    await shared.close();
  });

  it('brings an existing stream to its configuration, and names one it cannot fix', async () => {
    const other = await startNatsServer();
    try {
      const admin = await connect({ servers: other.url });
      const adminJsm = await jetstreamManager(admin);
      await adminJsm.streams.add({
        name: 'PGE_RESULTS',
        subjects: [subjects.result('*')],
        storage: StorageType.File,
        duplicate_window: nanos(10_000),
      });
      // As an earlier pge made it: retention cannot be changed in place.
      await adminJsm.streams.add({
        name: 'PGE_WORK',
        subjects: ['pge.work.>'],
        retention: RetentionPolicy.Workqueue,
      });
      const error = await NatsBus.connect({ servers: other.url }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(ConfigurationError);
      expect((error as Error).message).toMatch(
        /PGE_WORK .*workqueue retention.*interest.*nats stream rm PGE_WORK/,
      );
      expect((await adminJsm.streams.info('PGE_RESULTS')).config.duplicate_window).toBe(nanos(120_000));

      await adminJsm.streams.delete('PGE_WORK');
      const bus = await NatsBus.connect({ servers: other.url });
      await bus.close();
      expect((await adminJsm.streams.info('PGE_WORK')).config.retention).toBe('interest');
      await admin.close();
    } finally {
      await other.stop();
    }
  });

  it('keeps the replica count it is told, and refuses streams and a lease bucket kept by another', async () => {
    const other = await startNatsServer();
    try {
      // Streams made with 1 replica (the default on a single server), and the lease bucket too.
      const bus = await NatsBus.connect({ servers: other.url, replicas: 1 });
      const leases = await RunLeases.open(bus.connection, {
        owner: 'c',
        replicas: 1,
        onExpired() {},
        onLost() {},
      });
      leases.stop();
      await bus.close();
      const admin = await connect({ servers: other.url });
      const adminJsm = await jetstreamManager(admin);
      for (const { name } of PGE_STREAMS)
        expect((await adminJsm.streams.info(name)).config.num_replicas).toBe(1);

      // Told 3: every stream is named, with how to agree, and nothing is changed.
      const told3 = await NatsBus.connect({ servers: other.url, replicas: 3 }).catch((e: unknown) => e);
      expect(told3).toBeInstanceOf(ConfigurationError);
      for (const { name } of PGE_STREAMS) {
        expect((told3 as Error).message).toContain(
          `JetStream stream ${name} has 1 replica, and this process was told 3`,
        );
        expect((await adminJsm.streams.info(name)).config.num_replicas).toBe(1);
      }
      expect((told3 as Error).message).toContain('nats stream edit PGE_EVENTS --replicas 3');
      const plain = await NatsBus.connect({ servers: other.url });
      const leases3 = await RunLeases.open(plain.connection, {
        owner: 'c',
        replicas: 3,
        onExpired() {},
        onLost() {},
      }).catch((e: unknown) => e);
      expect(leases3).toBeInstanceOf(ConfigurationError);
      expect((leases3 as Error).message).toContain('JetStream KV bucket pge-runs has 1 replica');
      await plain.close();

      // A new stream of 3 replicas cannot be kept by one server: the server's reason, per stream.
      await adminJsm.streams.delete('PGE_RESULTS');
      const single = await NatsBus.connect({ servers: other.url, replicas: 3 }).catch((e: unknown) => e);
      expect((single as Error).message).toMatch(/cannot set up JetStream stream PGE_RESULTS: .*replicas/i);
      await admin.close();
    } finally {
      await other.stop();
    }
  });
});

describe('the limits of the streams', () => {
  let server: NatsServerHandle;
  let admin: NatsConnection;
  let adminJsm: JetStreamManager;
  beforeAll(async () => {
    // A server of its own: the limits set here would otherwise reach every other test's streams.
    server = await startNatsServer();
    admin = await connect({ servers: server.url });
    adminJsm = await jetstreamManager(admin);
  });
  afterAll(async () => {
    await admin?.close();
    await server?.stop();
  });

  /** `max_age` (ms) and `max_bytes` of every pge stream, as the server reports them. */
  async function limits(): Promise<Record<string, [number, number]>> {
    const read: Record<string, [number, number]> = {};
    for (const name of ['PGE_EVENTS', 'PGE_WORK', 'PGE_RESULTS']) {
      const { config } = await adminJsm.streams.info(name);
      read[name] = [config.max_age / 1e6, config.max_bytes];
    }
    return read;
  }
  const everyStream = (maxAgeMs: number, maxBytes: number) => ({
    PGE_EVENTS: [maxAgeMs, maxBytes],
    PGE_WORK: [maxAgeMs, maxBytes],
    PGE_RESULTS: [maxAgeMs, maxBytes],
  });
  const connectWith = async (settings: Parameters<typeof NatsBus.connect>[0] = {}) =>
    (await NatsBus.connect({ servers: server.url, ...settings })).close();

  it('creates the streams with the default limits, 30 days and 1 GiB each', async () => {
    // Created, not brought to limits: whatever another test of this block left goes first.
    for (const name of ['PGE_EVENTS', 'PGE_WORK', 'PGE_RESULTS'])
      await adminJsm.streams.delete(name).catch(() => undefined);
    await connectWith();
    expect(await limits()).toEqual(everyStream(30 * 86_400_000, 1024 ** 3));
  });

  it('brings existing streams to the limits it is given, and a bus given none leaves them', async () => {
    await connectWith({ streamMaxAgeMs: 3_600_000, streamMaxBytes: 64 * 1024 ** 2 });
    expect(await limits()).toEqual(everyStream(3_600_000, 64 * 1024 ** 2));
    await connectWith();
    expect(await limits()).toEqual(everyStream(3_600_000, 64 * 1024 ** 2));
    await connectWith({ streamMaxBytes: 32 * 1024 ** 2 });
    expect(await limits()).toEqual(everyStream(3_600_000, 32 * 1024 ** 2));
    // 0 is no limit: JetStream's 0 for max_age, -1 for max_bytes.
    await connectWith({ streamMaxAgeMs: 0, streamMaxBytes: 0 });
    expect(await limits()).toEqual(everyStream(0, -1));
  });

  it('refuses limits it cannot keep with a ConfigurationError that names them', async () => {
    const short = await connectWith({ streamMaxAgeMs: 1_000 }).catch((e: unknown) => e);
    expect(short).toBeInstanceOf(ConfigurationError);
    expect((short as Error).message).toMatch(/streamMaxAgeMs must be 0 \(no limit\) or at least 120000/);
    await expect(connectWith({ streamMaxBytes: -5 })).rejects.toThrow(/streamMaxBytes must be >= 0/);
    // More than the server can store: it says so, and pge names the stream.
    await expect(connectWith({ streamMaxBytes: 1024 ** 5 })).rejects.toThrow(
      /cannot set up JetStream stream PGE_\w+: insufficient storage/,
    );
  });

  it('discards the oldest events once a stream is full, and keeps storing new ones', async () => {
    await connectWith({ streamMaxAgeMs: 0, streamMaxBytes: 64 * 1024 });
    const bus = await NatsBus.connect({ servers: server.url });
    try {
      const runIds = Array.from({ length: 200 }, () => freshRunId());
      for (const runId of runIds) await publishEvent(bus, runStarted(runId));
      const { state } = await adminJsm.streams.info('PGE_EVENTS');
      expect(state.bytes).toBeLessThanOrEqual(64 * 1024);
      expect(state.messages).toBeLessThan(200);
      expect(await bus.hasStored(subjects.events(runIds[0]!))).toBe(false);
      expect(await bus.hasStored(subjects.events(runIds.at(-1)!))).toBe(true);
    } finally {
      await bus.close();
    }
  });
});

describe('NatsBus.hasStored', () => {
  it('tells whether a stream holds a message on a subject or filter: whether a run id was used', async () => {
    const bus = await NatsBus.connect({ servers: natsUrl });
    try {
      const used = freshRunId();
      const unused = freshRunId();
      await publishEvent(bus, runStarted(used));
      expect(await bus.hasStored(subjects.events(used))).toBe(true);
      expect(await bus.hasStored(subjects.event(used, 'run.started'))).toBe(true);
      expect(await bus.hasStored(subjects.events(unused))).toBe(false);
      await expect(bus.hasStored(subjects.submit)).rejects.toThrow(/no pge stream holds pge.runs.submit/);
    } finally {
      await bus.close();
    }
    await expect(bus.hasStored(subjects.events('x'))).rejects.toBeInstanceOf(BusError);
  });
});

describe('NatsBus.workIdle', () => {
  it('says a role’s queue is idle only while no item waits and a worker waits for more', async () => {
    const server = await startNatsServer();
    const bus = await NatsBus.connect({ servers: server.url, reporter: 'coordinator' });
    const idle = async (expected: boolean) => {
      const deadline = Date.now() + 5_000;
      while ((await bus.workIdle('generator')) !== expected) {
        if (Date.now() > deadline)
          throw new Error(`the generators' queue never became ${expected ? 'idle' : 'busy'}`);
        await sleep(20);
      }
    };
    try {
      // No generator runs: nothing waits for work.
      expect(await bus.workIdle('generator')).toBe(false);
      const taken: string[] = [];
      let release = () => {};
      const held = new Promise<void>((resolve) => {
        release = resolve;
      });
      serveWork(
        bus,
        'generator',
        async (request) => {
          taken.push(request.id);
          await held;
        },
        1,
      );
      await idle(true);
      // Its one handler busy and a second item queued: not idle, though an item was handed out.
      const runId = freshRunId();
      await enqueueWork(bus, requestOf('step.work.requested', runId, 1));
      await enqueueWork(bus, requestOf('step.work.requested', runId, 2));
      await waitFor('the first item taken', () => taken.length === 1);
      await idle(false);
      release();
      await waitFor('both items taken', () => taken.length === 2);
      await idle(true);
    } finally {
      await bus.close();
      await server.stop();
    }
  }, 30_000);
});

describe('subscribeResults on NATS', () => {
  it('hands on the results of the runs asked for, and never decodes the others', async () => {
    const bus = await NatsBus.connect({ servers: natsUrl });
    const raw = await connect({ servers: natsUrl });
    const reports: MessageRejection[] = [];
    const seen: string[] = [];
    try {
      bus.subscribe(subjects.rejected('*'), (m) => void reports.push(m.data as MessageRejection));
      const [mine, other] = [freshRunId(), freshRunId()];
      subscribeResults(
        bus,
        '*',
        (result) => void seen.push(result.requestId),
        (runId) => runId === mine,
      );
      await bus.flush();
      // Not a result: reported when decoded, so only on the subject of a run asked for.
      const malformed = '{"forged":true}';
      await jetstream(raw).publish(subjects.result(other, 'planner'), malformed);
      await publishResult(bus, planFailed(other, 'theirs'));
      await jetstream(raw).publish(subjects.result(mine, 'planner'), malformed);
      await publishResult(bus, planFailed(mine, 'ours'));
      await waitFor('the result of the run asked for', () => seen.length === 1);
      await waitFor('the malformed one on its subject reported', () => reports.length === 1);
      await sleep(200);
      expect(seen).toEqual(['ours']);
      expect(reports.map((r) => r.subject)).toEqual([subjects.result(mine, 'planner')]);
    } finally {
      await raw.close();
      await bus.close();
    }
  });
});

describe('NatsBus.lastStored', () => {
  it('reads the last message on a subject or filter in one lookup, validated; null for none', async () => {
    const bus = await NatsBus.connect({ servers: natsUrl });
    const raw = await connect({ servers: natsUrl });
    const reports: MessageRejection[] = [];
    try {
      bus.subscribe(subjects.rejected('*'), (m) => void reports.push(m.data as MessageRejection));
      await bus.flush();
      const runId = freshRunId();
      const started = runStarted(runId);
      await publishEvent(bus, started);
      await publishEvent(bus, stepStarted(runId, 2));
      expect(await bus.lastStored(subjects.events(runId))).toMatchObject({
        runId,
        seq: 2,
        type: 'step.started',
      });
      expect(await bus.lastStored(subjects.event(runId, 'run.started'))).toEqual(started);
      expect(await bus.lastStored(subjects.events(freshRunId()))).toBeNull();
      // A message that is no event, stored last by a client that bypasses pge: read as none, and reported.
      await jetstream(raw).publish(subjects.event(runId, 'step.started'), '{"forged":true}');
      expect(await bus.lastStored(subjects.events(runId))).toBeNull();
      await waitFor('the forged message reported', () => reports.length === 1);
      expect(reports[0]).toMatchObject({ subject: subjects.event(runId, 'step.started') });
      await expect(bus.lastStored(subjects.submit)).rejects.toThrow(/no pge stream holds pge.runs.submit/);
    } finally {
      await raw.close();
      await bus.close();
    }
    await expect(bus.lastStored(subjects.events('x'))).rejects.toBeInstanceOf(BusError);
  });
});

describe('NatsBus through an outage', () => {
  /**
   * The first failure a bus on a fresh server reports once the durable `durable` of `stream`, which
   * `subscribe` reads, is deleted under it (within 20 s).
   */
  async function firstReportAfterDeleting(
    subscribe: (bus: NatsBus) => void,
    stream: string,
    durable: string,
  ): Promise<unknown> {
    const server = await startNatsServer();
    const errors: unknown[] = [];
    const bus = await NatsBus.connect({ servers: server.url, onHandlerError: (error) => errors.push(error) });
    const admin = await connect({ servers: server.url });
    try {
      subscribe(bus);
      await bus.flush();
      await (await jetstreamManager(admin)).consumers.delete(stream, durable);
      const deadline = Date.now() + 20_000;
      while (errors.length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
      return errors[0];
    } finally {
      await admin.close();
      await bus.close();
      await server.stop();
    }
  }

  it('reports pulls that keep failing (its consumer deleted under it), so a worker is never stuck in silence', async () => {
    const worker = (bus: NatsBus) => void serveWork(bus, 'planner', async () => {});
    const error = await firstReportAfterDeleting(worker, 'PGE_WORK', 'pge-planner');
    expect(String(error)).toMatch(/cannot pull pge\.work\.planner as pge-planner \(failing for 1\d s\)/);
    expect(error).toBeInstanceOf(BusError);
  }, 30_000);

  it('reports a reader of its own whose consume keeps failing (its consumer deleted under it)', async () => {
    const reader = (bus: NatsBus) =>
      void bus.subscribeDurable(subjects.events('*'), 'gone-reader', async () => {}, {
        ackAll: true,
        batch: 8,
      });
    const error = await firstReportAfterDeleting(reader, 'PGE_EVENTS', 'gone-reader');
    expect(String(error)).toMatch(/cannot pull pge\.run\.\*\.evt\.> as gone-reader \(failing for 1\d s\)/);
    expect(error).toBeInstanceOf(BusError);
  }, 30_000);

  it('stays on a lone server that leaves its publishes unserved: there is no other server to move to', async () => {
    const server = await startNatsServer();
    const errors: unknown[] = [];
    const bus = await NatsBus.connect({ servers: server.url, onHandlerError: (error) => errors.push(error) });
    const admin = await connect({ servers: server.url });
    const statuses: string[] = [];
    (async () => {
      for await (const status of bus.connection.status()) statuses.push(status.type);
    })().catch(() => undefined);
    try {
      await (await jetstreamManager(admin)).streams.delete('PGE_EVENTS');
      const published = publishEvent(bus, runStarted(freshRunId())).catch((error: unknown) => error);
      // Past UNSERVED_MOVE_MS of "no responders", where a process on a cluster moves.
      await sleep(UNSERVED_MOVE_MS + 3_000);
      expect(errors.map(String).join('\n')).not.toMatch(/moving to another server/);
      expect(statuses).not.toContain('disconnect');
      await bus.close();
      expect(await published).toBeInstanceOf(BusError);
    } finally {
      await admin.close();
      await bus.close();
      await server.stop();
    }
  }, 30_000);

  it('moves to another of the servers it was given when the one it is on leaves its publishes unserved, though neither lists the other', async () => {
    // Two lone servers: a cut-off server of a cluster lists only itself, as these do.
    const servers = [await startNatsServer(), await startNatsServer()];
    const errors: unknown[] = [];
    const bus = await NatsBus.connect({
      servers: servers.map((server) => server.url),
      onHandlerError: (error) => errors.push(error),
    });
    const on = servers.find((server) => server.port === bus.connection.info?.port)!;
    const admin = await connect({ servers: on.url });
    try {
      await (await jetstreamManager(admin)).streams.delete('PGE_EVENTS');
      const published = publishEvent(bus, runStarted(freshRunId())).catch((error: unknown) => error);
      await waitFor(
        'the bus is on the other server',
        () => bus.connection.info !== undefined && bus.connection.info.port !== on.port,
        UNSERVED_MOVE_MS + 20_000,
      );
      expect(bus.connection.info?.port).not.toBe(on.port);
      expect(errors.map(String).join('\n')).toMatch(
        new RegExp(`:${on.port} has left JetStream publishes unserved for \\d+ s; moving to another server`),
      );
      // The other server has no stream of pge's either: the publish ends with the bus.
      await bus.close();
      await published;
    } finally {
      await admin.close();
      await bus.close();
      await Promise.all(servers.map((server) => server.stop()));
    }
  }, 45_000);

  it('reconnects after the server restarts and its worker serves what was queued meanwhile', async () => {
    const server = await startNatsServer();
    const errors: unknown[] = [];
    const worker = await NatsBus.connect({
      servers: server.url,
      onHandlerError: (error) => errors.push(error),
    });
    try {
      const runId = freshRunId();
      const handled: string[] = [];
      serveWork(worker, 'evaluator', async (request) => void handled.push(request.id));
      await worker.flush();
      await server.restart(300);
      const producer = await NatsBus.connect({ servers: server.url });
      await enqueueWork(producer, requestOf('step.evaluation.requested', runId, 1));
      await producer.close();
      await waitFor('the worker served the request', () => handled.length === 1, 10_000);
      expect(handled).toEqual([`${runId}-req-1`]);
      // A short outage is not a failure: the pull the restart cut off is made again, silently.
      expect(errors).toEqual([]);
    } finally {
      await worker.close();
      await server.stop();
    }
  });

  it('stores every event once across a server restart: a publish is sent again, same id, until acknowledged', async () => {
    const server = await startNatsServer();
    const bus = await NatsBus.connect({ servers: server.url, onHandlerError: () => undefined });
    try {
      const runId = freshRunId();
      const count = 60;
      const published: Promise<void>[] = [];
      const publishing = (async () => {
        for (let seq = 1; seq <= count; seq++) {
          published.push(publishEvent(bus, runStarted(runId, seq)));
          await sleep(15);
        }
      })();
      await sleep(200);
      await server.restart(400);
      await publishing;
      // None was given up: every publish resolved once the restarted server stored it.
      await Promise.all(published);
      const seqs = (await storedEvents({ servers: server.url }, subjects.events(runId))).map((e) => e.seq);
      expect(seqs.sort((a, b) => a - b)).toEqual(seqsUpTo(count));
    } finally {
      await bus.close();
      await server.stop();
    }
  }, 30_000);

  it('fails a publish the stream refuses at once, and one never acknowledged after publishRetryMs or on close', async () => {
    const server = await startNatsServer();
    const quiet = { onHandlerError: () => undefined };
    const bounded = await NatsBus.connect({ servers: server.url, publishRetryMs: 1_500, ...quiet });
    const unbounded = await NatsBus.connect({ servers: server.url, ...quiet });
    try {
      const nc = await connect({ servers: server.url });
      const jsm = await jetstreamManager(nc);
      const info = await jsm.streams.info('PGE_EVENTS');
      await jsm.streams.update('PGE_EVENTS', { ...info.config, max_msg_size: 256 });
      await nc.close();
      // Refused by the stream (message too large): not a transport failure, never sent again.
      let started = Date.now();
      const refused = await publishEvent(bounded, runStarted(freshRunId())).catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(BusError);
      expect((refused as Error).message).toMatch(/^cannot publish on pge\.run\..*: .*size/i);
      expect(Date.now() - started).toBeLessThan(1_000);

      await server.stop();
      started = Date.now();
      const [late, closed] = await Promise.all([
        publishEvent(bounded, stepStarted(freshRunId())).catch((e: unknown) => e),
        (async () => {
          const publish = publishEvent(unbounded, stepStarted(freshRunId())).catch((e: unknown) => e);
          await sleep(500);
          await unbounded.close();
          return publish;
        })(),
      ]);
      expect(late).toBeInstanceOf(BusError);
      expect((late as Error).message).toMatch(
        /^cannot publish on pge\.run\..*: JetStream did not acknowledge it within 1500 ms \(\d+ attempts? over \d+ ms, the last: /,
      );
      expect(closed).toBeInstanceOf(BusError);
      expect((closed as Error).message).toMatch(/the bus closed before JetStream stored it \(\d+ attempts?/);
    } finally {
      await Promise.all([bounded.close(), unbounded.close()]);
      await server.stop();
    }
  }, 30_000);

  it.each([
    ['by lookups, then as the server republishes what it stores', 'republished'],
    ['by lookups alone, from a stream made before pge had it republish', 'looked up'],
    ['through an ordered consumer', 'consumer'],
  ] as const)(
    'reads a run %s, from its first event, across a server restart, once each',
    async (_, how) => {
      const consumer = how === 'consumer';
      const server = await startNatsServer();
      if (how === 'looked up') {
        // RePublish cannot be added to a stream that exists (nats-server 2.9): pge reads it as it is.
        const admin = await connect({ servers: server.url });
        const { republish: _republish, ...older } = streamConfig(PGE_STREAMS[0]!);
        await (await jetstreamManager(admin)).streams.add(older);
        await admin.close();
      }
      const problems: unknown[] = [];
      const bus = await NatsBus.connect({ servers: server.url, onHandlerError: (e) => problems.push(e) });
      try {
        const runId = freshRunId();
        await publishEvent(bus, runStarted(runId, 1));
        await publishEvent(bus, stepStarted(runId, 2));
        const seen: number[] = [];
        const fresh: number[] = [];
        bus.subscribeOrdered(subjects.events(runId), (m) => void seen.push((m.data as RunEvent).seq), {
          consumer,
        });
        bus.subscribeOrdered(subjects.events(runId), (m) => void fresh.push((m.data as RunEvent).seq), {
          from: 'new',
          consumer,
        });
        await waitFor('the stored events were read', () => seen.length === 2);
        await bus.flush();
        await server.restart(300);
        for (let seq = 3; seq <= 6; seq++) await publishEvent(bus, stepStarted(runId, seq));
        await waitFor('the events after the restart were read', () => seen.length === 6, 15_000);
        await sleep(200);
        expect(seen).toEqual([1, 2, 3, 4, 5, 6]);
        expect(fresh).toEqual([3, 4, 5, 6]);
        expect(() => bus.subscribeOrdered(subjects.submit, () => undefined)).toThrow(TypeError);
      } finally {
        await bus.close();
        await server.stop();
      }
    },
    30_000,
  );

  it('refuses a server without JetStream with a ConfigurationError', async () => {
    const server = await startNatsServer({ jetstream: false });
    try {
      const error = await NatsBus.connect({ servers: server.url }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(ConfigurationError);
      expect((error as Error).message).toMatch(/^JetStream is not available at nats:\/\/127\.0\.0\.1:\d+: /);
    } finally {
      await server.stop();
    }
  });
});

describe('connecting to NATS', () => {
  it('fails fast with a ConfigurationError when the server cannot be reached', async () => {
    const started = Date.now();
    const error = await NatsBus.connect({ servers: 'nats://127.0.0.1:1' }).catch((e: unknown) => e);
    expect(Date.now() - started).toBeLessThan(5_000);
    expect(error).toBeInstanceOf(ConfigurationError);
    expect((error as Error).message).toMatch(/^cannot connect to NATS at nats:\/\/127\.0\.0\.1:1: \S/);
  });

  it('never shows a password, in the URL or in the options', async () => {
    const server = await startNatsServer({ args: ['--user', 'pge', '--pass', 'hunter2-secret'] });
    try {
      const inUrl = await connectNats({ servers: 'nats://pge:hunter2-secret@127.0.0.1:1' }).catch((e) => e);
      expect((inUrl as Error).message).toMatch(
        /^cannot connect to NATS at nats:\/\/pge:\*\*\*@127\.0\.0\.1:1: /,
      );
      const wrong = await connectNats({ servers: server.url, user: 'pge', pass: 'wrong-secret' }).catch(
        (e) => e,
      );
      expect(wrong).toBeInstanceOf(ConfigurationError);
      expect((wrong as Error).message).toContain(`cannot connect to NATS at ${server.url}: `);
      expect((wrong as Error).message).not.toMatch(/secret/);
      const nc = await connectNats({ servers: server.url, user: 'pge', pass: 'hunter2-secret' });
      await nc.close();
    } finally {
      await server.stop();
    }
  });

  it('reads its options from the environment and refuses unknown or conflicting ones', async () => {
    expect(
      natsOptionsFromEnv({
        NATS_URL: 'nats://a:4222, nats://b:4222',
        NATS_USER: 'pge',
        NATS_PASSWORD: 'pw',
        NATS_CA: '/etc/ca.pem',
        NATS_TOKEN: '',
      }),
    ).toEqual({
      servers: ['nats://a:4222', 'nats://b:4222'],
      user: 'pge',
      pass: 'pw',
      tls: { caFile: '/etc/ca.pem' },
    });
    expect(
      natsOptionsFromEnv({
        NATS_CREDS: '/x.creds',
        NATS_NKEY_SEED_FILE: '/seed',
        NATS_CERT: 'c',
        NATS_KEY: 'k',
        NATS_PING_INTERVAL_MS: '2500',
      }),
    ).toEqual({
      credsFile: '/x.creds',
      nkeyFile: '/seed',
      tls: { certFile: 'c', keyFile: 'k' },
      pingIntervalMs: 2500,
    });
    expect(() => natsOptionsFromEnv({ NATS_PING_INTERVAL_MS: '10s' })).toThrow(ConfigurationError);
    for (const pingIntervalMs of [0, 99, 2 ** 31])
      await expect(connectNats({ servers: natsUrl, pingIntervalMs })).rejects.toThrow(/pingIntervalMs/);
    await expect(connectNats({ server: 'x' } as never)).rejects.toBeInstanceOf(ConfigurationError);
    await expect(connectNats({ token: 't', user: 'u', pass: 'p' })).rejects.toThrow(/choose one/);
    await expect(connectNats({ credsFile: '/nonexistent/pge.creds' })).rejects.toThrow(
      /cannot read the NATS creds file \/nonexistent\/pge\.creds: ENOENT/,
    );
    await expect(NatsBus.connect({ servers: natsUrl, ackWait: 5 } as never)).rejects.toBeInstanceOf(
      ConfigurationError,
    );
  });
});
