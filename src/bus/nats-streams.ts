import type {
  ConsumerConfig,
  ConsumerInfo,
  JetStreamManager,
  NextMsgRequest,
  SeqMsgRequest,
  StoredMsg,
  StreamConfig,
  StreamInfo,
} from '@nats-io/jetstream';
import {
  AckPolicy,
  DeliverPolicy,
  JetStreamApiError,
  RetentionPolicy,
  StorageType,
} from '@nats-io/jetstream';
import { nanos, errors as natsErrors } from '@nats-io/transport-node';
import { ConfigurationError } from '../errors.js';
import { type Backoff, pacer, retry } from '../retry.js';
import { DUPLICATE_WINDOW_MS, OPTION_DEFAULTS, ROLES } from '../schemas/setting-values.js';
import type { StreamLimits } from '../schemas/settings.js';
import { hasCause } from './nats-helpers.js';
import { isTransportFailure } from './nats-publish.js';
import { EVENTS_REPUBLISHED, subjectMatches, subjects, workerQueue } from './subjects.js';

/**
 * The JetStream side of the NATS bus: which streams hold which subjects, how they are created or
 * brought up to date at start (so a deployment needs no setup step), the id a message is
 * de-duplicated by, and the durable pull consumers that serve work queues and ordered readers.
 * Only features of nats-server 2.9 are used (Debian ships 2.9.10).
 */

/** A stream pge creates. */
export interface PgeStream {
  readonly name: string;
  readonly subject: string;
  readonly retention: 'limits' | 'interest';
  /**
   * Where the server republishes each message it stores, with its stream sequence in the header
   * `Nats-Sequence` (JetStream's RePublish, a subject mapping of `subject`): how readers follow the
   * stream live without a consumer (nats-stored.ts).
   */
  readonly republish?: string;
}

/** The stream of run events: every run's record. */
export const EVENTS_STREAM = 'PGE_EVENTS';
/** The work-queue stream: requests for the role workers. */
export const WORK_STREAM = 'PGE_WORK';
/** The stream of the role workers' results. */
export const RESULTS_STREAM = 'PGE_RESULTS';
/** The durable consumer every persistence worker reads the events of all runs through. */
export const PERSISTENCE_CONSUMER = 'pge-persistence';
/**
 * How long the event a killed persistence worker held stays with it before the server hands it to
 * the next one: a live worker heartbeats while it writes, so this bounds only a restart's wait.
 */
export const PERSISTENCE_ACK_WAIT_MS = 5_000;
/**
 * Events a persistence worker asks for at once and holds unacknowledged: not one pull per
 * event. Half of them are written side by side while the other half arrive; a worker writes
 * thousands a second (benchmarks.md, section 8), so a batch is written long before the ack wait
 * sends its last event elsewhere (and one sent again is written once: the log keeps one per seq).
 * Large, so that a restarted worker joins many runs of its backlog at once.
 */
export const PERSISTENCE_BATCH = 512;
/** How persistence reads PGE_EVENTS (`subscribeDurable`'s options): in batches, acked cumulatively. */
export const PERSISTENCE_READING = {
  ackWaitMs: PERSISTENCE_ACK_WAIT_MS,
  batch: PERSISTENCE_BATCH,
  ackAll: true,
} as const;
/** Work items a role's workers hold at once, all together: each worker takes up to its concurrency. */
export const WORK_MAX_ACK_PENDING = 1000;

/**
 * Events are the run's record (kept, limits retention); results are kept like events, so that a
 * coordinator that restarts can read what it missed. Work items are taken once: each role's
 * workers share one durable consumer (`pgeConsumers`), and an item goes when its role's consumer
 * acks it (interest retention). Not work-queue retention: nats-server 2.9 removes a work-queue
 * message on an acknowledgement of its sequence through any consumer of the stream, so a worker of
 * one role could delete another role's work with an ack it makes up; with interest retention an
 * item stays until the consumer that holds it, its own role's, acknowledges it. Nor taken from
 * PGE_EVENTS, where the request is stored already: a SIGKILLed nats-server forgets the acks its
 * consumers took in the moment before, and a consumer of a stream that keeps its messages then
 * hands answered requests out again; an ack that removed an item is not forgotten
 * (tests/nats/crash-acks.test.ts).
 */
