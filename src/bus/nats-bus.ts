import { setTimeout as sleep } from 'node:timers/promises';
import type { JetStreamClient, JetStreamManager, PubAck, StoredMsg } from '@nats-io/jetstream';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import type { MsgHdrs, NatsConnection } from '@nats-io/transport-node';
import { errors as natsErrors } from '@nats-io/transport-node';
import {
  BusError,
  ConfigurationError,
  describeError,
  EventSeqTakenError,
  PermissionDeniedError,
  UnansweredRequestError,
} from '../errors.js';
import type { Role, RunEvent } from '../schemas/index.js';
import { DEFAULT_PUBLISH_RETRY_MS, ID_PATTERN } from '../schemas/setting-values.js';
import { StreamLimits } from '../schemas/settings.js';
import type {
  Bus,
  BusHandler,
  BusSubscription,
  DurableOptions,
  OrderedOptions,
  PublishOptions,
  RequestOptions,
  StoredMessages,
  StoredReadOptions,
  SubscribeOptions,
} from './bus.js';
import {
  InFlight,
  memberGroup,
  reportSafely,
  reportToConsole,
  sealHeaders,
  subscribeOptions,
} from './bus.js';
import { decodeMessage, encodeMessage, rejectionOf } from './codec.js';
import type { NatsConnectionOptions } from './nats-connection.js';
import { connectNats, credentialRoleOf, describeNatsServers, serversOf } from './nats-connection.js';
import { busError, hasCause, Reconnects, ServerMove, toNatsHeaders, within } from './nats-helpers.js';
import { OrderedSubscription } from './nats-ordered-subscription.js';
import { MAX_PUBLISH_RETRY_MS, type StorePolicy, storeUntilAcknowledged } from './nats-publish.js';
import { PullSubscription } from './nats-pull-subscription.js';
import { readStored, StoredSubscription } from './nats-stored.js';
import type { StreamLimitSettings } from './nats-streams.js';
import {
  EVENTS_STREAM,
  ensurePullConsumer,
  ensureStreams,
  messageIdOf,
  pgeConsumers,
  streamOf,
  WORK_MAX_ACK_PENDING,
  WORK_STREAM,
  whileUnanswered,
} from './nats-streams.js';
import type { NatsHost, NatsSubscription, PullTimings } from './nats-subscriptions.js';
import { CoreSubscription } from './nats-subscriptions.js';
import {
  assertSubjectToken,
  checkSubject,
  republishedOn,
  subjectMatches,
  subjects,
  workerQueue,
} from './subjects.js';

/**
 * The bus of the distributed mode: the `Bus` contract over a nats-server with JetStream. Events,
 * work items and results are published to JetStream (acknowledged, stored, de-duplicated by id);
 * a role's workers share one durable pull consumer, so each work item is handled once even when
 * it was queued while no worker ran; everything else is core NATS. Every message is validated
 * when published and when received (`encodeMessage` / `decodeMessage`).
 */

/**
 * Options of the bus itself, beside how to connect. The stream limits (`streamMaxAgeMs`,
 * `streamMaxBytes`, see `StreamLimits`) that are given are applied to pge's streams, existing ones
 * included; those left out are the defaults of a stream this bus creates, and an existing
 * stream's stay as they are. `replicas`, when given, is the count of copies a new stream is made
 * with and the one an existing stream must have (a stream with another is a `ConfigurationError`).
 */
