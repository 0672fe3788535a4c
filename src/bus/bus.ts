import { BusError } from '../errors.js';

/**
 * The bus: NATS semantics behind one interface, implemented in process (`InProcessBus`) and on
 * NATS. Subjects are dot-separated tokens with `*` and `>` wildcards; a subscription with a
 * `queue` shares its messages with the other members of that queue group (each message to one
 * member); `request` publishes with a reply subject and resolves with the first reply. Every
 * message is validated against its subject's schema (`src/bus/codec.ts`) when published, and
 * what a handler receives is valid for its subject: an invalid publish rejects with
 * `MessageRejectedError`; over NATS a received message that fails is not handed to the handler but
 * reported on `pge.errors.rejected.<reporter>` (in process, handlers get the frozen copy checked on publish).
 */

/**
 * Headers of a message, beside its data (NATS message headers): what the transport carries about a
 * message rather than in it, such as the W3C `traceparent` of the span that sent it. Never
 * validated against a schema: whoever reads one checks it.
 */
export type MessageHeaders = Readonly<Record<string, string>>;

/**
 * The header a work item carries its W3C trace context in, when its run is traced: the span the
 * worker's handling of it goes under.
 */
export const TRACEPARENT_HEADER = 'traceparent';

/** A message with no headers. */
export const NO_HEADERS: MessageHeaders = Object.freeze({});

/**
 * `headers` as NATS carries them (values trimmed), checked as NATS checks them and copied, so that
 * the sender cannot change them once sent: throws `TypeError` for a name that is not a token of
 * visible ASCII without `:`, or a value that spans lines.
 */
export function sealHeaders(headers: MessageHeaders | undefined): MessageHeaders {
  if (headers === undefined) return NO_HEADERS;
  const entries = Object.entries(headers);
  if (entries.length === 0) return NO_HEADERS;
  for (const [name, value] of entries) {
    if (!HEADER_NAME.test(name)) throw new TypeError(`"${name}" is not a valid header name`);
    if (typeof value !== 'string' || /[\r\n]/.test(value))
      throw new TypeError(`the value of header ${name} must be a string of one line`);
  }
  return Object.freeze(Object.fromEntries(entries.map(([name, value]) => [name, value.trim()])));
}

const HEADER_NAME = /^[!-9;-~]+$/;

/** Options of `publish`. */
export interface PublishOptions {
  /** Headers sent with the message (NATS headers; names are case-sensitive tokens, values one line). */
  headers?: MessageHeaders;
  /**
   * Once aborted, the message is not sent, nor sent again on a bus that retries (a copy already
   * sent may still be stored), and the publish rejects with the signal's reason.
   */
  signal?: AbortSignal;
  /**
   * The id a stored message is de-duplicated by, in place of the one its kind has (NATS
   * `Nats-Msg-Id`, `messageIdOf`): a work item sent again as a new one, not a copy of the first.
   */
  messageId?: string;
}

/** A message as a handler receives it: already decoded and validated. */
export interface BusMessage {
  readonly subject: string;
  readonly data: unknown;
  /** The headers it was published with (`PublishOptions.headers`, and any the transport adds). */
  readonly headers: MessageHeaders;
  /** Present when the sender awaits a reply (`request`). */
  readonly reply: string | null;
  /** Whether `respond` can answer: the sender gave an inbox to reply on. */
  readonly answerable: boolean;
  /** Replies to a request; rejects when the message has no reply subject. */
  respond(data: unknown): Promise<void>;
}

/** Handles one message. A thrown error or rejected promise is reported, never swallowed silently. */
export type BusHandler = (message: BusMessage) => void | Promise<void>;

/** A live subscription. */
export interface BusSubscription {
  readonly subject: string;
  readonly queue: string | null;
  /** Stops delivery; messages already handed to the handler finish. */
  unsubscribe(): void;
}

/** Options of `subscribe`. */
export interface SubscribeOptions {
  /** Queue group: each message goes to one member of the group. */
  queue?: string;
  /**
   * Messages of a queue group member handed to its handler at once (default 1): a worker that
   * serves several requests at a time. On NATS's work queues one pull asks for as many messages as
   * the member has free; elsewhere it is that many members, each taking one message at a time.
   */
  concurrency?: number;
}

/**
 * The queue group and concurrency of `subscribe`'s options, checked: throws `TypeError` for a
 * queue name that is empty or holds white space, and for a concurrency that is not a whole number
 * >= 1 or is above 1 without a queue (a plain subscriber takes its messages in order).
 */