export const PGE_STREAMS: readonly PgeStream[] = [
  {
    name: EVENTS_STREAM,
    subject: subjects.events('*'),
    retention: 'limits',
    republish: EVENTS_REPUBLISHED,
  },
  { name: WORK_STREAM, subject: 'pge.work.>', retention: 'interest' },
  { name: RESULTS_STREAM, subject: subjects.result('*'), retention: 'limits' },
];

/** The part of a stream's configuration that pge sets; the server's defaults stand for the rest. */
export type PgeStreamConfig = Pick<
  StreamConfig,
  | 'name'
  | 'subjects'
  | 'retention'
  | 'storage'
  | 'duplicate_window'
  | 'max_age'
  | 'max_bytes'
  | 'allow_direct'
  | 'republish'
  | 'num_replicas'
>;

/** The limits a bus was given; one left out is the default for a new stream, and left alone on an existing one. */
export type StreamLimitSettings = Partial<StreamLimits>;

/** The stream configuration pge wants for `stream`, with `limits` (the defaults where not given). */
export function streamConfig(stream: PgeStream, limits: StreamLimitSettings = {}): PgeStreamConfig {
  const maxBytes = limits.streamMaxBytes ?? OPTION_DEFAULTS.streamMaxBytes;
  return {
    name: stream.name,
    subjects: [stream.subject],
    retention: stream.retention === 'interest' ? RetentionPolicy.Interest : RetentionPolicy.Limits,
    storage: StorageType.File,
    duplicate_window: nanos(DUPLICATE_WINDOW_MS),
    // 0 is no limit for both settings; JetStream says so with 0 for max_age, -1 for max_bytes.
    max_age: nanos(limits.streamMaxAgeMs ?? OPTION_DEFAULTS.streamMaxAgeMs),
    max_bytes: maxBytes === 0 ? -1 : maxBytes,
    // pge reads what a stream holds from its leader (storedAfter); direct gets, answered by any
    // replica, stay open to readers of other systems that accept a replica's view (docs/integration.md).
    allow_direct: true,
    num_replicas: limits.replicas ?? 1,
    ...(stream.republish === undefined ? {} : { republish: { src: stream.subject, dest: stream.republish } }),
  };
}

/**
 * Creates the streams that are missing and updates those whose subjects or duplicate window differ,
 * or whose limits differ from the `limits` given (a process that is not told the limits, such as a
 * client that follows runs, leaves an existing stream's as they are). A stream whose retention or
 * storage differs cannot be updated in place: that is a `ConfigurationError` that says which stream
 * to delete. With `limits.replicas`, a new stream is made with that many replicas and an existing
 * one with another count is a `ConfigurationError` (`checkReplicas`).
 *
 * A process whose credential may not create or change streams (every role but the coordinator,
 * see `permissions.ts`) leaves an existing stream as it is, for a coordinator to bring up to
 * date, and waits up to `STREAM_WAIT_MS` for a missing one to be created by a coordinator.
 */
export async function ensureStreams(
  jsm: JetStreamManager,
  limits: StreamLimitSettings = {},
): Promise<ReadonlySet<string>> {
  const enforced = [
    ...(limits.streamMaxAgeMs === undefined ? [] : (['max_age'] as const)),
    ...(limits.streamMaxBytes === undefined ? [] : (['max_bytes'] as const)),
  ];
  // Every stream is tried, so that one message lists everything an operator has to fix; all at
  // once, so that a process waiting for a coordinator to make them waits STREAM_WAIT_MS in all.
  const problems: ConfigurationError[] = [];
  const republishing = new Set<string>();
  const outcomes = await Promise.allSettled(
    PGE_STREAMS.map(async (stream) => {
      const wanted = streamConfig(stream, limits);
      const have = await ensureStream(jsm, wanted, enforced);
      if (limits.replicas !== undefined) checkReplicas(stream.name, have.num_replicas, limits.replicas);
      if (wanted.republish !== undefined && have.republish?.dest === wanted.republish.dest)
        republishing.add(stream.name);
    }),
  );
  outcomes.forEach((outcome, i) => {
    if (outcome.status === 'fulfilled') return;
    const error = outcome.reason;
    problems.push(error instanceof ConfigurationError ? error : streamError(PGE_STREAMS[i]!.name, error));
  });
  if (problems.length === 1) throw problems[0];
  if (problems.length > 1) {
    throw new ConfigurationError(problems.map((problem) => problem.message).join('; '), { cause: problems });
  }
  return republishing;
}