export interface NatsBusSettings extends StreamLimitSettings {
  /** Told when a handler throws or rejects, or a consumer fails; default `console.error`. */
  onHandlerError?: (error: unknown, subject: string) => void;
  /**
   * Milliseconds before JetStream redelivers an unacknowledged message (default 10 000): a worker
   * that dies holding a work item has it handed to another within this. A live handler marks its
   * message in progress every third of it, so a model call may take far longer.
   */
  ackWaitMs?: number;
  /** Deliveries of a work item whose handler keeps throwing before it is dropped (default 5). */
  maxDeliver?: number;
  /** Milliseconds before a work item whose handler threw is delivered again (default 2000). */
  nakDelayMs?: number;
  /**
   * Milliseconds a message for a stream (event, work item, result) is sent again, with the same
   * `Nats-Msg-Id`, while the server does not acknowledge it (a restart, a lost connection), before
   * its publish fails (default 60 000). At most the streams' duplicate window less one attempt
   * (118 000), so that a copy sent late is still recognised as one.
   */
  publishRetryMs?: number;
  /**
   * Who reports the messages this bus refuses (`pge.errors.rejected.<reporter>`). Default: the role
   * of the connection's credential when `pge nats-config` issued it (the one its permissions
   * allow), else `pge`.
   */
  reporter?: string;
}

/** Options of `NatsBus.connect`: the connection's and the bus's. */
export interface NatsBusOptions extends NatsConnectionOptions, NatsBusSettings {}

const SETTING_NAMES: ReadonlySet<string> = new Set([
  'onHandlerError',
  'ackWaitMs',
  'maxDeliver',
  'nakDelayMs',
  'streamMaxAgeMs',
  'streamMaxBytes',
  'replicas',
  'publishRetryMs',
  'reporter',
]);
const DEFAULT_TIMEOUT_MS = 10_000;
const DEFAULT_ACK_WAIT_MS = 10_000;
/** Bound of each step of `close` (flush, drain) when the server does not answer. */
const CLOSE_STEP_MS = 5_000;
const WORK_SUBJECT = 'pge.work.*';
const DEFAULT_REPORTER = 'pge';
/** The wait before asking again about a copy of a message the stream is still storing. */
const DUPLICATE_PENDING_MS = 50;

/** The `Bus` on NATS with JetStream. Create it with `NatsBus.connect` or `NatsBus.fromConnection`. */
export class NatsBus implements Bus, StoredMessages {
  readonly reporter: string;
  private readonly subscriptions = new Set<NatsSubscription>();
  private readonly publishing = new Set<Promise<unknown>>();
  /** The last event of each run being stored (`storeEvent`). */
  private readonly eventsInFlight = new Map<string, Promise<void>>();
  private readonly host: NatsHost;
  private readonly timings: PullTimings;
  private readonly storePolicy: StorePolicy;
  private readonly onHandlerError: (error: unknown, subject: string) => void;
  private published = 0;
  private readonly inFlight = new InFlight();
  private closed = false;
  private closing: Promise<void> | null = null;

  private constructor(
    /** The underlying connection, for what the `Bus` interface does not cover. */
    readonly connection: NatsConnection,
    private readonly js: JetStreamClient,
    private readonly jsm: JetStreamManager,
    private readonly ownsConnection: boolean,
    settings: NatsBusSettings,
    /** The streams whose server republishes what they store as pge wants (`PgeStream.republish`). */
    private readonly republishing: ReadonlySet<string>,
    /** The servers the connection was given (`ServerMove`); 1 when not known. */
    givenServers: number,
  ) {
    this.onHandlerError = settings.onHandlerError ?? reportToConsole;
    this.reporter = assertSubjectToken('reporter', settings.reporter ?? DEFAULT_REPORTER);
    this.timings = {
      ackWaitMs: positive(settings.ackWaitMs ?? DEFAULT_ACK_WAIT_MS, 'ackWaitMs'),
      maxDeliver: positive(settings.maxDeliver ?? 5, 'maxDeliver'),
      nakDelayMs: positive(settings.nakDelayMs ?? 2_000, 'nakDelayMs'),
    };
    const retryMs = positive(settings.publishRetryMs ?? DEFAULT_PUBLISH_RETRY_MS, 'publishRetryMs');
    if (retryMs > MAX_PUBLISH_RETRY_MS)
      throw new ConfigurationError(
        `publishRetryMs must be at most ${MAX_PUBLISH_RETRY_MS} (the streams' duplicate window less one attempt)`,
      );
    const reconnects = new Reconnects(connection);
    const onReconnect = (listener: () => void) => reconnects.listen(listener);
    const move = new ServerMove(connection, reconnects, givenServers, (error) =>
      this.report(error, 'connection'),
    );
    const served = () => move.served();
    this.storePolicy = {
      retryMs,
      isClosed: () => this.closed,
      onReconnect,
      unserved: (since) => move.unserved(since, 'publishes'),
      served,
    };
    this.host = {
      bus: this,
      begin: () => this.inFlight.begin(),
      end: () => this.inFlight.end(),
      rejectReceived: (subject, error) => this.rejectReceived(subject, error),
      report: (error, subject) => this.report(error, subject),
      detach: (subscription) => void this.subscriptions.delete(subscription),
      onReconnect,
      onDisconnect: (listener) => reconnects.listenDisconnect(listener),
      unserved: (since) => move.unserved(since, 'pulls'),
      served,
    };
  }

