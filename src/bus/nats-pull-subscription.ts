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
import { type MsgHdrs, nanos } from '@nats-io/transport-node';
import { type BusHandler, Delivery, type MessageHeaders } from './bus.js';
import { HandlersUnderWay } from './handlers-under-way.js';
import { CumulativeAcks } from './nats-cumulative-acks.js';
import { busError, fromNatsHeaders } from './nats-helpers.js';
import { PullHealth } from './nats-pull-health.js';
import { ensurePullConsumer, type PullConsumerSettings, storedAfter } from './nats-streams.js';
import {
  decodeReceived,
  drained,
  type NatsHost,
  type NatsSubscription,
  PULL_EXPIRES_MS,
  type PullSettings,
  settle,
} from './nats-subscriptions.js';

/** Pause after a failed pull (server restarting, consumer being recreated) before trying again. */
const PULL_RETRY_MS = 1_000;

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
 *
 * A reader of its own reads through nats.js's `consume()`, each message handled before it takes
 * the next, so that consume's refills follow its pace. A member of a queue keeps one `fetch` open
 * at a time, for as many items as it has free handlers (of its `concurrency`), and none while all
 * are busy: one waiting pull per worker, however many handlers (the server refuses pulls past a
 * consumer's `max_waiting`, 512 by default). Not a `consume()`: consume counts a message as taken
 * when it arrives, not when its handler ends, so it would pull work items a busy worker cannot
 * start (the next item is for a worker with room), and its heartbeat watch takes a worker whose
 * handlers are all busy, with no pull open, for one whose server serves it nothing.
 */
export class PullSubscription implements NatsSubscription {
  private active = true;
  private consumer: Consumer | null = null;
  /** The pulls open at the server: ended on stop, so that none captures a message nobody handles. */
  private readonly open = new Set<ConsumerMessages>();
  private readonly ready: Promise<void>;
  /**
   * A reader on an `AckPolicy.All` consumer: its acks, the stream sequence up to which every
   * message of its filter was handed to the handler, and those whose handlers run, in stream order.
   * Null on an explicit consumer, and for a queue.
   */
  private inOrder: InOrder | null = null;
  private readonly stream: string;
  /** The consumer's own ack wait (a coordinator's, when this process may not set it). */
  private ackWaitMs: number;
  private readonly health: PullHealth;
  /** A reader of its own is in its handler: it asks the server for nothing meanwhile. */
  private busy = false;

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
    this.stream = settings.stream;
    this.ackWaitMs = timings.ackWaitMs;
    this.health = new PullHealth(host, `${subject} as ${settings.durable}`, subject);
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
          turns: [],
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
    for (const pull of this.open) pull.close().catch(() => undefined);
  }

  async caughtUp(): Promise<void> {
    await this.ready;
    // A reader of its own takes what consume buffered one message at a time: caught up once it
    // handled (or gave up) every message the server delivered, not once the server sent them; or
    // once none is unacknowledged (a reader beside it, against the docs, took the last ones).
    await drained(
      () => (this.active ? this.consumer : null),
      this.host,
      this.subject,
      (info) =>
        this.inOrder === null ||
        this.inOrder.through >= info.delivered.stream_seq ||
        info.num_ack_pending === 0,
    );
  }

  private async run(): Promise<void> {
    await this.ready;
    const consumer = this.consumer;
    if (consumer === null) return;
    if (this.queue === null) return this.readAlone(consumer);
    return this.serveQueue(consumer);
  }

  /** A reader of its own: one `consume()`, made again only when nats.js gives it up. */
  private async readAlone(consumer: Consumer): Promise<void> {
    const handling = new HandlersUnderWay();
    while (this.active) {
      const pulledAt = Date.now();
      let messages: ConsumerMessages | null = null;
      try {
        messages = await consumer.consume({ max_messages: this.timings.batch, expires: PULL_EXPIRES_MS });
        this.open.add(messages);
        if (!this.active) break;
        this.watch(consumer, messages).catch(() => undefined); // ends with `messages`
        for await (const msg of messages) {
          this.health.served();
          this.busy = true;
          try {
            await this.takeInTurn(msg, handling);
          } finally {
            this.busy = false;
            this.health.askedAgain();
          }
        }
        if (this.active) throw new Error('the consumer stopped delivering');
      } catch (error) {
        if (!this.active) break;
        await this.pullFailed(consumer, error, pulledAt);
      } finally {
        if (messages !== null) {
          this.open.delete(messages);
          messages.close().catch(() => undefined);
        }
      }
    }
  }

  /**
   * Takes the next message of a reader of its own. On an explicit consumer, once handled. On an
   * `AckPolicy.All` consumer, once its handler was called (what came before it in the stream
   * first): up to half a batch of handlers run side by side, each message's ack waiting for every
   * one before it (`settleTurns`), so a handler that writes (persistence) writes many at once; the
   * other half arrives meanwhile. With every one of them busy it takes nothing more, and consume
   * asks for nothing more (its refills run as its messages are taken).
   */
  private async takeInTurn(msg: JsMsg, handling: HandlersUnderWay): Promise<void> {
    if (this.inOrder === null) return this.take(msg);
    // Its handler is usually called before `take` returns (no gap to read first): then the next
    // message is taken at once, with no promise made to wait for the call.
    const turn: { called: boolean; wake: (() => void) | null } = { called: false, wake: null };
    const handled = this.take(msg, () => {
      turn.called = true;
      turn.wake?.();
    }).catch((error: unknown) => this.host.report(error, msg.subject));
    handling.add(handled);
    if (!turn.called) {
      await new Promise<void>((resolve) => {
        turn.wake = resolve;
        void handled.then(resolve);
      });
    }
    const most = Math.max(1, Math.floor(this.timings.batch / 2));
    if (handling.size >= most) await handling.room(most);
  }

  /**
   * What consume says of its pulls: a heartbeat, that the server serves them; heartbeats missed or
   * no responders, that nothing does (unless the reader was in its handler, asking nothing); a
   * consumer gone counts as a failing pull, and its configuration is read again (a coordinator may
   * have replaced it with one of another ack policy).
   */
  private async watch(consumer: Consumer, messages: ConsumerMessages): Promise<void> {
    for await (const status of messages.status()) {
      if (status.type === 'heartbeat') this.health.served();
      else if (status.type === 'heartbeats_missed' || status.type === 'no_responders') {
        if (!this.busy) this.health.unanswered(status.type.replaceAll('_', ' '));
      } else if (status.type === 'consumer_deleted' || status.type === 'consumer_not_found') {
        this.health.failed(new Error(status.type.replaceAll('_', ' ')), Date.now());
        await this.readConfiguration(consumer);
      }
    }
  }

  /**
   * A queue member: one pull at a time, for as many work items as it has free handlers, each item
   * handed to a handler as it arrives. With every handler busy it asks for nothing until one ends.
   */
  private async serveQueue(consumer: Consumer): Promise<void> {
    const handling = new Set<Promise<void>>();
    while (this.active) {
      const free = this.timings.concurrency - handling.size;
      if (free === 0) {
        await Promise.race(handling);
        continue;
      }
      const pulledAt = Date.now();
      try {
        const took = await this.pull(consumer, free, (msg) => {
          const handled = this.take(msg)
            .catch((error: unknown) => this.host.report(error, msg.subject))
            .finally(() => handling.delete(handled));
          handling.add(handled);
        });
        if (took === 0) this.health.expired();
      } catch (error) {
        if (!this.active) break;
        await this.pullFailed(consumer, error, pulledAt);
      }
    }
  }

  /**
   * A `fetch` of up to `wanted` messages, kept in `open` for `stop` to end: each is handed to
   * `hand` as it arrives. Resolves with how many came once the server filled it or it expired.
   */
  private async pull(consumer: Consumer, wanted: number, hand: (msg: JsMsg) => void): Promise<number> {
    const pull = await consumer.fetch({ max_messages: wanted, expires: PULL_EXPIRES_MS });
    this.open.add(pull);
    let took = 0;
    try {
      if (!this.active) await pull.close();
      for await (const msg of pull) {
        took++;
        this.health.served();
        hand(msg);
      }
      return took;
    } finally {
      this.open.delete(pull);
    }
  }

  /**
   * A pull (or a consume) that began at `pulledAt` failed: a reconnect or a server restart cut it,
   * or the consumer is gone. It is told (`PullHealth`) and made again after a pause.
   */
  private async pullFailed(consumer: Consumer, error: unknown, pulledAt: number): Promise<void> {
    this.health.failed(error, pulledAt);
    await this.readConfiguration(consumer);
    await sleep(PULL_RETRY_MS);
  }

  /** After a failure: the consumer may have been replaced meanwhile (a coordinator of another ack policy). */
  private async readConfiguration(consumer: Consumer): Promise<void> {
    await consumer.info().then(
      (info) => this.follow(info),
      () => undefined, // the failure that led here is what is reported
    );
  }

  /** Handles one message; `called`, on an `AckPolicy.All` consumer: told once its handler was called. */
  private async take(msg: JsMsg, called?: () => void): Promise<void> {
    // Stopped while the pull was open: give the message back at once for another worker.
    if (!this.active) return settle(() => msg.nak());
    this.host.begin();
    try {
      const decoded = decodeReceived(this.host, msg);
      // Redelivering a message that can never decode would only repeat the rejection.
      if (decoded === null) return settle(() => msg.term());
      const { data } = decoded;
      const headers = headersOf(msg);
      const heartbeat = setInterval(() => settle(() => msg.working()), this.ackWaitMs / 3);
      try {
        await (this.inOrder === null
          ? this.handleAlone(msg, data, headers)
          : this.handleInTurn(this.inOrder, msg, data, headers, called));
      } finally {
        clearInterval(heartbeat);
      }
    } finally {
      this.host.end();
    }
  }

  /** On an explicit consumer: acknowledged once handled, given back when the handler throws. */
  private async handleAlone(msg: JsMsg, data: unknown, headers: LazyHeaders): Promise<void> {
    try {
      await this.handler(new Delivery(this.host.bus, msg.subject, data, null, headers));
      settle(() => msg.ack());
    } catch (error) {
      this.host.report(error, msg.subject);
      // Given back even after its last delivery: the server then stops at the consumer's
      // `max_deliver` and says so in its advisory, which `answerAbandonedWork` turns into a
      // failed result (a terminated message would be gone from a work queue, unanswerable).
      settle(() => msg.nak(this.timings.nakDelayMs));
    }
  }

  /**
   * On an `AckPolicy.All` consumer: in stream order, what came before it first. Its turn is queued
   * before its handler is called, so that its ack waits for every message handed on before it.
   */
  private async handleInTurn(
    inOrder: InOrder,
    msg: JsMsg,
    data: unknown,
    headers: LazyHeaders,
    called?: () => void,
  ): Promise<void> {
    const seq = msg.info.streamSequence;
    if (seq > inOrder.through + 1 && !(await this.fillGap(inOrder, seq))) return;
    inOrder.through = Math.max(inOrder.through, seq);
    // One delivered again (its ack was lost) is handled again, as at-least-once allows, and its
    // turn waits behind every one handed on before it all the same.
    const turn: Turn = { msg, handled: undefined };
    inOrder.turns.push(turn);
    const handling = this.handleInOrder(msg.subject, data, headers, msg.info.deliveryCount);
    called?.();
    turn.handled = await handling;
    settleTurns(inOrder);
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
    headers: LazyHeaders,
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
   * the ack of a later one would otherwise cover. Read by lookups, because nats-server 2.9's
   * `AckPolicy.All` acks them with the later one and no consumer hands them out again. A read that
   * fails is tried again (the message at `seq` keeps its heartbeat meanwhile); resolves false when
   * the subscription stopped first.
   */
  private async fillGap(inOrder: InOrder, seq: number): Promise<boolean> {
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
          : await this.handleInOrder(stored.subject, decoded.data, headersOf({ headers: stored.header }), 1);
      if (handled === null) return false;
      inOrder.through = stored.seq;
    }
    return this.active;
  }
}