async function ensureStream(
  jsm: JetStreamManager,
  wanted: PgeStreamConfig,
  enforced: readonly ('max_age' | 'max_bytes')[],
): Promise<StreamConfig> {
  // Two processes starting together may both find the stream missing: the loser of the create
  // race reads the winner's stream on the second pass.
  for (let pass = 0; pass < 2; pass++) {
    const existing = await streamInfo(jsm, wanted.name);
    if (existing === null) {
      try {
        return (await whileUnanswered(() => jsm.streams.add(wanted))).config;
      } catch (error) {
        if (hasCause(error, natsErrors.PermissionViolationError)) return waitForStream(jsm, wanted.name);
        if (pass === 0 && error instanceof JetStreamApiError) continue;
        throw streamError(wanted.name, error);
      }
    }
    const have = existing.config;
    if (have.retention !== wanted.retention || have.storage !== wanted.storage) {
      throw new ConfigurationError(
        `JetStream stream ${wanted.name} exists with ${have.retention} retention and ${have.storage} storage; ` +
          `pge needs ${wanted.retention} and ${wanted.storage}: delete the stream (nats stream rm ${wanted.name})`,
      );
    }
    const changes: Partial<PgeStreamConfig> = {};
    if (have.subjects.length !== 1 || have.subjects[0] !== wanted.subjects[0])
      changes.subjects = wanted.subjects;
    if (have.duplicate_window !== wanted.duplicate_window) changes.duplicate_window = wanted.duplicate_window;
    if (have.allow_direct !== wanted.allow_direct) changes.allow_direct = wanted.allow_direct;
    for (const field of enforced) if (have[field] !== wanted[field]) changes[field] = wanted[field];
    // RePublish cannot be changed in place (nats-server 2.9): a stream made before pge set it
    // keeps going without it, and its readers look it up whenever a message is published.
    if (Object.keys(changes).length === 0) return have;
    try {
      return (await whileUnanswered(() => jsm.streams.update(wanted.name, changes))).config;
    } catch (error) {
      if (hasCause(error, natsErrors.PermissionViolationError)) return have;
      throw streamError(wanted.name, error);
    }
  }
  throw streamError(wanted.name, new Error('it was neither found nor created'));
}

/**
 * A stream (or KV bucket) kept by another count of servers than this process was told is not
 * changed behind the operator's back, nor used as if it were right: a `ConfigurationError` that
 * says how to make the two agree.
 */
export function checkReplicas(
  stream: string,
  have: number,
  wanted: number,
  what = `JetStream stream ${stream}`,
): void {
  if (have === wanted) return;
  throw new ConfigurationError(
    `${what} has ${have} replica${have === 1 ? '' : 's'}, and this process was told ${wanted} (--replicas, PGE_REPLICAS or "replicas" in the config file): ` +
      `give every process the stream's count, or change the stream (nats stream edit ${stream} --replicas ${wanted}, on a cluster of at least ${wanted} servers)`,
  );
}

/** How long a process that may not make streams or consumers waits for a coordinator to make one. */
export const STREAM_WAIT_MS = 60_000;
/** Pauses between requests asked again, and between looks for what a coordinator makes. */
const STREAM_POLL: Backoff = { firstMs: 250, maxMs: 250 };

/**
 * A JetStream API request, asked again while it fails in transit (`isTransportFailure`: no answer
 * in time, JetStream not ready, a leader being elected) for up to `STREAM_WAIT_MS`: a process that
 * starts while a cluster elects its leaders, or while a server restarts, waits for them instead of
 * exiting. Any other failure is thrown at once.
 */
export function whileUnanswered<T>(request: () => Promise<T>): Promise<T> {
  return retry(request, {
    ...STREAM_POLL,
    retryable: (error) => {
      // No responders at all is a server without JetStream (nats.js's JetStreamNotEnabled, which its
      // public entry does not export), which waiting does not change.
      const noJetStream = error instanceof Error && error.name === 'JetStreamNotEnabled';
      // A request the credential may not make is refused for good, as the callers expect.
      const refused = hasCause(error, natsErrors.PermissionViolationError);
      return !noJetStream && !refused && isTransportFailure(error);
    },
    deadline: performance.now() + STREAM_WAIT_MS,
  });
}

async function waitForStream(jsm: JetStreamManager, name: string): Promise<StreamConfig> {
  return (await waitFor(`JetStream stream ${name}`, 'create it', () => streamInfo(jsm, name))).config;
}

/**
 * Waits for something only a coordinator may make, which `find` returns once it exists: `what`
 * does not exist yet, and this process may not `make` it.
 */