  /**
   * Connects (see `connectNats`), then creates or updates the streams. Rejects with
   * `ConfigurationError` when the server cannot be reached, refuses the credentials, has no
   * JetStream, or holds a pge stream that cannot be brought to pge's configuration.
   */
  static async connect(options: NatsBusOptions = {}): Promise<NatsBus> {
    const connection: Record<string, unknown> = {};
    const settings: Record<string, unknown> = {};
    for (const [key, value] of Object.entries(options))
      (SETTING_NAMES.has(key) ? settings : connection)[key] = value;
    const nc = await connectNats(connection as NatsConnectionOptions);
    try {
      const reporter = (settings.reporter as string | undefined) ?? (await credentialRoleOf(options));
      return await NatsBus.create(
        nc,
        { ...settings, ...(reporter === null ? {} : { reporter }) },
        true,
        describeNatsServers(options),
        serversOf(options).length,
      );
    } catch (error) {
      await nc.close();
      throw error;
    }
  }

  /** A bus on a connection the caller owns: `close` leaves the connection open. */
  static async fromConnection(nc: NatsConnection, settings: NatsBusSettings = {}): Promise<NatsBus> {
    return NatsBus.create(nc, settings, false, nc.getServer(), 1);
  }

  private static async create(
    nc: NatsConnection,
    settings: NatsBusSettings,
    owns: boolean,
    where: string,
    givenServers: number,
  ): Promise<NatsBus> {
    for (const key of Object.keys(settings)) {
      if (!SETTING_NAMES.has(key)) throw new ConfigurationError(`unknown NatsBus option "${key}"`);
    }
    const limits = StreamLimits.partial().safeParse({
      streamMaxAgeMs: settings.streamMaxAgeMs,
      streamMaxBytes: settings.streamMaxBytes,
      replicas: settings.replicas,
    });
    if (!limits.success) {
      const named = (issue: { path: PropertyKey[]; message: string }) =>
        issue.message.startsWith('stream') ? issue.message : `${String(issue.path[0])}: ${issue.message}`;
      throw new ConfigurationError(limits.error.issues.map(named).join('; '));
    }
    let jsm: JetStreamManager;
    try {
      // A cluster that is electing its leaders, or a server that is starting, answers in a moment.
      jsm = await whileUnanswered(() => jetstreamManager(nc));
    } catch (cause) {
      const reason = cause instanceof Error ? cause.message : String(cause);
      throw new ConfigurationError(`JetStream is not available at ${where}: ${reason}`, { cause });
    }
    const republishing = await ensureStreams(jsm, limits.data);
    const bus = new NatsBus(nc, jetstream(nc), jsm, owns, settings, republishing, givenServers);
    // The durable consumers every role reads through are the coordinator's to make, at start (no
    // other credential may: see permissions.ts). A process of another role makes its own when it
    // subscribes, where its credential allows (a server without credentials), else waits for it.
    if (bus.reporter === 'coordinator') {
      for (const consumer of pgeConsumers(bus.timings)) await ensurePullConsumer(jsm, consumer);
    }
    return bus;
  }