export function subscribeOptions(options: SubscribeOptions): { queue: string | null; concurrency: number } {
  const queue = options.queue ?? null;
  if (queue !== null && (queue === '' || /\s/.test(queue))) {
    throw new TypeError(`"${queue}" is not a valid queue group name`);
  }
  const concurrency = options.concurrency ?? 1;
  if (!Number.isSafeInteger(concurrency) || concurrency < 1)
    throw new TypeError(`concurrency must be a whole number >= 1, not ${concurrency}`);
  if (concurrency > 1 && queue === null)
    throw new TypeError(
      'concurrency above 1 needs a queue group: a plain subscriber takes messages in order',
    );
  return { queue, concurrency };
}

/**
 * `count` subscriptions made by `make`, as one member of a queue group: unsubscribing it
 * unsubscribes them all. If one cannot be made, those already made are unsubscribed.
 */
export function memberGroup(count: number, make: () => BusSubscription): BusSubscription {
  const members: BusSubscription[] = [];
  try {
    while (members.length < count) members.push(make());
  } catch (error) {
    for (const member of members) member.unsubscribe();
    throw error;
  }
  const [first] = members;
  if (first === undefined) throw new TypeError('a group of no subscriptions');
  return {
    subject: first.subject,
    queue: first.queue,
    unsubscribe: () => {
      for (const member of members) member.unsubscribe();
    },
  };
}

/** Options of `request`. */
export interface RequestOptions {
  /** Milliseconds to wait for a reply before rejecting with `BusError` (default 10 000). */
  timeoutMs?: number;
}

/** Options of a durable subscription (NATS: `NatsBus.subscribeDurable`). */
export interface DurableOptions {
  /**
   * Milliseconds before the server gives an unacknowledged message to another reader (default: the
   * bus's `ackWaitMs`). A running handler keeps its message with heartbeats, so this bounds only
   * how long a reader that died holds the message it had.
   */
  ackWaitMs?: number;
  /**
   * Messages taken in one pull and held unacknowledged at once (default 1). One keeps stream order
   * even across redeliveries; more saves a pull per message, but a message given back (its handler
   * threw) comes again after later ones (but see `ackAll`).
   */
  batch?: number;
  /**
   * Acknowledge cumulatively (the consumer's `AckPolicy.All`): one ack covers every message
   * before it, so a reader acks once per half batch rather than per message. The reader then calls
   * its handler in stream order, up to half a batch of calls running side by side (a handler that
   * writes writes them together), and no ack covers a message whose handler has not resolved: a
   * message whose handler throws is tried again (after `nakDelayMs`, up to `maxDeliver` tries)
   * while the later ones go on, their acks held behind it; and a message the consumer counts as
   * delivered that this reader never received (a reader before it died with it; a connection was
   * lost) is read from the stream and handled before any later one.
   */
  ackAll?: boolean;
}

/** A transport that keeps what was published on some subjects (NATS JetStream), and reads it back. */
export interface StoredMessages {
  /**
   * Every message kept on `subject` (a subject or pattern), oldest first, each validated; with
   * `consumer`, read as `subscribeOrdered` reads with it (the coordinator's alone); with `first`,
   * only the oldest `first` of them.
   */
  stored(subject: string, options?: StoredReadOptions): Promise<unknown[]>;
  /**
   * The last message kept on `subject` (a subject or pattern), validated, in one lookup whatever
   * the count; null when none is kept, or when the last one fails validation (it is reported).
   */
  lastStored(subject: string): Promise<unknown | null>;
}

/** Options of `StoredMessages.stored`. */
export interface StoredReadOptions extends Pick<OrderedOptions, 'consumer'> {
  /**
   * Read no more than the oldest `first` messages (a whole number from 1): a reader that wants a
   * run's opening event pays for one lookup, not for the whole run.
   */
  first?: number;
}

/** Options of `subscribeOrdered`. */
export interface OrderedOptions {
  /**
   * Where to start: a stream sequence (default 1, everything the stream holds on the subject), or
   * `'new'`, only what is stored from the moment of subscribing.
   */
  from?: number | 'new';
  /**
   * NATS: read through an ordered consumer of this process's own, which the server pushes
   * messages through (about one message per message read), rather than by lookups (two, and a
   * round trip each). Making consumers is the coordinator's alone (docs/security.md): a process of
   * any other role reads by lookups, the default.
   */
  consumer?: boolean;
  /**
   * With `consumer`: the subjects whose messages the reader wants; the others are passed over
   * before they are decoded. A coordinator reads every run's results through one consumer and
   * wants only its own runs': with more coordinators, each would otherwise decode every result.
   */
  accept?: (subject: string) => boolean;
}

