import { setTimeout as sleep } from 'node:timers/promises';
import {
  AckPolicy,
  type Consumer,
  type ConsumerInfo,
  type ConsumerMessages,
  type JetStreamClient,
  type JetStreamManager,
  type JsMsg,
} from '@nats-io/jetstream';
import {
  type Msg,
  type MsgHdrs,
  type NatsConnection,
  nanos,
  type Subscription,
} from '@nats-io/transport-node';
import { BusError } from '../errors.js';
import { type Bus, type BusHandler, type BusSubscription, Delivery, type MessageHeaders } from './bus.js';
import { decodeMessage } from './codec.js';
import { busError, fromNatsHeaders, isUnservedPull, OutageReport, UNSERVED_MOVE_MS } from './nats-helpers.js';
import type { PullConsumerSettings } from './nats-streams.js';
import { ensurePullConsumer, storedAfter, streamOf } from './nats-streams.js';
import { subjectMatches } from './subjects.js';

/**
 * The two kinds of subscription of the NATS bus. A core subscription hands its messages to its
 * handler one at a time, in arrival order, as the in-process bus does, from a local backlog. A pull
 * subscription reads a durable JetStream consumer: a reader of its own takes a batch per pull and
 * handles it in order; a member of a work queue asks for as many messages as it has room for, so
 * that a busy worker leaves the next work item to one with room, and handles them side by side.
 * Either acknowledges a message only once its handler returned.
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
  /** A reader of its own: messages it asks for in one pull, then handles in order. */
  readonly batch: number;
  /** A member of a queue: messages its handler takes at once; a pull asks for as many as are free. */
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
/** How long pulls may keep failing (a server restart) before it is reported, and then how often. */
const PULL_FAILING_MS = 10_000;
/** Pause after a failed pull (server restarting, consumer being recreated) before trying again. */
const PULL_RETRY_MS = 1_000;
const CAUGHT_UP_POLL_MS = 10;
/**
 * On an `AckPolicy.All` consumer, the longest a handled message waits for the ack that covers it:
 * far below any ack wait, so the server never hands a handled message to another reader.
 */
const ACK_ALL_DELAY_MS = 50;