  /**
   * Validates and publishes. Events, work items and results resolve once JetStream stored them:
   * while the server does not acknowledge one (a timeout, no responders, a disconnect), it is sent
   * again with the same `Nats-Msg-Id`, so it is stored once, for up to `publishRetryMs`. Other
   * subjects resolve once the message is handed to the client. Rejects with `MessageRejectedError`,
   * `TypeError` (malformed subject) or `BusError` (refused by the stream, not acknowledged in time,
   * or the bus closed first).
   */
  publish(subject: string, data: unknown, options: PublishOptions = {}): Promise<void> {
    let bytes: Uint8Array;
    let headers: MsgHdrs | undefined;
    try {
      if (this.closed) throw new BusError(`cannot publish on ${subject}: the bus is closed`);
      options.signal?.throwIfAborted();
      checkSubject(subject, false);
      bytes = encodeMessage(subject, data);
      headers = toNatsHeaders(sealHeaders(options.headers));
    } catch (error) {
      return Promise.reject(error);
    }
    this.published++;
    const stream = streamOf(subject);
    if (stream === null) {
      try {
        this.connection.publish(subject, bytes, { headers });
        return Promise.resolve();
      } catch (error) {
        return Promise.reject(busError(error, `cannot publish on ${subject}`));
      }
    }
    const msgID = options.messageId ?? messageIdOf(stream, data);
    let stored: Promise<void>;
    if (msgID === undefined) {
      // Without an id a second copy would be stored twice: such a message is sent once.
      stored = this.js.publish(subject, bytes, { headers }).then(
        () => undefined,
        (error: unknown) => {
          throw busError(error, `cannot publish on ${subject}`);
        },
      );
    } else {
      const store = (started?: number) =>
        storeUntilAcknowledged(this.js, subject, bytes, msgID, this.storePolicy, {
          headers,
          started,
          signal: options.signal,
        });
      stored =
        stream.name === EVENTS_STREAM
          ? this.storeEvent(data as RunEvent, store)
          : store().then(() => undefined);
    }
    this.publishing.add(stored);
    const forget = () => void this.publishing.delete(stored);
    stored.then(forget, forget);
    return stored;
  }

  /**
   * Stores the events of a run one after another, each once the one before it is stored: so they
   * reach the stream in seq order whatever an outage holds up, and never interleave with another
   * coordinator's events of the same seqs (one that took the run over while this one still sent).
   * Each is given up `publishRetryMs` after it was published, its wait for its turn included, so
   * that a copy never arrives after the streams' duplicate window. An event acknowledged as a
   * duplicate is checked against the one stored (`checkStoredEvent`); when the stream holds another
   * coordinator's, the events of the run queued behind it are not sent, and reject with
   * `EventSeqTakenError` as it does.
   */
  private storeEvent(event: RunEvent, store: (published: number) => Promise<PubAck>): Promise<void> {
    // Its retries are bounded from now: see storeUntilAcknowledged.
    const published = Date.now();
    const send = async () => {
      let ack = await store(published);
      // nats-server 2.10 answers a copy of a message still being stored with seq 0: asked again,
      // within the event's bound (past it, seq 0 cannot be read: the run is let go).
      while (ack.duplicate && ack.seq === 0 && Date.now() - published < this.storePolicy.retryMs) {
        await sleep(DUPLICATE_PENDING_MS);
        ack = await store(published);
      }
      if (ack.duplicate) await this.checkStoredEvent(ack.seq, event);
    };
    const previous = this.eventsInFlight.get(event.runId);
    const stored =
      previous === undefined
        ? send()
        : previous.then(send, (error: unknown) => {
            if (!(error instanceof EventSeqTakenError)) return send();
            throw new EventSeqTakenError(
              `run ${event.runId}'s event ${event.seq} was not sent: an event of the run before it was another coordinator's seq`,
              { cause: error },
            );
          });
    this.eventsInFlight.set(event.runId, stored);
    const forget = () => {
      if (this.eventsInFlight.get(event.runId) === stored) this.eventsInFlight.delete(event.runId);
    };
    stored.then(forget, forget);
    return stored;
  }

