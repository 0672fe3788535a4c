import { type Bus, type BusHandler, type BusSubscription, Delivery, type MessageHeaders } from './bus.js';

/**
 * The subscriptions of the in-process bus: each with its own FIFO backlog, handing over one
 * message at a time (as a `Delivery`, the message object both buses give their handlers).
 */

/** Shrink a backlog once this many delivered slots sit at its front. */
const COMPACT_AFTER = 1024;

/** One published message, shared by all of its deliveries: validated and frozen on publish. */
export interface Envelope {
  readonly subject: string;
  readonly data: unknown;
  readonly reply: string | null;
  readonly headers: MessageHeaders;
}

/** What a subscription needs from its bus, so that the bus keeps no public internals. */
export interface Host {
  readonly bus: Bus;
  settle(): void;
  report(error: unknown, subject: string): void;
  detach(subscription: Subscription): void;
}

/**
 * A subscription with its own FIFO backlog. At most one of its handler calls is in flight: the
 * next message is handed over only after the previous call settled, which is what lets a per-run
 * consumer (the log writer) be a plain handler.
 */
export class Subscription implements BusSubscription {
  readonly subject: string;
  readonly queue: string | null;
  active = true;
  running = false;
  private readonly handler: BusHandler;
  private readonly host: Host;
  private backlog: (Envelope | undefined)[] = [];
  private head = 0;
  private current = '';
  // Bound once per subscription so that scheduling and resuming allocate nothing per message.
  private readonly drain = (): void => this.pump();
  private readonly resume = (): void => {
    this.host.settle();
    this.pump();
  };
  private readonly fail = (error: unknown): void => {
    this.host.report(error, this.current);
    this.resume();
  };

  constructor(subject: string, queue: string | null, handler: BusHandler, host: Host) {
    this.subject = subject;
    this.queue = queue;
    this.handler = handler;
    this.host = host;
  }

  unsubscribe(): void {
    if (!this.active) return;
    this.active = false;
    this.host.detach(this);
  }

  enqueue(envelope: Envelope): void {
    this.backlog.push(envelope);
    if (this.running) return;
    this.running = true;
    // Never deliver inside publish's call stack: a handler must not run before its publisher resumes.
    queueMicrotask(this.drain);
  }

  private pump(): void {
    const host = this.host;
    while (this.head < this.backlog.length) {
      if (this.head >= COMPACT_AFTER && this.head * 2 >= this.backlog.length) {
        this.backlog = this.backlog.slice(this.head);
        this.head = 0;
      }
      const envelope = this.backlog[this.head]!;
      this.backlog[this.head++] = undefined;
      // Unsubscribed: messages not yet handed over are dropped, as NATS drops them.
      if (!this.active) {
        host.settle();
        continue;
      }
      let result: unknown;
      try {
        // The envelope holds the copy sealed for this very subject on publish: parsed, then frozen,
        // so it is still valid on receive and is handed over as it is, shared by every handler.
        result = this.handler(
          new Delivery(host.bus, envelope.subject, envelope.data, envelope.reply, envelope.headers),
        );
      } catch (error) {
        host.report(error, envelope.subject);
        host.settle();
        continue;
      }
      if (isThenable(result)) {
        this.current = envelope.subject;
        // Not floating: both callbacks catch everything, so the chained promise never rejects.
        result.then(this.resume, this.fail);
        return;
      }
      host.settle();
    }
    this.backlog.length = 0;
    this.head = 0;
    this.running = false;
  }
}

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return (
    typeof value === 'object' && value !== null && typeof (value as PromiseLike<unknown>).then === 'function'
  );
}