async function waitFor<T>(what: string, make: string, find: () => Promise<T | null>): Promise<T> {
  const deadline = Date.now() + STREAM_WAIT_MS;
  const pause = pacer(STREAM_POLL);
  for (let found = await find(); ; found = await find()) {
    if (found !== null) return found;
    if (Date.now() > deadline) {
      throw new ConfigurationError(
        `${what} does not exist, and this process's credential may not ${make}: start a coordinator (pge worker --role coordinator), which makes pge's streams and consumers`,
      );
    }
    await pause();
  }
}

async function streamInfo(jsm: JetStreamManager, name: string): Promise<StreamInfo | null> {
  try {
    return await whileUnanswered(() => jsm.streams.info(name));
  } catch (error) {
    if (error instanceof JetStreamApiError && error.code === 10059) return null; // stream not found
    throw streamError(name, error);
  }
}

function streamError(name: string, cause: unknown): ConfigurationError {
  const reason = cause instanceof Error ? cause.message : String(cause);
  return new ConfigurationError(`cannot set up JetStream stream ${name}: ${reason}`, { cause });
}

/**
 * The stream that stores `subject` (a subject, or a filter that must lie wholly inside one
 * stream), or null for subjects no stream holds (rejections, run submission, inboxes).
 */
export function streamOf(subject: string): PgeStream | null {
  for (const stream of PGE_STREAMS) if (covers(stream.subject, subject)) return stream;
  return null;
}

/** True when every subject that `filter` matches is matched by `pattern`. */
function covers(pattern: string, filter: string): boolean {
  if (!filter.includes('*') && !filter.includes('>')) return subjectMatches(pattern, filter);
  const p = pattern.split('.');
  const f = filter.split('.');
  for (let i = 0; i < p.length; i++) {
    if (p[i] === '>') return f.length > i;
    if (i >= f.length || f[i] === '>') return false;
    if (p[i] !== '*' && (f[i] === '*' || p[i] !== f[i])) return false;
  }
  return p.length === f.length;
}

/**
 * The id JetStream de-duplicates a message by, so that a re-sent message is stored once: for an
 * event `<runId>-<seq>`, so that a run holds one event per seq whichever coordinator sends it (one
 * that took the run over and one that still sends); a work item's request id; and
 * `<requestId>-result` for a worker's result.
 */
export function messageIdOf(stream: PgeStream, data: unknown): string | undefined {
  const record = (typeof data === 'object' && data !== null ? data : {}) as Record<string, unknown>;
  if (stream.name === RESULTS_STREAM) {
    return typeof record.requestId === 'string' ? `${record.requestId}-result` : undefined;
  }
  if (stream.name === EVENTS_STREAM) {
    return typeof record.runId === 'string' && typeof record.seq === 'number'
      ? `${record.runId}-${record.seq}`
      : undefined;
  }
  return typeof record.id === 'string' ? record.id : undefined;
}

/** How a durable pull consumer acknowledges and retries. */
export interface PullConsumerSettings {
  readonly stream: string;
  readonly durable: string;
  readonly filter: string;
  /** Milliseconds before an unacknowledged message is redelivered (the handler heartbeats meanwhile). */
  readonly ackWaitMs: number;
  /** Deliveries of one message before it is given up (terminated). */
  readonly maxDeliver: number;
  /** 1 keeps stream order even across redeliveries; more lets workers take messages in parallel. */
  readonly maxAckPending: number;
  /**
   * `AckPolicy.All` rather than `Explicit`: one ack covers every message before it, for a reader
   * that handles the stream in order (persistence), so it acks once per batch rather than per event.
   */
  readonly ackAll?: boolean;
}

/**
 * The durable consumers pge's processes read through: each role's work queue, shared by the role's
 * workers (`pge-<role>`), and the events of all runs for persistence, in stream order. A
 * coordinator makes them at start (`NatsBus.connect`).
 */
export function pgeConsumers(timings: { ackWaitMs: number; maxDeliver: number }): PullConsumerSettings[] {
  return [
    ...ROLES.map((role) => ({
      stream: WORK_STREAM,
      durable: workerQueue(role),
      filter: subjects.work(role),
      ...timings,
      maxAckPending: WORK_MAX_ACK_PENDING,
    })),
    {
      stream: EVENTS_STREAM,
      durable: PERSISTENCE_CONSUMER,
      filter: subjects.events('*'),
      ...timings,
      ackWaitMs: PERSISTENCE_READING.ackWaitMs,
      maxAckPending: PERSISTENCE_READING.batch,
      ackAll: PERSISTENCE_READING.ackAll,
    },
  ];
}