  /**
   * An event acknowledged as a duplicate of the one stored at `seq`, under its run and seq: this
   * event sent again, or another coordinator's event of that seq. Rejects with `EventSeqTakenError`
   * for the latter, which the stream keeps in its place, and when the stored one cannot be read:
   * the run is then taken over from what the stream holds, rather than gone on with unsure. Read
   * back by one lookup: a duplicate's PubAck names only the sequence of the copy stored, and
   * nats-server 2.9 cannot refuse another coordinator's event at the publish (its expected last
   * sequence is per subject, and a run's events have a subject per type).
   */
  private async checkStoredEvent(seq: number, { id, runId, seq: eventSeq }: RunEvent): Promise<void> {
    let stored: unknown;
    try {
      const message = await whileUnanswered(() => this.jsm.streams.getMessage(EVENTS_STREAM, { seq }));
      stored = message === null ? null : decodeMessage(message.subject, message.data);
    } catch (error) {
      throw new EventSeqTakenError(
        `run ${runId}'s event ${eventSeq} was stored already, and which event the stream holds there cannot be read: ${describeError(error).message}`,
        { cause: error },
      );
    }
    if ((stored as RunEvent | null)?.id === id) return;
    throw new EventSeqTakenError(
      `run ${runId}'s event ${eventSeq} is stored already, as another coordinator recorded it`,
    );
  }

  /**
   * Subscribes to a subject or pattern. With a `queue`, a concrete work subject (`pge.work.<role>`)
   * is served through the durable JetStream consumer named after the queue, shared by every
   * worker of the role; anything else is a core NATS subscription (a queue group when given).
   */
  subscribe(subject: string, handler: BusHandler, options: SubscribeOptions = {}): BusSubscription {
    if (this.closed) throw new BusError(`cannot subscribe to ${subject}: the bus is closed`);
    checkSubject(subject, true);
    const { queue, concurrency } = subscribeOptions(options);
    if (queue !== null && subjectMatches(WORK_SUBJECT, subject)) {
      // Workers of a role take items in parallel, each one per free handler (see PullSubscription).
      return this.pull(subject, queue, queue, handler, WORK_MAX_ACK_PENDING, { concurrency });
    }
    const member = (): CoreSubscription => {
      let subscription: CoreSubscription;
      try {
        subscription = new CoreSubscription(this.connection, subject, queue, handler, this.host);
      } catch (error) {
        throw busError(error, `cannot subscribe to ${subject}`);
      }
      this.subscriptions.add(subscription);
      return subscription;
    };
    return concurrency === 1 ? member() : memberGroup(concurrency, member);
  }

  /**
   * Reads a stream subject (e.g. `pge.run.*.evt.>`) through the durable consumer `durableName`,
   * one message at a time in stream order, acknowledging each after its handler resolved: a reader
   * that restarts under the same name goes on where it stopped and misses nothing. A handler that
   * throws gets the message again (after `nakDelayMs`, up to `maxDeliver` times): before any later
   * one, or with `options.batch` above 1 (that many asked for at once), after the rest of its batch;
   * with `options.ackAll`, in place, before any later one (see `DurableOptions`).
   */
  subscribeDurable(
    subject: string,
    durableName: string,
    handler: BusHandler,
    options: DurableOptions = {},
  ): BusSubscription {
    if (this.closed) throw new BusError(`cannot subscribe to ${subject}: the bus is closed`);
    checkSubject(subject, true);
    if (streamOf(subject) === null) throw new TypeError(`no pge stream holds ${subject}`);
    const timings =
      options.ackWaitMs === undefined
        ? this.timings
        : { ...this.timings, ackWaitMs: positive(options.ackWaitMs, 'ackWaitMs') };
    const batch = options.batch ?? 1;
    if (!Number.isSafeInteger(batch) || batch < 1)
      throw new ConfigurationError('batch must be a whole number >= 1');
    return this.pull(subject, durableName, null, handler, batch, {
      timings,
      ackAll: options.ackAll === true,
    });
  }

