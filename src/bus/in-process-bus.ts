import { randomUUID } from 'node:crypto';
import { LRUCache } from 'lru-cache';
import { BusError, ConfigurationError, UnansweredRequestError } from '../errors.js';
import type {
  Bus,
  BusHandler,
  BusMessage,
  BusSubscription,
  MessageHeaders,
  PublishOptions,
  RequestOptions,
  SubscribeOptions,
} from './bus.js';
import {
  InFlight,
  memberGroup,
  NO_HEADERS,
  reportSafely,
  reportToConsole,
  sealHeaders,
  subscribeOptions,
} from './bus.js';
import { sealMessage } from './codec.js';
import { type Envelope, type Host, Subscription } from './in-process-subscription.js';
import { checkSubject, subjectMatches } from './subjects.js';

/**
 * The bus of the embedded mode: NATS semantics (wildcards, queue groups, request/reply with
 * `_INBOX` replies and "no responders") inside one process. It sits on the hot path of every model
 * call, so the routes of a concrete subject are cached, deliveries are batched per subscription in
 * one microtask, and a synchronous handler costs no extra promise.
 */

/** Options of `InProcessBus`. Validation is not an option: every message is validated when it is sent. */
export interface InProcessBusOptions {
  /** Told when a handler throws or rejects; the bus goes on delivering. Default: `console.error`. */
  onHandlerError?: (error: unknown, subject: string) => void;
}

const OPTION_NAMES: ReadonlySet<string> = new Set(['onHandlerError']);
const DEFAULT_TIMEOUT_MS = 10_000;
/** Bounds the route cache: every run adds ~25 concrete subjects, and runs never end in a server. */
const ROUTE_CACHE_LIMIT = 4096;
const INBOX = '_INBOX.';

interface Group {
  readonly members: readonly Subscription[];
  readonly cursor: { next: number };
}

/** Who gets a message on one concrete subject: every plain subscriber and one member per queue group. */
interface Route {
  readonly plain: readonly Subscription[];
  readonly groups: readonly Group[];
}

const NO_ROUTE: Route = Object.freeze({ plain: [], groups: [] });

interface PendingRequest {
  resolve(data: unknown): void;
  reject(error: unknown): void;
  timer: NodeJS.Timeout;
}

/**
 * The in-process implementation of `Bus`. Messages are validated when published (`sealMessage`:
 * an invalid one rejects the publish and reaches nobody; a valid one is parsed into a deep-frozen
 * copy). What a handler receives is that copy, sealed for the subject it arrives on: still valid
 * on receive, since it cannot have changed, so it is not parsed twice. Handlers share it, and
 * none can alter what another gets. Delivery is asynchronous and FIFO per subscription; a failing
 * handler is reported through `onHandlerError` and the bus goes on.
 */
export class InProcessBus implements Bus {
  /** One process plays every role. */
  readonly reporter = 'pge';
  private readonly subscriptions = new Set<Subscription>();
  private readonly routes = new LRUCache<string, Route>({ max: ROUTE_CACHE_LIMIT });
  private readonly cursors = new Map<string, { next: number }>();
  private readonly requests = new Map<string, PendingRequest>();
  private readonly inbox = `${INBOX}${randomUUID()}.`;
  private readonly onHandlerError: (error: unknown, subject: string) => void;
  private readonly host: Host;
  private replies: Subscription | null = null;
  private nextToken = 0;
  private readonly inFlight = new InFlight();
  private closed = false;

  /** Throws `ConfigurationError` on an unknown option. */
  constructor(options: InProcessBusOptions = {}) {
    for (const key of Object.keys(options)) {
      if (!OPTION_NAMES.has(key)) throw new ConfigurationError(`unknown InProcessBus option "${key}"`);
    }
    this.onHandlerError = options.onHandlerError ?? reportToConsole;
    this.host = {
      bus: this,
      settle: () => this.inFlight.end(),
      report: (error, subject) => this.report(error, subject),
      detach: (subscription) => {
        this.subscriptions.delete(subscription);
        this.routes.clear();
      },
    };
  }

  /** Validates and queues the message for delivery; rejects with `MessageRejectedError` or `BusError`. */
  async publish(subject: string, data: unknown, options: PublishOptions = {}): Promise<void> {
    options.signal?.throwIfAborted();
    this.send(subject, data, null, false, sealHeaders(options.headers));
  }

  /** Subscribes to a subject or wildcard pattern; throws `TypeError` on a malformed pattern. */
  subscribe(subject: string, handler: BusHandler, options: SubscribeOptions = {}): BusSubscription {
    if (this.closed) throw new BusError(`cannot subscribe to ${subject}: the bus is closed`);
    checkSubject(subject, true);
    const { queue, concurrency } = subscribeOptions(options);
    const member = (): Subscription => {
      const subscription = new Subscription(subject, queue, handler, this.host);
      this.subscriptions.add(subscription);
      return subscription;
    };
    this.routes.clear();
    return concurrency === 1 ? member() : memberGroup(concurrency, member);
  }