/** A message's headers, decoded when its handler first reads them (`Delivery`). */
type LazyHeaders = () => MessageHeaders;

function headersOf(msg: { readonly headers?: MsgHdrs | undefined }): LazyHeaders {
  return () => fromNatsHeaders(msg.headers);
}

/** A message handed to the handler on an `AckPolicy.All` consumer, and how its handling ended. */
interface Turn {
  readonly msg: JsMsg;
  /** True once handled, false when given up, null when the subscription stopped first; undefined while under way. */
  handled: boolean | null | undefined;
}

/** What a reader of an `AckPolicy.All` consumer keeps of its place in the stream. */
interface InOrder {
  acks: CumulativeAcks;
  /** The stream sequence up to which every message of its filter was handed to the handler. */
  through: number;
  /** The messages whose handling has not been settled, oldest first. */
  turns: Turn[];
}

/**
 * Settles the turns whose handling ended, oldest first, up to the first still under way: an ack
 * covers every message before it, so none may go out while an earlier one is handled. A turn
 * the subscription stopped leaves it and every later one unacknowledged, for the next reader.
 */
function settleTurns(inOrder: InOrder): void {
  for (let turn = inOrder.turns[0]; turn !== undefined; turn = inOrder.turns[0]) {
    if (turn.handled === undefined || turn.handled === null) return;
    inOrder.turns.shift();
    const { msg } = turn;
    if (turn.handled) inOrder.acks.handled(msg);
    // Given up, as the server gives a message up after `max_deliver`; a later ack covers it.
    else settle(() => msg.term());
  }
}