  /**
   * Every message a pge stream holds on `subject` now (one run's events: `pge.run.<id>.evt.>`),
   * oldest first, each validated as on receive: one that fails is reported on `pge.errors.rejected.<reporter>`
   * and left out. By lookups, or with `options.consumer` through an ordered consumer, in a few round
   * trips whatever the count (see `OrderedOptions.consumer`: the coordinator's alone); with
   * `options.first`, only that many of the oldest, by lookups. Rejects with `TypeError` for a
   * subject no pge stream holds or a `first` that is not a count, `BusError` when the stream cannot
   * be read.
   */
  async stored(subject: string, options: StoredReadOptions = {}): Promise<unknown[]> {
    if (this.closed) throw new BusError(`cannot read ${subject}: the bus is closed`);
    checkSubject(subject, true);
    const { first } = options;
    if (first !== undefined && (!Number.isSafeInteger(first) || first < 1))
      throw new TypeError(`first must be a whole number >= 1, got ${first}`);
    const stream = streamOf(subject);
    if (stream === null) throw new TypeError(`no pge stream holds ${subject}`);
    // Not on PGE_WORK: a consumer that takes no acks counts as one that acknowledged everything it
    // was sent, which on an interest stream may remove a work item no worker took yet.
    const consumer = options.consumer && stream.retention === 'limits' ? this.js : undefined;
    const messages = await readStored(this.jsm, stream, subject, { consumer, first });
    const valid: unknown[] = [];
    for (const message of messages) {
      try {
        valid.push(decodeMessage(message.subject, message.data));
      } catch (error) {
        this.rejectReceived(message.subject, error);
      }
    }
    return valid;
  }

  /** Milliseconds before a work item a worker took and stopped heartbeating is handed out again. */
  get ackWaitMs(): number {
    return this.timings.ackWaitMs;
  }

  /**
   * Whether the work queue of `role` is idle: every item queued so far has been handed to a worker
   * at least once (`num_pending` 0), and a worker waits for more (`num_waiting` above 0, a pull
   * open), so an item due to be handed out again would have been. One lookup; rejects with
   * `BusError` when the server does not answer.
   */
  async workIdle(role: Role): Promise<boolean> {
    try {
      const info = await this.jsm.consumers.info(WORK_STREAM, workerQueue(role));
      return info.num_pending === 0 && info.num_waiting > 0;
    } catch (error) {
      throw busError(error, `cannot read the work queue of the ${role}s`);
    }
  }

  /**
   * Whether the pge stream that holds `subject` (a subject, or a filter inside one stream) stores
   * any message on it: with `subjects.events(runId)`, whether a run of that id was started, for as
   * long as the stream keeps its events. Rejects with `BusError` when the server does not answer.
   */
  async hasStored(subject: string): Promise<boolean> {
    return (await this.lastStoredMessage(subject)) !== null;
  }

  /**
   * The last message a pge stream holds on `subject` (a subject or a filter inside one stream),
   * validated as on receive (one that fails is reported and read as null), or null for none: one
   * lookup (`last_by_subj`), however many the stream holds there. Rejects as `hasStored` does.
   */
  async lastStored(subject: string): Promise<unknown | null> {
    const message = await this.lastStoredMessage(subject);
    if (message === null) return null;
    try {
      return decodeMessage(message.subject, message.data);
    } catch (error) {
      this.rejectReceived(message.subject, error);
      return null;
    }
  }

  /** The last message a pge stream holds on `subject`, undecoded, or null: `hasStored`, `lastStored`. */
  private async lastStoredMessage(subject: string): Promise<StoredMsg | null> {
    if (this.closed) throw new BusError(`cannot read ${subject}: the bus is closed`);
    checkSubject(subject, true);
    const stream = streamOf(subject);
    if (stream === null) throw new TypeError(`no pge stream holds ${subject}`);
    try {
      // A last-message lookup takes a filter with wildcards (nats-server 2.9 too); none is null.
      return await this.jsm.streams.getMessage(stream.name, { last_by_subj: subject });
    } catch (error) {
      throw busError(error, `cannot read ${subject} in ${stream.name}`);
    }
  }