/** The message's data, or null when it does not decode (then reported on `pge.errors.rejected.<reporter>`). */
function decodeReceived(
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
  private running = false;
  private readonly backlog: M[] = [];

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
    this.backlog.push(msg);
    if (this.running) return;
    this.running = true;
    // Not floating: pump catches every failure of a handler and reports it.
    void this.pump();
  }

  private async pump(): Promise<void> {
    for (let msg = this.backlog.shift(); msg !== undefined; msg = this.backlog.shift()) {
      if (this.isActive()) await this.deliver(msg);
      this.host.end();
    }
    this.running = false;
  }

  private async deliver(msg: M): Promise<void> {
    const decoded = decodeReceived(this.host, msg);
    if (decoded === null) return;
    try {
      await this.handler(
        new Delivery(
          this.host.bus,
          msg.subject,
          decoded.data,
          this.replyOf(msg),
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
 * A durable JetStream pull consumer: at least once. A message is kept alive (`working`) while its
 * handler runs, and terminated when it cannot be decoded. On an `AckPolicy.Explicit` consumer each
 * message is acknowledged after its handler resolved, and given back with a delay when the handler
 * throws (the server stops after the consumer's `max_deliver`). A reader of its own on an
 * `AckPolicy.All` consumer (persistence) takes its stream in order, and one ack covers every
 * message before it (`CumulativeAcks`), so no ack may pass a message not handled: a handler that
 * throws is tried again in place (`handleInOrder`), and a message the reader never received (the
 * server handed it to a reader that died, or it was lost with a connection) is read from the
 * stream and handled before any later one is acknowledged (`fillGap`).
 */
export class PullSubscription implements NatsSubscription {
  private active = true;
  private consumer: Consumer | null = null;
  private batch: ConsumerMessages | null = null;
  private readonly ready: Promise<void>;
  private readonly durable: string;
  /**
   * A reader on an `AckPolicy.All` consumer: its acks, and the stream sequence up to which every
   * message of its filter was handled (or given up). Null on an explicit consumer, and for a queue.
   */
  private inOrder: { acks: CumulativeAcks; through: number } | null = null;
  private readonly stream: string;
  /** The consumer's own ack wait (a coordinator's, when this process may not set it). */
  private ackWaitMs: number;

  constructor(
    js: JetStreamClient,
    private readonly jsm: JetStreamManager,
    settings: PullConsumerSettings,
    readonly subject: string,
    readonly queue: string | null,
    private readonly handler: BusHandler,
    private readonly host: NatsHost,
    private readonly timings: PullSettings,
  ) {
    this.durable = settings.durable;
    this.stream = settings.stream;
    this.ackWaitMs = timings.ackWaitMs;
    this.ready = this.attach(js, jsm, settings);
    // Not floating: run catches and reports everything, and ends when the subscription stops.
    void this.run();
  }

  /**
   * Makes or finds the consumer. One that does not come (no coordinator made it, and this process
   * may not) is reported and waited for again, for as long as the subscription lasts.
   */
  private async attach(
    js: JetStreamClient,
    jsm: JetStreamManager,
    settings: PullConsumerSettings,
  ): Promise<void> {
    while (this.active) {
      try {
        const info = await ensurePullConsumer(jsm, settings);
        this.ackWaitMs = (info.config.ack_wait ?? nanos(settings.ackWaitMs)) / 1e6;
        this.follow(info);
        this.consumer = await js.consumers.get(settings.stream, settings.durable);
        return;
      } catch (error) {
        this.host.report(error, this.subject);
        await sleep(PULL_RETRY_MS);
      }
    }
  }

  /**
   * Takes the consumer's own ack policy, whoever made it, and notices when it changed (a
   * coordinator replaced a consumer of an earlier pge): in order from its ack floor.
   */
  private follow(info: ConsumerInfo): void {
    const all = this.queue === null && info.config.ack_policy === AckPolicy.All;
    if (all === (this.inOrder !== null)) return;
    this.inOrder?.acks.close();
    this.inOrder = all
      ? {
          acks: new CumulativeAcks(Math.max(1, Math.floor(this.timings.batch / 2))),
          // Nothing before its ack floor, or before where it starts, is left to deliver.
          through: Math.max(info.ack_floor.stream_seq, (info.config.opt_start_seq ?? 1) - 1),
        }
      : null;
  }

  unsubscribe(): void {
    if (!this.active) return;
    this.stop();
    this.host.detach(this);
  }

  sendHeldAcks(): void {
    this.inOrder?.acks.flush();
  }

  stop(): void {
    this.active = false;
    this.inOrder?.acks.close();
    // Ends a pull that is waiting at the server, so that it cannot capture a message nobody handles.
    this.batch?.close().catch(() => undefined);
  }

  async caughtUp(): Promise<void> {
    await this.ready;
    await drained(() => (this.active ? this.consumer : null), this.host, this.subject);
  }

  private async run(): Promise<void> {
    await this.ready;
    const consumer = this.consumer;
    if (consumer === null) return;
    /** When the pulls began to fail (null while they work), and when that was last reported. */
    let failingSince: number | null = null;
    /** When the pulls began to go unserved (null while served), and when one last did. */
    let unservedSince: number | null = null;
    let unservedAt = Number.NEGATIVE_INFINITY;
    let pulledAt = Date.now();
    let reportedAt = 0;
    // A queue member handles its messages side by side, asking for as many as it has free; a
    // reader of its own handles a batch in order.
    const slots = this.queue === null ? null : new Slots(this.timings.concurrency);
    while (this.active) {
      try {
        const wanted = slots === null ? this.timings.batch : await slots.free();
        if (!this.active) break;
        pulledAt = Date.now();
        this.batch = await consumer.fetch({ max_messages: wanted, expires: PULL_EXPIRES_MS });
        if (!this.active) await this.batch.close();
        let took = 0;
        for await (const msg of this.batch) {
          took++;
          failingSince = null;
          if (slots === null) await this.take(msg);
          else
            slots.run(() => this.take(msg).catch((error: unknown) => this.host.report(error, msg.subject)));
        }
        this.inOrder?.acks.flush();
        failingSince = null;
        // nats.js ends a pull that brought nothing at its expiry whether or not the server answered
        // it: only a pull that delivered, or a spell without unserved ones, says the server serves.
        if (took > 0 || Date.now() - unservedAt >= UNSERVED_MOVE_MS) {
          unservedSince = null;
          this.host.served();
        }
      } catch (error) {
        if (!this.active) break;
        // Unserved since the pull began (a missed heartbeat takes seconds to tell); other failures
        // neither start nor end it.
        if (isUnservedPull(error)) {
          unservedSince ??= pulledAt;
          unservedAt = Date.now();
          this.host.unserved(unservedSince);
        }
        // The consumer may have been replaced meanwhile (a coordinator of another ack policy).
        await consumer.info().then(
          (info) => this.follow(info),
          () => undefined, // the pull's failure is what is reported, below
        );
        // A pull cut by a reconnect or a server restart is simply made again; pulls that keep
        // failing are reported, every PULL_FAILING_MS, so a worker is never stuck in silence.
        const now = performance.now();
        failingSince ??= now;
        if (now - failingSince >= PULL_FAILING_MS && now - reportedAt >= PULL_FAILING_MS) {
          reportedAt = now;
          const failing = `cannot pull ${this.subject} as ${this.durable} (failing for ${Math.round((now - failingSince) / 1000)} s)`;
          this.host.report(busError(error, failing), this.subject);
        }
        await sleep(PULL_RETRY_MS);
      } finally {
        this.batch = null;
      }
    }
  }

  private async take(msg: JsMsg): Promise<void> {
    // Stopped while the pull was open: give the message back at once for another worker.
    if (!this.active) return settle(() => msg.nak());
    this.host.begin();
    try {
      const decoded = decodeReceived(this.host, msg);
      // Redelivering a message that can never decode would only repeat the rejection.
      if (decoded === null) return settle(() => msg.term());
      const { data } = decoded;
      const headers = fromNatsHeaders(msg.headers);
      const heartbeat = setInterval(() => settle(() => msg.working()), this.ackWaitMs / 3);
      const inOrder = this.inOrder;
      if (inOrder !== null) {
        try {
          const seq = msg.info.streamSequence;
          if (seq > inOrder.through + 1 && !(await this.fillGap(inOrder, seq))) return;
          const handled = await this.handleInOrder(msg.subject, data, headers, msg.info.deliveryCount);
          // Stopped: left unacknowledged, for the next reader.
          if (handled === null) return;
          inOrder.through = Math.max(inOrder.through, seq);
          if (handled) inOrder.acks.handled(msg);
          // Given up, as the server gives a message up after `max_deliver`; a later ack covers it.
          else settle(() => msg.term());
        } finally {
          clearInterval(heartbeat);
        }
        return;
      }
      try {
        await this.handler(new Delivery(this.host.bus, msg.subject, data, null, headers));
        settle(() => msg.ack());
      } catch (error) {
        this.host.report(error, msg.subject);
        // Given back even after its last delivery: the server then stops at the consumer's
        // `max_deliver` and says so in its advisory, which `answerAbandonedWork` turns into a
        // failed result (a terminated message would be gone from a work queue, unanswerable).
        settle(() => msg.nak(this.timings.nakDelayMs));
      } finally {
        clearInterval(heartbeat);
      }
    } finally {
      this.host.end();
    }
  }

  /**
   * Hands a message to the handler until it resolves: a failure is reported and tried again after
   * `nakDelayMs`, up to the consumer's `maxDeliver` tries counting `tried` (as the server would
   * redeliver it). Resolves true once handled, false when given up, null when the subscription
   * stopped first. The acks of what came before go out first.
   */
  private async handleInOrder(
    subject: string,
    data: unknown,
    headers: MessageHeaders,
    tried: number,
  ): Promise<boolean | null> {
    for (let tries = tried; this.active; tries++) {
      try {
        await this.handler(new Delivery(this.host.bus, subject, data, null, headers));
        return true;
      } catch (error) {
        this.host.report(error, subject);
        this.inOrder?.acks.flush();
        if (tries >= this.timings.maxDeliver) return false;
        await sleep(this.timings.nakDelayMs);
      }
    }
    return null;
  }

  /**
   * Handles, in order, what the stream holds on this subscription's subject after `through` and
   * before `seq`: messages the server counts as delivered that this reader never received, which
   * the ack of a later one would otherwise cover. A read that fails is tried again (the message at
   * `seq` keeps its heartbeat meanwhile); resolves false when the subscription stopped first.
   */
  private async fillGap(inOrder: { through: number }, seq: number): Promise<boolean> {
    while (this.active && inOrder.through + 1 < seq) {
      let stored: Awaited<ReturnType<typeof storedAfter>>;
      try {
        stored = await storedAfter(this.jsm, this.stream, this.subject, inOrder.through + 1);
      } catch (error) {
        this.host.report(busError(error, `cannot read ${this.subject} from ${this.stream}`), this.subject);
        await sleep(PULL_RETRY_MS);
        continue;
      }
      if (stored === null || stored.seq >= seq) break;
      const decoded = decodeReceived(this.host, stored);
      const handled =
        decoded === null
          ? false
          : await this.handleInOrder(stored.subject, decoded.data, fromNatsHeaders(stored.header), 1);
      if (handled === null) return false;
      inOrder.through = stored.seq;
    }
    return this.active;
  }
}

/** The handler calls of a queue member in flight, at most `size`. */
class Slots {
  #busy = 0;
  #freed: (() => void) | null = null;

  constructor(private readonly size: number) {}

  /** Resolves, once at least one is free, with how many are. */
  async free(): Promise<number> {
    while (this.#busy >= this.size) {
      await new Promise<void>((resolve) => {
        this.#freed = resolve;
      });
    }
    return this.size - this.#busy;
  }

  run(task: () => Promise<void>): void {
    this.#busy += 1;
    void task().finally(() => {
      this.#busy -= 1;
      const freed = this.#freed;
      this.#freed = null;
      freed?.();
    });
  }
}

/**
 * The acks of a reader of an `AckPolicy.All` consumer, which handles its messages in order: one
 * ack of the last message handled covers every one before it. It goes out once `every` messages
 * are handled, when a pull ends or the subscription stops, and at most `ACK_ALL_DELAY_MS` after a
 * message was handled.
 */
class CumulativeAcks {
  #last: JsMsg | null = null;
  #count = 0;
  #timer: NodeJS.Timeout | null = null;
  #closed = false;

  constructor(private readonly every: number) {}

  handled(msg: JsMsg): void {
    // A message handled again (redelivered) acks nothing new.
    if (this.#last === null || msg.info.streamSequence > this.#last.info.streamSequence) this.#last = msg;
    this.#count += 1;
    if (this.#closed || this.#count >= this.every) this.flush();
    else this.#timer ??= setTimeout(() => this.flush(), ACK_ALL_DELAY_MS);
  }

  /** Sends what it holds; from now on each message handled is acknowledged at once. */
  close(): void {
    this.#closed = true;
    this.flush();
  }

  flush(): void {
    if (this.#timer !== null) clearTimeout(this.#timer);
    this.#timer = null;
    const last = this.#last;
    this.#last = null;
    this.#count = 0;
    if (last !== null) settle(() => last.ack());
  }
}

/**
 * Resolves once JetStream has nothing left to hand the consumer `current()` returns (null: the
 * subscription stopped), and the messages it already sent are taken in: each is counted as under
 * way within the microtasks that follow its arrival, so one macrotask later the bus's idle count
 * covers it. A failure to ask is reported, and ends the wait.
 */
export async function drained(
  current: () => Consumer | null,
  host: NatsHost,
  subject: string,
): Promise<void> {
  for (let consumer = current(); consumer !== null; consumer = current()) {
    let pending: number;
    try {
      pending = (await consumer.info()).num_pending;
    } catch (error) {
      host.report(busError(error, `cannot ask how far ${subject} was read`), subject);
      return;
    }
    if (pending === 0) break;
    await sleep(CAUGHT_UP_POLL_MS);
  }
  await new Promise<void>((resolve) => setImmediate(resolve));
}

/**
 * Acks, naks and heartbeats are fire-and-forget publishes; on a connection that closed meanwhile
 * they throw, and the server redelivers after `ack_wait` anyway.
 */
function settle(action: () => void): void {
  try {
    action();
  } catch {
    // see above: the server's redelivery covers a lost acknowledgement
  }
}