/** The transport every pge process uses to talk to the others. */
export interface Bus {
  /**
   * Who reports the messages this bus's process refuses, on `pge.errors.rejected.<reporter>`: its
   * role on a deployment (each credential may report on its own role's subject only).
   */
  readonly reporter: string;
  /** Validates and publishes; resolves once the message is accepted by the transport. */
  publish(subject: string, data: unknown, options?: PublishOptions): Promise<void>;
  subscribe(subject: string, handler: BusHandler, options?: SubscribeOptions): BusSubscription;
  /** Publishes with a reply subject and resolves with the (validated) reply. */
  request(subject: string, data: unknown, options?: RequestOptions): Promise<unknown>;
  /**
   * Reads what a stream stores on `subject` (events, results), in the order it was stored, from
   * `options.from`, then what is stored next, one message at a time. Nothing is lost or repeated
   * across reconnects and server restarts. Only a bus that stores messages has it (NATS JetStream);
   * on one that does not, a plain `subscribe` made before the first publish sees the same.
   */
  subscribeOrdered?(subject: string, handler: BusHandler, options?: OrderedOptions): BusSubscription;
  /** Resolves when everything published so far has reached its handlers (and they returned). */
  flush(): Promise<void>;
  /** Flushes, removes every subscription and refuses further publishes. */
  close(): Promise<void>;
}

/** A received message as both buses hand it to a handler; `respond` publishes on its reply subject. */
export class Delivery implements BusMessage {
  #headers: MessageHeaders | (() => MessageHeaders);

  /**
   * `headers` may be given as a function, called the first time a handler reads them: a JetStream
   * message's headers are then decoded only for a handler that uses them (persistence does not).
   */
  constructor(
    private readonly bus: Bus,
    readonly subject: string,
    readonly data: unknown,
    readonly reply: string | null,
    headers: MessageHeaders | (() => MessageHeaders) = NO_HEADERS,
  ) {
    this.#headers = headers;
  }

  get headers(): MessageHeaders {
    if (typeof this.#headers === 'function') this.#headers = this.#headers();
    return this.#headers;
  }

  /**
   * Publishes `data` on the reply subject. Only an inbox (`_INBOX…`, `_R_…`) is answered: the sender
   * chooses the reply subject, and an answer on any other (a stream's subject, the run-lease
   * bucket's) would be the responder publishing where the sender may not.
   */
  get answerable(): boolean {
    return this.reply !== null && INBOX_REPLY.test(this.reply);
  }

  respond(data: unknown): Promise<void> {
    if (this.reply === null) {
      return Promise.reject(
        new BusError(`the message on ${this.subject} has no reply subject to respond to`),
      );
    }
    if (!INBOX_REPLY.test(this.reply)) {
      return Promise.reject(
        new BusError(
          `the message on ${this.subject} asks for its reply on ${this.reply}, which is not an inbox`,
        ),
      );
    }
    return this.bus.publish(this.reply, data);
  }
}

/**
 * A reply subject that is an inbox: `_INBOX.…`, a private one, `_INBOX_<name>.…`, or the one the
 * server gives a request that reached this account from another (`_R_.…`), which it maps back to
 * the requester's inbox.
 */
const INBOX_REPLY = /^(_INBOX[\w-]*|_R_)\./;

/** Counts the deliveries a bus has under way, for `flush()`: `idle()` settles when none is. */
export class InFlight {
  private count = 0;
  private waiters: (() => void)[] = [];

  begin(): void {
    this.count++;
  }

  end(): void {
    if (--this.count > 0 || this.waiters.length === 0) return;
    const waiters = this.waiters;
    this.waiters = [];
    for (const resolve of waiters) resolve();
  }

  /** Resolves once nothing is under way (at once if nothing is). */
  idle(): Promise<void> {
    if (this.count === 0) return IDLE;
    return new Promise((resolve) => this.waiters.push(resolve));
  }
}

const IDLE: Promise<void> = Promise.resolve();

/**
 * The default `onHandlerError` of both buses: a failing handler is reported, never swallowed. A
 * `BusError` (pge's own failures, which say what failed in their message: the bus's reports of
 * pulls that keep failing or of a move to another server, a handler's publish that failed) is
 * printed as its message; any other failure whole, stack included.
 */
export function reportToConsole(error: unknown, subject: string): void {
  if (error instanceof BusError) console.error(`pge bus: ${subject}: ${error.message}`);
  else console.error(`pge bus: handler for ${subject} failed:`, error);
}

/**
 * Hands a handler failure to `onHandlerError`; a reporter that throws falls back to the console, so
 * that it cannot stall the subscription that was delivering.
 */
export function reportSafely(
  onHandlerError: (error: unknown, subject: string) => void,
  error: unknown,
  subject: string,
): void {
  try {
    onHandlerError(error, subject);
  } catch (failure) {
    reportToConsole(failure, subject);
  }
}