  /**
   * Publishes with an `_INBOX` reply subject and resolves with the first reply. Rejects with
   * `BusError` at once when nothing subscribes to the subject (as NATS answers "no responders"),
   * and after `timeoutMs` without a reply.
   */
  request(subject: string, data: unknown, options: RequestOptions = {}): Promise<unknown> {
    const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    return new Promise((resolve, reject) => {
      const token = (this.nextToken++).toString(36);
      try {
        if (this.closed) throw new BusError(`cannot request on ${subject}: the bus is closed`);
        // One wildcard subscription serves every reply, as nats.js muxes its inbox, so a request
        // does not subscribe and unsubscribe (which would empty the route cache each time).
        this.replies ??= this.subscribe(`${this.inbox}*`, (message) => this.onReply(message)) as Subscription;
        this.send(subject, data, this.inbox + token, true);
      } catch (error) {
        reject(error);
        return;
      }
      const timer = setTimeout(() => {
        this.requests.delete(token);
        reject(new UnansweredRequestError(`request on ${subject} timed out after ${timeoutMs} ms`));
      }, timeoutMs);
      this.requests.set(token, { resolve, reject, timer });
    });
  }

  /** Resolves once every message published so far, and every message their handlers published, was handled. */
  flush(): Promise<void> {
    return this.inFlight.idle();
  }

  /** Flushes, drops every subscription, rejects pending requests; later publishes reject with `BusError`. */
  async close(): Promise<void> {
    if (this.closed) return;
    await this.flush();
    this.closed = true;
    for (const subscription of this.subscriptions) subscription.active = false;
    this.subscriptions.clear();
    this.routes.clear();
    this.replies = null;
    for (const pending of this.requests.values()) {
      clearTimeout(pending.timer);
      pending.reject(new BusError('the bus was closed before a reply arrived'));
    }
    this.requests.clear();
  }

  private send(
    subject: string,
    data: unknown,
    reply: string | null,
    needsResponder: boolean,
    headers: MessageHeaders = NO_HEADERS,
  ): void {
    if (this.closed) throw new BusError(`cannot publish on ${subject}: the bus is closed`);
    const route = this.route(subject);
    const envelope: Envelope = { subject, data: sealMessage(subject, data), reply, headers };
    if (needsResponder && route.plain.length === 0 && route.groups.length === 0) {
      throw new UnansweredRequestError(`no responders on ${subject}`);
    }
    for (const subscription of route.plain) {
      this.inFlight.begin();
      subscription.enqueue(envelope);
    }
    for (const group of route.groups) {
      const members = group.members;
      const index = group.cursor.next % members.length;
      group.cursor.next = index + 1;
      this.inFlight.begin();
      members[index]!.enqueue(envelope);
    }
  }

  private route(subject: string): Route {
    const cached = this.routes.get(subject);
    if (cached) return cached;
    checkSubject(subject, false);
    const route = this.match(subject);
    // Reply subjects are used once; caching them would only evict routes that are used again.
    if (!subject.startsWith(INBOX)) this.routes.set(subject, route);
    return route;
  }

  private match(subject: string): Route {
    let plain: Subscription[] | null = null;
    let groups: Map<string, Subscription[]> | null = null;
    // Many subscriptions share a pattern (a worker's units of concurrency): match each pattern once.
    const verdicts = new Map<string, boolean>();
    for (const subscription of this.subscriptions) {
      let matches = verdicts.get(subscription.subject);
      if (matches === undefined) {
        matches = subjectMatches(subscription.subject, subject);
        verdicts.set(subscription.subject, matches);
      }
      if (!matches) continue;
      if (subscription.queue === null) {
        plain ??= [];
        plain.push(subscription);
        continue;
      }
      // Members of one queue name form one group even across patterns, as in the NATS server.
      groups ??= new Map();
      const members = groups.get(subscription.queue);
      if (members) members.push(subscription);
      else groups.set(subscription.queue, [subscription]);
    }
    if (plain === null && groups === null) return NO_ROUTE;
    return {
      plain: plain ?? [],
      groups:
        groups === null
          ? []
          : [...groups].map(([queue, members]) => ({ members, cursor: this.cursor(queue) })),
    };
  }

  /** Round-robin position of a queue group, kept across route rebuilds so members share the load evenly. */
  private cursor(queue: string): { next: number } {
    let cursor = this.cursors.get(queue);
    if (!cursor) {
      cursor = { next: 0 };
      this.cursors.set(queue, cursor);
    }
    return cursor;
  }

  private onReply(message: BusMessage): void {
    const token = message.subject.slice(this.inbox.length);
    const pending = this.requests.get(token);
    // A late reply (after the timeout) or a second responder's reply is dropped, as in NATS.
    if (!pending) return;
    this.requests.delete(token);
    clearTimeout(pending.timer);
    pending.resolve(message.data);
  }

  private report(error: unknown, subject: string): void {
    reportSafely(this.onHandlerError, error, subject);
  }
}
