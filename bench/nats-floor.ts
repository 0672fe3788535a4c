import type { Consumer, ConsumerMessages, JetStreamClient, JetStreamManager } from '@nats-io/jetstream';
import { DeliverPolicy, jetstream, jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { connectNats } from '../src/bus/nats-connection.js';
import { ensurePullConsumer, streamConfig } from '../src/bus/nats-streams.js';
import { subjects } from '../src/bus/subjects.js';
import type { BenchNatsServer } from './nats-deployment.js';
import { type MessageCounters, perUnit } from './nats-monitor.js';

/**
 * The floor of a model call on NATS: the bare work round trip that any JetStream work queue pays,
 * with the client library pge uses (`connectNats`, so the same connection options) and streams and
 * a consumer configured as pge's (`streamConfig`, `ensurePullConsumer`), on the server section 6
 * measured pge on, after pge's services stopped. A requester publishes a work item (the bytes of a
 * request event pge stored in that run) to a work-queue stream and waits for its PubAck; a worker,
 * on its own connection, pulls it (`fetch`, one message per pull, as pge's workers do), publishes a
 * result (the bytes of a stored result) to a limits stream, waits for its PubAck and acknowledges
 * the work item; the round trip ends when the result reaches the requester. Both publishes carry a
 * `Nats-Msg-Id`, as pge's do. Nothing is decoded or validated: this is the transport alone.
 *
 * Measured twice, by how the result reaches the requester: a core subscription on the result's
 * subject (the least it can cost), and an ordered consumer on the results stream (how pge's
 * coordinator reads results, so a reconnect loses none). Then the fenced floor (`workFenced`): the
 * same round trip with what pge's guarantees add to it and nothing else. Also core request/reply
 * of 128 bytes, the least any exchange with a server costs.
 */

/** Settings of the floor. */
export interface FloorSettings {
  /** Timed round trips of each kind, one after another. */
  iterations: number;
  /** Round trips of each kind before the timed ones. */
  warmup: number;
  /** Payload of the core request/reply. */
  coreBytes: number;
}

/** One kind of round trip: its time, and what it cost the process, the server and the wire. */
export interface RoundTripFigures {
  iterations: number;
  /** Median of the round trips' times: the reported figure. */
  medianUs: number;
  p10Us: number;
  p90Us: number;
  /** This process's CPU time (requester and worker both run here) per round trip. */
  processCpuUs: number;
  /** The nats-server's CPU time per round trip (null when it cannot be read). */
  serverCpuUs: number | null;
  /** Messages and bytes into and out of the server per round trip (its `/varz`). */
  server: MessageCounters;
}

/** Results of the floor. */
export interface FloorResults {
  settings: FloorSettings;
  /** Sizes of the work item and the result sent: a request event and a result pge stored. */
  payloadBytes: { work: number; result: number; eventsBefore: number[]; core: number };
  /** Work round trip, result delivered on a core subscription. */
  work: RoundTripFigures;
  /** Work round trip, result delivered by an ordered consumer, as pge's coordinator reads it. */
  workOrdered: RoundTripFigures;
  /**
   * The fenced floor: the least a call costs with pge's guarantees, on one server. The requester
   * stores the events a call records before its request, one after another (one event per seq
   * across a takeover), then the request itself, on a limits stream from which the worker pulls it
   * (the request travels once, and is on record before any worker sees it); the result comes back
   * as in `work`.
   */
  workFenced: RoundTripFigures;
  /**
   * The fenced floor with the request sent as pge sends it: stored as an event, then, once that is
   * acknowledged, published as a work item to the work-queue stream the worker pulls from.
   */
  workFencedTwice: RoundTripFigures;
  /** Core request/reply of `coreBytes`. */
  coreRequestReply: RoundTripFigures;
}

const WORK = { name: 'FLOOR_WORK', subject: 'floor.work', retention: 'interest' } as const;
const RESULTS = { name: 'FLOOR_RESULTS', subject: 'floor.result', retention: 'limits' } as const;
/** The fenced floor's record: a limits stream, as PGE_EVENTS, that also queues the requests. */
const EVENTS = { name: 'FLOOR_EVENTS', subject: 'floor.event.>', retention: 'limits' } as const;
const EVENT_SUBJECT = 'floor.event.other';
const REQUEST_SUBJECT = 'floor.event.request';
/** Where the twice-sent request's event is stored, apart from the requests a worker pulls. */
const ASKED_SUBJECT = 'floor.event.asked';
const ECHO_SUBJECT = 'floor.echo';
/** Pull and result timeouts: far beyond a round trip; reaching one fails the bench. */
const WAIT_MS = 5_000;

/** The events a model call stores before its request, besides the request: the answer to the call
 * before, its `model.call.completed`, and the judgement it led to (pge: 3.05 per call). */
const EVENTS_BEFORE_A_REQUEST = ['step.work.completed', 'model.call.completed', 'step.attempt.judged'];

/** What the floor sends: the bytes of events and a result pge stored on this server. */
interface Payloads {
  /** The last generator work request. */
  work: Uint8Array;
  /** The last generator result. */
  result: Uint8Array;
  /** The last event of each of `EVENTS_BEFORE_A_REQUEST`. */
  eventsBefore: Uint8Array[];
}

async function lastStored(jsm: JetStreamManager, stream: string, subject: string): Promise<Uint8Array> {
  const message = await jsm.streams.getMessage(stream, { last_by_subj: subject });
  if (message === null) throw new Error(`floor: nothing stored on ${subject} to send`);
  return message.data;
}

/** The bytes of requests, events and results pge stored on this server: the floor sends what pge sends. */
async function storedPayloads(jsm: JetStreamManager): Promise<Payloads> {
  // `subjects.event` refuses a wildcard run id; a last-message lookup takes one (nats-server 2.9 too).
  const event = (type: string) => lastStored(jsm, 'PGE_EVENTS', `pge.run.*.evt.${type}`);
  return {
    work: await event('step.work.requested'),
    result: await lastStored(jsm, 'PGE_RESULTS', subjects.result('*', 'generator')),
    eventsBefore: await Promise.all(EVENTS_BEFORE_A_REQUEST.map(event)),
  };
}

/**
 * Where a round trip queues its work item, and the events the requester stores before it, one
 * after another (each once the one before is acknowledged).
 */
interface WorkPath {
  stream: string;
  subject: string;
  storedFirst: readonly { subject: string; payload: Uint8Array }[];
}

/** The worker's side: pulls one work item at a time, publishes its result, acknowledges it. */
class FloorWorker {
  private active = true;
  private batch: ConsumerMessages | null = null;
  readonly done: Promise<void>;

  /** `label` keeps each kind's result ids apart: the results stream would drop a repeated one. */
  constructor(consumer: Consumer, js: JetStreamClient, result: Uint8Array, label: string) {
    this.done = this.run(consumer, js, result, label);
  }

  private async run(
    consumer: Consumer,
    js: JetStreamClient,
    result: Uint8Array,
    label: string,
  ): Promise<void> {
    while (this.active) {
      try {
        this.batch = await consumer.fetch({ max_messages: 1, expires: WAIT_MS });
        for await (const msg of this.batch) {
          await js.publish(RESULTS.subject, result, { msgID: `result-${label}-${msg.seq}` });
          msg.ack();
        }
      } catch (error) {
        if (this.active) throw error;
      } finally {
        this.batch = null;
      }
    }
  }

  async stop(): Promise<void> {
    this.active = false;
    await this.batch?.close();
    await this.done;
  }
}

/** Resolves when the next result arrives; a result that does not come within `WAIT_MS` fails the bench. */
class ResultWaiter {
  private resolve: (() => void) | null = null;
  delivered = 0;

  next(): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`floor: no result within ${WAIT_MS} ms`)), WAIT_MS);
      this.resolve = () => {
        clearTimeout(timer);
        resolve();
      };
    });
  }

  arrived(): void {
    this.delivered++;
    const resolve = this.resolve;
    this.resolve = null;
    resolve?.();
  }
}

