import { setTimeout as sleep } from 'node:timers/promises';
import type {
  Consumer,
  ConsumerMessages,
  JetStreamClient,
  JetStreamManager,
  JsMsg,
} from '@nats-io/jetstream';
import type { BusHandler } from './bus.js';
import type { OutageReport } from './nats-helpers.js';
import {
  drained,
  type NatsHost,
  type NatsSubscription,
  PULL_EXPIRES_MS,
  type SerialDelivery,
  storedReading,
} from './nats-subscriptions.js';

/**
 * Reading what a stream stores on a subject, in stream order, through nats.js's ordered consumer
 * (`consume()`): ephemeral, unacknowledged, leaving nothing behind on the server. nats.js recreates
 * the consumer from the last message it delivered when it misses one. What is added here is a
 * client limit's: after a reconnect (the consumer, kept in the server's memory, is gone if the
 * server restarted), after heartbeats missed (on a cluster, the consumer lost with its server while
 * the client stays on another) or when nats.js gives up, a new one is started from the stream
 * sequence after the last message received at once, where nats.js's own checks back off by the
 * pull's expiry, and for up to 30 s while JetStream elects. Its pulls expire after
 * `PULL_EXPIRES_MS` (with nats.js's 30 s, a run waited as long for its results). So a reader misses
 * nothing and sees nothing twice across outages.
 */

/** Where an ordered reading starts. */
export interface OrderedStart {
  /** A stream sequence (1: everything stored), or `'new'`: only what the stream stores from now on. */
  readonly from: number | 'new';
  /** Which subjects' messages are handed on (`OrderedOptions.accept`); default all. */
  readonly accept?: ((subject: string) => boolean) | undefined;
}

/** Pause before a new consumer is tried after one could not be created or stopped. */
const RETRY_MS = 1_000;
const CAUGHT_UP_POLL_MS = 10;

/** A subscription of the NATS bus that reads a stream subject through an ordered consumer. */
export class OrderedSubscription implements NatsSubscription {
  readonly queue = null;
  private active = true;
  private consumer: Consumer | null = null;
  private messages: ConsumerMessages | null = null;
  /** The stream sequence the next consumer starts at; null until `'new'` is resolved. */
  private next: number | null;
  private readonly delivery: SerialDelivery<JsMsg>;
  private readonly outage: OutageReport;
  /** Set when a reconnect closed the consumer: a new one is made at once, and nothing is reported. */
  private renewing = false;
  private readonly unlisten: () => void;
  private readonly accept: ((subject: string) => boolean) | undefined;

  constructor(
    private readonly js: JetStreamClient,
    private readonly jsm: JetStreamManager,
    private readonly stream: string,
    readonly subject: string,
    handler: BusHandler,
    private readonly host: NatsHost,
    start: OrderedStart,
  ) {
    ({ delivery: this.delivery, outage: this.outage } = storedReading(
      handler,
      host,
      subject,
      () => this.active,
    ));
    this.next = start.from === 'new' ? null : Math.max(1, Math.floor(start.from));
    this.accept = start.accept;
    this.unlisten = host.onReconnect(() => this.renew());
    // Not floating: run catches and reports every failure, and ends when the subscription stops.
    void this.run();
  }

  unsubscribe(): void {
    if (!this.active) return;
    this.stop();
    this.host.detach(this);
  }

  stop(): void {
    this.active = false;
    this.unlisten();
    // The consumer would otherwise stay on the server until its inactivity threshold.
    this.consumer?.delete().catch(() => undefined);
    this.messages?.close().catch(() => undefined);
  }

  async caughtUp(): Promise<void> {
    // Until a first consumer exists, nothing of the stream can have been read.
    while (this.active && this.consumer === null) await sleep(CAUGHT_UP_POLL_MS);
    await drained(() => (this.active ? this.consumer : null), this.host, this.subject);
  }

  private async run(): Promise<void> {
    while (this.active) {
      try {
        this.next ??= (await this.jsm.streams.info(this.stream)).state.last_seq + 1;
        const consumer = await this.js.consumers.get(this.stream, {
          filter_subjects: this.subject,
          opt_start_seq: this.next,
        });
        this.consumer = consumer;
        if (!this.active) {
          await consumer.delete().catch(() => undefined);
          break;
        }
        const messages = await consumer.consume({
          callback: (msg) => this.receive(msg),
          expires: PULL_EXPIRES_MS,
        });
        this.messages = messages;
        this.outage.ended();
        void this.watch(messages);
        const stopped = await messages.closed();
        this.messages = null;
        if (!this.active) break;
        consumer.delete().catch(() => undefined);
        if (this.renewing) {
          this.renewing = false;
          continue;
        }
        // nats.js gave up recreating its consumer: start another from where this one got to.
        throw stopped ?? new Error('the ordered consumer stopped');
      } catch (error) {
        if (!this.active) break;
        this.outage.failed(error);
        await sleep(RETRY_MS);
      }
    }
  }

  /**
   * Heartbeats missed: the consumer is gone (on a cluster, with its server, while this client stays
   * connected to another). A new one is made from `next` at once, as after a reconnect, rather than
   * when nats.js's own attempts, backing off while JetStream elects its leaders, succeed.
   */
  private async watch(messages: ConsumerMessages): Promise<void> {
    try {
      for await (const status of messages.status()) {
        if (status.type === 'heartbeats_missed' && this.messages === messages) this.renew();
      }
    } catch {
      // The consumer ended: `run` sees it close and says why.
    }
  }

  /** After a reconnect: closes the consumer, so that `run` makes a new one from `next`. */
  private renew(): void {
    if (!this.active || this.messages === null) return;
    this.renewing = true;
    this.messages.close().catch(() => undefined);
  }

  private receive(msg: JsMsg): void {
    if (!this.active) return;
    this.next = msg.seq + 1;
    if (this.accept === undefined || this.accept(msg.subject)) this.delivery.push(msg);
  }
}