  /**
   * Reads a stream subject (e.g. `pge.run.<runId>.evt.>`) in stream order from stream sequence
   * `options.from` (default 1) or from what is stored next (`'new'`): by lookups, or with
   * `options.consumer` through an ordered consumer (ephemeral, no acks, recreated from the last
   * message read). Either way the handler sees every message once, in stream order, across
   * reconnects and server restarts. Failures to read are reported to `onHandlerError` (once per
   * outage) and retried for as long as the subscription lasts.
   */
  subscribeOrdered(subject: string, handler: BusHandler, options: OrderedOptions = {}): BusSubscription {
    if (this.closed) throw new BusError(`cannot subscribe to ${subject}: the bus is closed`);
    checkSubject(subject, true);
    const stream = streamOf(subject);
    if (stream === null) throw new TypeError(`no pge stream holds ${subject}`);
    const from = options.from ?? 1;
    if (from !== 'new' && !(Number.isInteger(from) && from >= 1))
      throw new TypeError(
        `an ordered reading starts at a stream sequence >= 1 or 'new', not ${String(from)}`,
      );
    const subscription = options.consumer
      ? new OrderedSubscription(this.js, this.jsm, stream.name, subject, handler, this.host, {
          from,
          accept: options.accept,
        })
      : new StoredSubscription(this.connection, this.jsm, stream.name, subject, handler, this.host, {
          from,
          republishedOn: this.republishing.has(stream.name) ? republishedOn(subject) : null,
        });
    this.subscriptions.add(subscription);
    return subscription;
  }

  /**
   * Core NATS request/reply. Rejects with `BusError` on "no responders" (at once), after
   * `timeoutMs` (default 10 000) without a reply, when the bus is closed, or on a subject that a
   * pge stream stores (events, work, results), since the stream would answer.
   */
  async request(subject: string, data: unknown, options: RequestOptions = {}): Promise<unknown> {
    if (this.closed) throw new BusError(`cannot request on ${subject}: the bus is closed`);
    checkSubject(subject, false);
    if (streamOf(subject) !== null) {
      // JetStream itself would answer, with the PubAck of storing the request.
      throw new BusError(`cannot request on ${subject}: JetStream stores that subject, it takes no requests`);
    }
    const bytes = encodeMessage(subject, data);
    const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    this.published++;
    let reply: { subject: string; data: Uint8Array };
    try {
      reply = await this.connection.request(subject, bytes, { timeout: timeoutMs });
    } catch (error) {
      if (hasCause(error, natsErrors.NoRespondersError))
        throw new UnansweredRequestError(`no responders on ${subject}`);
      // Not a transport failure: this credential may not ask there, however often it tries.
      if (hasCause(error, natsErrors.PermissionViolationError))
        throw new PermissionDeniedError(busError(error, `request on ${subject} failed`).message, {
          cause: error,
        });
      if (hasCause(error, natsErrors.TimeoutError)) {
        throw new UnansweredRequestError(`request on ${subject} timed out after ${timeoutMs} ms`, {
          cause: error,
        });
      }
      throw busError(error, `request on ${subject} failed`);
    }
    return decodeMessage(reply.subject, reply.data);
  }

  /**
   * Resolves when what this bus published so far was accepted by the server, and what reached this
   * process's subscriptions in consequence (their JetStream consumers included) was handled, over
   * as many rounds as handlers keep publishing. Best effort across processes: it waits for nothing
   * another process still has to do.
   */
  async flush(): Promise<void> {
    if (this.closed) return;
    for (;;) {
      const mark = this.published;
      await Promise.allSettled([...this.publishing]);
      try {
        await this.connection.flush();
      } catch (error) {
        throw busError(error, 'cannot flush');
      }
      await Promise.all([...this.subscriptions].map((subscription) => subscription.caughtUp()));
      await this.inFlight.idle();
      if (mark !== this.published) continue;
      // The acknowledgements the handlers' ends sent reach the server too.
      for (const subscription of this.subscriptions) subscription.sendHeldAcks?.();
      try {
        await this.connection.flush();
      } catch (error) {
        throw busError(error, 'cannot flush');
      }
      return;
    }
  }