/** Times `iterations` sequential round trips after `warmup` untimed ones. */
async function timeRoundTrips(
  server: BenchNatsServer,
  settings: FloorSettings,
  roundTrip: (index: number) => Promise<void>,
): Promise<RoundTripFigures> {
  for (let i = 0; i < settings.warmup; i++) await roundTrip(i);
  const samples: number[] = [];
  const varzBefore = await server.monitor.varz();
  const serverBefore = server.cpuMs();
  const cpuBefore = process.cpuUsage();
  for (let i = 0; i < settings.iterations; i++) {
    const started = performance.now();
    await roundTrip(settings.warmup + i);
    samples.push((performance.now() - started) * 1000);
  }
  const cpu = process.cpuUsage(cpuBefore);
  const serverAfter = server.cpuMs();
  const varzAfter = await server.monitor.varz();
  const n = settings.iterations;
  samples.sort((a, b) => a - b);
  const at = (share: number) => samples[Math.min(n - 1, Math.floor(share * n))] ?? Number.NaN;
  return {
    iterations: n,
    medianUs: at(0.5),
    p10Us: at(0.1),
    p90Us: at(0.9),
    processCpuUs: (cpu.user + cpu.system) / n,
    serverCpuUs:
      serverBefore === null || serverAfter === null ? null : ((serverAfter - serverBefore) * 1000) / n,
    server: perUnit(varzBefore, varzAfter, n),
  };
}

