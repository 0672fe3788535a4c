import { setTimeout as sleep } from 'node:timers/promises';
import type { Consumer, ConsumerInfo } from '@nats-io/jetstream';
import type { Msg, MsgHdrs, NatsConnection, Subscription } from '@nats-io/transport-node';
import pLimit from 'p-limit';
import { BusError } from '../errors.js';
import { type Bus, type BusHandler, type BusSubscription, Delivery } from './bus.js';
import { decodeMessage } from './codec.js';
import { busError, fromNatsHeaders, OutageReport } from './nats-helpers.js';
import { streamOf } from './nats-streams.js';
import { subjectMatches } from './subjects.js';

/**
 * What every subscription of the NATS bus shares (its host, the delivery of received messages to a
 * handler one at a time, the wait for a consumer to be drained), and the core subscription, which
 * hands its messages to its handler one at a time, in arrival order, as the in-process bus does.
 * The pull subscription (nats-pull-subscription.ts) and the readings of what a stream stores
 * (nats-stored.ts, nats-ordered-subscription.ts) are built from these.
 */

/** What a subscription needs from its bus. */
export interface NatsHost {
  readonly bus: Bus;
  /** A message was taken in: `flush` waits until the matching `end`. */
  begin(): void;
  end(): void;
  /** Reports a message that failed decoding on `pge.errors.rejected.<reporter>`. */
  rejectReceived(subject: string, error: unknown): void;
  /** Tells the bus's `onHandlerError` about a failure; delivery goes on. */
  report(error: unknown, subject: string): void;
  /** Calls `listener` at each reconnect of the connection until the returned function is called. */
  onReconnect(listener: () => void): () => void;
  /** Calls `listener` at each loss of the connection until the returned function is called. */
  onDisconnect(listener: () => void): () => void;
  /** Told of each pull that went unserved (`isUnservedPull`), with when the first began (`ServerMove`). */
  unserved(since: number): void;
  /** Told when a pull was served. */
  served(): void;
  detach(subscription: NatsSubscription): void;
}

/** Timings of pull subscriptions. */
export interface PullTimings {
  readonly ackWaitMs: number;
  readonly maxDeliver: number;
  readonly nakDelayMs: number;
}

/** How a pull subscription pulls, besides its timings. */
export interface PullSettings extends PullTimings {
  /** A reader of its own: messages it asks for at once (consume's `max_messages`), handled in order. */
  readonly batch: number;
  /** A member of a queue: messages its handler takes at once, each pulled when a handler is free. */
  readonly concurrency: number;
}

/** A subscription of the NATS bus. */
export interface NatsSubscription extends BusSubscription {
  /** Resolves once JetStream has nothing left to hand this subscription (core ones: at once). */
  caughtUp(): Promise<void>;
  /** Stops taking messages; what a handler already has finishes. */
  stop(): void;
  /** Sends the acknowledgements it holds back to send several as one, if any (`flush` then carries them). */
  sendHeldAcks?(): void;
}

/**
 * How long one pull request waits at the server before the client asks again. Short, because the
 * server may still hand a message to the pull request of a worker that died (when some client's
 * subscription, `>` say, covers its reply subject); that message then waits one ack wait.
 */
export const PULL_EXPIRES_MS = 5_000;
const CAUGHT_UP_POLL_MS = 10;

/** The message's data, or null when it does not decode (then reported on `pge.errors.rejected.<reporter>`). */
export function decodeReceived(
  host: NatsHost,
  msg: { subject: string; data: Uint8Array },
): { data: unknown } | null {
  try {
    return { data: decodeMessage(msg.subject, msg.data) };
  } catch (error) {
    host.rejectReceived(msg.subject, error);
    return null;
  }
}

/** A received message: what `SerialDelivery` reads of a core message and of a JetStream one. */
interface Received {
  readonly subject: string;
  readonly data: Uint8Array;
  readonly headers?: MsgHdrs | undefined;
}

/**
 * Hands received messages to a handler one at a time, in arrival order, as the in-process bus
 * does: each is counted as under way (`begin`/`end`) from its arrival, decoded (a message that
 * does not decode is reported on `pge.errors.rejected.<reporter>`), and a handler's failure is reported.
 * Once `isActive` says no, what is still queued is dropped, as NATS drops it.
 */
export class SerialDelivery<M extends Received> {
  /** One handler call at a time, the others queued in arrival order. */
  private readonly serial = pLimit(1);

  constructor(
    private readonly handler: BusHandler,
    private readonly host: NatsHost,
    private readonly isActive: () => boolean,
    /** The subject a handler may respond on, or null. */
    private readonly replyOf: (msg: M) => string | null,
  ) {}