  /**
   * Flushes, stops every subscription (handlers already running finish, and their messages are
   * acknowledged), then drains the connection if the bus opened it. Later publishes, requests and
   * subscribes fail with `BusError`. Never rejects: when the server is unreachable, the flush and
   * the drain each give up after 5 s, are reported to `onHandlerError`, and the connection is closed.
   */
  close(): Promise<void> {
    this.closing ??= this.shutDown();
    return this.closing;
  }

  private async shutDown(): Promise<void> {
    // During an outage neither a flush nor a drain can finish: close is bounded, and reports. A
    // connection the server closed (it refused the credential) has nothing left to flush.
    if (!this.connection.isClosed())
      await within(this.flush(), CLOSE_STEP_MS, 'flushing on close').catch((error: unknown) =>
        this.report(error, 'close'),
      );
    this.closed = true;
    for (const subscription of this.subscriptions) subscription.stop();
    this.subscriptions.clear();
    await this.inFlight.idle();
    if (this.connection.isClosed()) return;
    try {
      await within(
        this.ownsConnection ? this.connection.drain() : this.connection.flush(),
        CLOSE_STEP_MS,
        'draining the NATS connection',
      );
    } catch (error) {
      this.report(busError(error, 'cannot drain the NATS connection'), 'close');
      if (this.ownsConnection) await this.connection.close();
    }
  }

  private pull(
    subject: string,
    durable: string,
    queue: string | null,
    handler: BusHandler,
    maxAckPending: number,
    how: { timings?: PullTimings; ackAll?: boolean; concurrency?: number } = {},
  ): BusSubscription {
    if (!ID_PATTERN.test(durable)) {
      throw new TypeError(`"${durable}" cannot name a durable consumer: use letters, digits, "-" and "_"`);
    }
    const stream = streamOf(subject);
    if (stream === null) throw new TypeError(`no pge stream holds ${subject}`);
    const timings = how.timings ?? this.timings;
    const settings = {
      stream: stream.name,
      durable,
      filter: subject,
      ackWaitMs: timings.ackWaitMs,
      maxDeliver: timings.maxDeliver,
      maxAckPending,
      ackAll: how.ackAll === true,
    };
    // A worker of a queue pulls an item for each handler that is free: it holds only what it is
    // handling, and leaves the next item to an idle worker. A reader of its own asks for up to its
    // unacknowledged limit at once, and handles them in order.
    const subscription = new PullSubscription(
      this.js,
      this.jsm,
      settings,
      subject,
      queue,
      handler,
      this.host,
      queue === null
        ? { ...timings, batch: maxAckPending, concurrency: 1 }
        : { ...timings, batch: 1, concurrency: how.concurrency ?? 1 },
    );
    this.subscriptions.add(subscription);
    return subscription;
  }

  private rejectReceived(subject: string, error: unknown): void {
    // A rejection report that is itself rejected goes to onHandlerError, never back on the bus: no loop.
    if (subjectMatches(subjects.rejected('*'), subject) || this.closed) {
      this.report(error, subject);
      return;
    }
    const rejection = rejectionOf(subject, error);
    this.publish(subjects.rejected(this.reporter), rejection).catch((failure: unknown) =>
      this.report(failure, subject),
    );
  }

  private report(error: unknown, subject: string): void {
    reportSafely(this.onHandlerError, error, subject);
  }
}

function positive(value: number, name: string): number {
  if (!Number.isFinite(value) || value <= 0)
    throw new ConfigurationError(`${name} must be a positive number`);
  return value;
}