/** The work round trip, the result delivered by `subscribe(waiter)` (which returns how to stop). */
async function workRoundTrips(
  server: BenchNatsServer,
  settings: FloorSettings,
  connections: { requester: NatsConnection; worker: NatsConnection },
  payloads: Payloads,
  path: WorkPath,
  label: string,
  subscribe: (waiter: ResultWaiter) => Promise<() => Promise<void>>,
): Promise<RoundTripFigures> {
  const jsm = await jetstreamManager(connections.worker);
  const durable = `floor-worker-${label}`;
  // NatsBus's defaults for a role's work consumer: ack wait 10 s, 5 deliveries, 1,000 unacknowledged.
  await ensurePullConsumer(jsm, {
    stream: path.stream,
    durable,
    filter: path.subject,
    ackWaitMs: 10_000,
    maxDeliver: 5,
    maxAckPending: 1000,
  });
  const workerJs = jetstream(connections.worker);
  const worker = new FloorWorker(
    await workerJs.consumers.get(path.stream, durable),
    workerJs,
    payloads.result,
    label,
  );
  const waiter = new ResultWaiter();
  const unsubscribe = await subscribe(waiter);
  const js = jetstream(connections.requester);
  // A worker that fails ends the measure at once rather than at the result's timeout.
  const failed = worker.done.then(() => {
    throw new Error('floor: the worker stopped');
  });
  failed.catch(() => undefined);
  let figures: RoundTripFigures;
  try {
    figures = await timeRoundTrips(server, settings, async (i) => {
      const roundTrip = async () => {
        for (const [k, event] of path.storedFirst.entries()) {
          await js.publish(event.subject, event.payload, { msgID: `event-${label}-${i}-${k}` });
        }
        const delivered = waiter.next();
        await Promise.all([
          js.publish(path.subject, payloads.work, { msgID: `work-${label}-${i}` }),
          delivered,
        ]);
      };
      await Promise.race([roundTrip(), failed]);
    });
  } finally {
    await unsubscribe();
    await worker.stop();
    await jsm.consumers.delete(path.stream, durable);
  }
  const expected = settings.warmup + settings.iterations;
  if (waiter.delivered !== expected) {
    throw new Error(`floor (${label}): ${waiter.delivered} results for ${expected} work items`);
  }
  return figures;
}

/** Measures the floor on `server`, which holds the streams of a pge run (their payloads are sent). */
export async function measureFloor(server: BenchNatsServer, settings: FloorSettings): Promise<FloorResults> {
  const requester = await connectNats({ servers: server.url, name: 'pge-bench-floor-requester' });
  const worker = await connectNats({ servers: server.url, name: 'pge-bench-floor-worker' });
  try {
    const jsm = await jetstreamManager(requester);
    const payloads = await storedPayloads(jsm);
    await jsm.streams.add(streamConfig(WORK));
    await jsm.streams.add(streamConfig(RESULTS));
    await jsm.streams.add(streamConfig(EVENTS));
    const connections = { requester, worker };
    const queued: WorkPath = { stream: WORK.name, subject: WORK.subject, storedFirst: [] };
    const coreDelivery = async (waiter: ResultWaiter) => {
      const sub = requester.subscribe(RESULTS.subject, { callback: () => waiter.arrived() });
      await requester.flush();
      return async () => sub.unsubscribe();
    };

    const work = await workRoundTrips(server, settings, connections, payloads, queued, 'core', coreDelivery);

    const workOrdered = await workRoundTrips(
      server,
      settings,
      connections,
      payloads,
      queued,
      'ordered',
      async (waiter) => {
        const consumer = await jetstream(requester).consumers.get(RESULTS.name, {
          filter_subjects: RESULTS.subject,
          deliver_policy: DeliverPolicy.New,
        });
        const messages = await consumer.consume({ callback: () => waiter.arrived() });
        return async () => {
          await messages.close();
          await consumer.delete().catch(() => undefined);
        };
      },
    );

    const eventsBefore = payloads.eventsBefore.map((payload) => ({ subject: EVENT_SUBJECT, payload }));
    const fenced: WorkPath = { stream: EVENTS.name, subject: REQUEST_SUBJECT, storedFirst: eventsBefore };
    const workFenced = await workRoundTrips(
      server,
      settings,
      connections,
      payloads,
      fenced,
      'fenced',
      coreDelivery,
    );
    // As pge sends a request: stored as an event (nothing reads it here), then queued as a work item.
    const twice: WorkPath = {
      ...queued,
      storedFirst: [...eventsBefore, { subject: ASKED_SUBJECT, payload: payloads.work }],
    };
    const workFencedTwice = await workRoundTrips(
      server,
      settings,
      connections,
      payloads,
      twice,
      'twice',
      coreDelivery,
    );

    const echo = worker.subscribe(ECHO_SUBJECT, {
      callback: (_error, msg) => {
        msg.respond(msg.data);
      },
    });
    await worker.flush();
    const core = new Uint8Array(settings.coreBytes).fill(0x61);
    const coreRequestReply = await timeRoundTrips(server, settings, async () => {
      await requester.request(ECHO_SUBJECT, core, { timeout: WAIT_MS });
    });
    echo.unsubscribe();

    await jsm.streams.delete(WORK.name);
    await jsm.streams.delete(RESULTS.name);
    await jsm.streams.delete(EVENTS.name);
    return {
      settings,
      payloadBytes: {
        work: payloads.work.length,
        result: payloads.result.length,
        eventsBefore: payloads.eventsBefore.map((event) => event.length),
        core: core.length,
      },
      work,
      workOrdered,
      workFenced,
      workFencedTwice,
      coreRequestReply,
    };
  } finally {
    await requester.close();
    await worker.close();
  }
}