  /** Queues a message that has just arrived. */
  push(msg: M): void {
    this.host.begin();
    // Not floating: deliver catches every failure of a handler and reports it.
    void this.serial(async () => {
      try {
        if (this.isActive()) await this.deliver(msg);
      } finally {
        this.host.end();
      }
    });
  }

  private async deliver(msg: M): Promise<void> {
    const decoded = decodeReceived(this.host, msg);
    if (decoded === null) return;
    try {
      await this.handler(
        new Delivery(this.host.bus, msg.subject, decoded.data, this.replyOf(msg), () =>
          fromNatsHeaders(msg.headers),
        ),
      );
    } catch (error) {
      this.host.report(error, msg.subject);
    }
  }
}

/**
 * What a reading of what a stream stores needs, whichever way it reads: the delivery to its
 * handler (stored messages were published for the stream's PubAck: there is nothing to respond
 * to), and the report of failures to read, once per outage that lasts.
 */
export function storedReading<M extends Received>(
  handler: BusHandler,
  host: NatsHost,
  subject: string,
  isActive: () => boolean,
): { delivery: SerialDelivery<M>; outage: OutageReport } {
  return {
    delivery: new SerialDelivery<M>(handler, host, isActive, () => null),
    outage: new OutageReport((error) => host.report(busError(error, `cannot read ${subject}`), subject)),
  };
}

/** A core NATS subscription (plain or in a queue group): at most once, like NATS itself. */
export class CoreSubscription implements NatsSubscription {
  private active = true;
  private readonly delivery: SerialDelivery<Msg>;
  private readonly sub: Subscription;

  constructor(
    nc: NatsConnection,
    readonly subject: string,
    readonly queue: string | null,
    handler: BusHandler,
    private readonly host: NatsHost,
  ) {
    // A message JetStream stores was published with a reply subject for its PubAck, not for an
    // answer from its readers: it has nothing to respond to.
    const replyOf = (msg: Msg) => (streamOf(msg.subject) === null ? (msg.reply ?? null) : null);
    this.delivery = new SerialDelivery(handler, host, () => this.active, replyOf);
    this.sub = nc.subscribe(subject, {
      ...(queue === null ? {} : { queue }),
      callback: (error, msg) => this.receive(error, msg),
    });
  }

  unsubscribe(): void {
    if (!this.active) return;
    this.stop();
    this.host.detach(this);
  }

  stop(): void {
    this.active = false;
    if (!this.sub.isClosed()) this.sub.unsubscribe();
  }

  caughtUp(): Promise<void> {
    return Promise.resolve();
  }

  private receive(error: Error | null, msg: Msg): void {
    if (error) {
      this.host.report(error, this.subject);
      return;
    }
    if (!this.active) return;
    // JetStream delivers a stored message with the subject it was stored on, wherever its
    // consumer was told to deliver: only what was published on this subscription's subject is it.
    if (!subjectMatches(this.subject, msg.subject)) {
      this.host.rejectReceived(msg.subject, offSubject(msg.subject, this.subject));
      return;
    }
    this.delivery.push(msg);
  }
}

function offSubject(subject: string, subscribed: string): BusError {
  return new BusError(`a message on ${subject} arrived on the subscription to ${subscribed}: not taken`);
}

/**
 * Resolves once JetStream has nothing left to hand the consumer `current()` returns (null: the
 * subscription stopped), and the messages it already sent are taken in: each is counted as under
 * way within the microtasks that follow its arrival, so one macrotask later the bus's idle count
 * covers it. A failure to ask is reported, and ends the wait. Polled (every `CAUGHT_UP_POLL_MS`):
 * nats-server 2.9 tells what a consumer has left to deliver only when asked (consumer info's
 * `num_pending`), and consume's heartbeats do not say it. A reader that holds what it was sent
 * until it takes it (consume's buffer) says with `taken` whether it took every message the
 * consumer's info counts as delivered.
 */
export async function drained(
  current: () => Consumer | null,
  host: NatsHost,
  subject: string,
  taken: (info: ConsumerInfo) => boolean = () => true,
): Promise<void> {
  for (let consumer = current(); consumer !== null; consumer = current()) {
    let info: ConsumerInfo;
    try {
      info = await consumer.info();
    } catch (error) {
      host.report(busError(error, `cannot ask how far ${subject} was read`), subject);
      return;
    }
    if (info.num_pending === 0 && taken(info)) break;
    await sleep(CAUGHT_UP_POLL_MS);
  }
  await new Promise<void>((resolve) => setImmediate(resolve));
}

/**
 * Acks, naks and heartbeats are fire-and-forget publishes; on a connection that closed meanwhile
 * they throw, and the server redelivers after `ack_wait` anyway.
 */
export function settle(action: () => void): void {
  try {
    action();
  } catch {
    // see above: the server's redelivery covers a lost acknowledgement
  }
}