/**
 * Brings the durable pull consumer to these settings: creates it when missing, updates it when
 * its editable fields differ (nats-server 2.9 updates a durable in place), and leaves it alone
 * otherwise; resolves with the consumer as it is then. One of another ack policy (which the server
 * cannot update: a consumer made by an earlier pge) is replaced by one that starts right after the
 * old one's ack floor, so nothing it had not acknowledged is skipped. A process whose credential may not make
 * consumers (every role but the coordinator, see permissions.ts) takes an existing one as it is,
 * and waits up to `STREAM_WAIT_MS` for a missing one to be made by a coordinator. A consumer whose filter overlaps
 * another one's on the work-queue stream is refused by the server: a `ConfigurationError`.
 */
export async function ensurePullConsumer(
  jsm: JetStreamManager,
  settings: PullConsumerSettings,
): Promise<ConsumerInfo> {
  const wanted = {
    durable_name: settings.durable,
    filter_subject: settings.filter,
    ack_policy: settings.ackAll === true ? AckPolicy.All : AckPolicy.Explicit,
    ack_wait: nanos(settings.ackWaitMs),
    max_deliver: settings.maxDeliver,
    max_ack_pending: settings.maxAckPending,
  } satisfies Partial<ConsumerConfig>;
  const problem = (cause: unknown) =>
    new ConfigurationError(
      `cannot consume ${settings.filter} as durable ${settings.durable} on ${settings.stream}: ${cause instanceof Error ? cause.message : String(cause)}`,
      { cause },
    );
  try {
    const have = await consumerInfo(jsm, settings.stream, settings.durable);
    if (have === null)
      return await whileUnanswered(() =>
        jsm.consumers.add(settings.stream, { ...wanted, deliver_policy: DeliverPolicy.All }),
      );
    const keys = Object.keys(wanted) as (keyof typeof wanted)[];
    if (keys.every((key) => have.config[key] === wanted[key])) return have;
    if (have.config.ack_policy === wanted.ack_policy) {
      // Where it starts cannot change either: the update repeats it.
      const { deliver_policy, opt_start_seq } = have.config;
      const update = { ...wanted, deliver_policy, ...(opt_start_seq === undefined ? {} : { opt_start_seq }) };
      return await whileUnanswered(() => jsm.consumers.add(settings.stream, update));
    }
    // Another coordinator replacing it at the same moment may have deleted it first.
    await whileUnanswered(() => jsm.consumers.delete(settings.stream, settings.durable)).catch(
      (error: unknown) => {
        if (!(error instanceof JetStreamApiError && error.code === 10014)) throw error;
      },
    );
    return await whileUnanswered(() =>
      jsm.consumers.add(settings.stream, {
        ...wanted,
        deliver_policy: DeliverPolicy.StartSequence,
        opt_start_seq: have.ack_floor.stream_seq + 1,
      }),
    );
  } catch (error) {
    if (!hasCause(error, natsErrors.PermissionViolationError)) throw problem(error);
    return waitFor(`JetStream consumer ${settings.durable}`, 'make it', () =>
      consumerInfo(jsm, settings.stream, settings.durable),
    );
  }
}

async function consumerInfo(
  jsm: JetStreamManager,
  stream: string,
  name: string,
): Promise<ConsumerInfo | null> {
  try {
    return await whileUnanswered(() => jsm.consumers.info(stream, name));
  } catch (error) {
    if (error instanceof JetStreamApiError && error.code === 10014) return null; // consumer not found
    throw error;
  }
}

/**
 * The first message `stream` stores on `filter` at stream sequence `from` or later, or null. It is
 * asked of the stream's leader (`$JS.API.STREAM.MSG.GET`), not by a direct get, which any replica
 * may answer: on a cluster a replica may lag behind the leader (a takeover would miss a run's last
 * events), or be on a server that stopped answering, where the get times out whatever the other
 * servers do (tests/nats/cluster.test.ts). nats-server takes `next_by_subj` there as in a direct
 * get since 2.9; nats.js's `MsgRequest` type does not name it, and sends the query as given.
 */
export function storedAfter(
  jsm: JetStreamManager,
  stream: string,
  filter: string,
  from: number,
): Promise<StoredMsg | null> {
  const query: NextMsgRequest & SeqMsgRequest = { seq: from, next_by_subj: filter };
  return jsm.streams.getMessage(stream, query);
}
