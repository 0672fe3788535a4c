import { BusError } from '../errors.js';
import type { CallCancel, RunApproval, RunControl, WorkerPresence } from '../schemas/control.js';
import type { Role, RoleRequest, RoleResult, RunEvent } from '../schemas/index.js';
import { ROLE_OF_REQUEST } from '../schemas/index.js';
import type {
  Bus,
  BusMessage,
  BusSubscription,
  MessageHeaders,
  OrderedOptions,
  PublishOptions,
  StoredMessages,
} from './bus.js';
import type { MessageRejection } from './codec.js';
import { freezeMessage, rejectionOf } from './codec.js';
import { runIdOfSubject, subjects, workerQueue } from './subjects.js';

/**
 * Typed channels over a `Bus`, so that no module outside `src/bus` builds a subject or reads a raw
 * message. Every message published through them is handed over (deep-frozen). The bus validates
 * every message before a handler sees it, so the casts below only restate what the subject's
 * schema already guaranteed.
 */

/**
 * Publishes `data`, handed over: deep-frozen, so the sender cannot change it afterwards and an
 * in-memory bus validates it in place (`freezeMessage`). A subject built from an invalid id
 * throws; a function that returns a promise should reject instead.
 */
function publishOn(bus: Bus, subject: () => string, data: object, options?: PublishOptions): Promise<void> {
  let built: string;
  try {
    built = subject();
  } catch (error) {
    return Promise.reject(error);
  }
  return bus.publish(built, freezeMessage(data), options);
}

/** Publishes a run event on `pge.run.<runId>.evt.<type>`; `signal` stops it (`PublishOptions`). */
export function publishEvent(bus: Bus, event: RunEvent, signal?: AbortSignal): Promise<void> {
  return publishOn(bus, () => subjects.event(event.runId, event.type), event, signal && { signal });
}

/** Follows the events of one run, or of every run with `'*'`, in the order they were published. */
export function subscribeEvents(
  bus: Bus,
  runId: string | '*',
  handler: (event: RunEvent) => void | Promise<void>,
): BusSubscription {
  return bus.subscribe(subjects.events(runId), (message) => handler(message.data as RunEvent));
}

/**
 * Every event the transport keeps of one run, in the order it stored them (NATS: PGE_EVENTS): how
 * a reader that joined a run midway reads it from its start. `options.consumer`: see `stored`.
 */
export async function readRunEvents(
  source: StoredMessages,
  runId: string,
  options?: Pick<OrderedOptions, 'consumer'>,
): Promise<RunEvent[]> {
  return (await source.stored(subjects.events(runId), options)) as RunEvent[];
}

/**
 * The first event the transport keeps of one run (NATS: one lookup on PGE_EVENTS), normally its
 * `run.started`; null when it keeps none. How a reader that joins a run midway whose earlier
 * events are already written (a restarted persistence worker) learns where its log is.
 */
export async function readRunOpening(source: StoredMessages, runId: string): Promise<RunEvent | null> {
  const [first] = (await source.stored(subjects.events(runId), { first: 1 })) as RunEvent[];
  return first ?? null;
}

/** Every result the transport keeps of one run (NATS: PGE_RESULTS), in the order it stored them. */
export async function readRunResults(
  source: StoredMessages,
  runId: string,
  options?: Pick<OrderedOptions, 'consumer'>,
): Promise<RoleResult[]> {
  return (await source.stored(subjects.result(runId), options)) as RoleResult[];
}

/**
 * Reads the events of one run, or of every run with `'*'`, as the stream stores them: from the
 * first (or from stream sequence `options.from`, or only new ones with `'new'`) through an ordered
 * consumer, so a reconnect or a server restart loses none, on a bus that stores events (NATS). A
 * bus that stores nothing (in process) hands over what is published from now on.
 */
export function readEvents(
  bus: Bus,
  runId: string | '*',
  handler: (event: RunEvent) => void | Promise<void>,
  options: OrderedOptions = {},
): BusSubscription {
  const subject = subjects.events(runId);
  const deliver = (message: { data: unknown }) => handler(message.data as RunEvent);
  return bus.subscribeOrdered
    ? bus.subscribeOrdered(subject, deliver, options)
    : bus.subscribe(subject, deliver);
}

/**
 * Publishes a request event on its run's event subject and, once it is stored, queues it for the
 * role that serves it: one message in two places. A call is made only once the run's record holds
 * it, so a coordinator that stops (or is deposed) leaves no call made that its record does not ask
 * for, besides the one in flight. `headers` go with the work item (`enqueueWork`); `signal` stops
 * both.
 */
export async function publishRequest(
  bus: Bus,
  request: RoleRequest,
  headers?: MessageHeaders,
  signal?: AbortSignal,
): Promise<void> {
  await publishEvent(bus, request, signal);
  await enqueueWork(bus, request, headers, signal);
}

/**
 * Queues a request for the role that serves it (`ROLE_OF_REQUEST`), on `pge.work.<role>`, with
 * `headers` (the W3C `traceparent` of the span that asks, when the run is traced); `signal`
 * stops it, and `messageId` stores it as a new item (`PublishOptions`).
 */
export function enqueueWork(
  bus: Bus,
  request: RoleRequest,
  headers?: MessageHeaders,
  signal?: AbortSignal,
  messageId?: string,
): Promise<void> {
  const options = { headers, signal, ...(messageId === undefined ? {} : { messageId }) };
  return publishOn(bus, () => subjects.work(ROLE_OF_REQUEST[request.type]), request, options);
}

/**
 * Serves a role's work queue as one member of the role's queue group: each request goes to one of
 * the workers serving the role, so workers scale by starting more. The handler takes up to
 * `concurrency` requests at once, each with the headers its work item carries.
 */
export function serveWork(
  bus: Bus,
  role: Role,
  handler: (request: RoleRequest, headers: MessageHeaders) => Promise<void>,
  concurrency = 1,
): BusSubscription {
  const handle = (message: BusMessage) => handler(message.data as RoleRequest, message.headers);
  return bus.subscribe(subjects.work(role), handle, {
    queue: workerQueue(role),
    concurrency,
  });
}

/** Publishes a worker's result on `pge.run.<runId>.result.<role>`. */
export function publishResult(bus: Bus, result: RoleResult): Promise<void> {
  return publishOn(bus, () => subjects.result(result.runId, result.role), result);
}

/**
 * Follows the worker results of one run, or of every run with `'*'`, from now on. A bus that stores
 * results (NATS) reads them from the stream, from the next one stored: a result that a worker
 * stored while this process was reconnecting (it sent it again until the stream took it) comes
 * all the same, where a plain subscription would have missed it and left its run waiting. Only
 * coordinators read results, and they may make consumers: through an ordered consumer. `ofRun`
 * says which runs' results are wanted: there, the others are passed over before they are decoded.
 */
export function subscribeResults(
  bus: Bus,
  runId: string | '*',
  handler: (result: RoleResult) => void | Promise<void>,
  ofRun?: (runId: string) => boolean,
): BusSubscription {
  const subject = subjects.result(runId);
  const deliver = (message: { data: unknown }) => handler(message.data as RoleResult);
  if (!bus.subscribeOrdered) return bus.subscribe(subject, deliver);
  const accept =
    ofRun &&
    ((subject: string) => {
      const run = runIdOfSubject(subject);
      return run === null || ofRun(run);
    });
  return bus.subscribeOrdered(subject, deliver, { from: 'new', consumer: true, ...(accept && { accept }) });
}

/** Reports a message that was received but refused (`pge.errors.rejected.<bus.reporter>`). */
export function publishRejection(bus: Bus, rejection: MessageRejection): Promise<void> {
  return publishOn(bus, () => subjects.rejected(bus.reporter), rejection);
}

/** Follows the messages every process refused on receive (`pge.errors.rejected.*`). */
export function subscribeRejections(
  bus: Bus,
  handler: (rejection: MessageRejection) => void,
): BusSubscription {
  return bus.subscribe(subjects.rejected('*'), (message) => handler(message.data as MessageRejection));
}

/** Sends a person's decision to a run's coordinator (`pge.run.<runId>.approval`). */
export function publishApproval(bus: Bus, approval: RunApproval): Promise<void> {
  return publishOn(bus, () => subjects.approval(approval.runId), approval);
}

/** Takes decisions for every run (each coordinator acts on its own runs). */
export function subscribeApprovals(bus: Bus, handler: (approval: RunApproval) => void): BusSubscription {
  return bus.subscribe(subjects.approval('*'), (message) => handler(message.data as RunApproval));
}

/** Sends a command to a run's coordinator (`pge.run.<runId>.control`). */
export function publishControl(bus: Bus, control: RunControl): Promise<void> {
  return publishOn(bus, () => subjects.control(control.runId), control);
}

/** Follows the commands for every run; a coordinator acts on those of its own runs. */
export function subscribeControl(bus: Bus, handler: (control: RunControl) => void): BusSubscription {
  return bus.subscribe(subjects.control('*'), (message) => handler(message.data as RunControl));
}

/** Tells the workers that a run no longer waits for a request (`pge.run.<runId>.cancel`). */
export function publishCancel(bus: Bus, cancel: CallCancel): Promise<void> {
  return publishOn(bus, () => subjects.cancel(cancel.runId), cancel);
}

/** Follows the cancelled requests of every run: each worker hears all of them, not one per queue. */
export function subscribeCancels(bus: Bus, handler: (cancel: CallCancel) => void): BusSubscription {
  return bus.subscribe(subjects.cancel('*'), (message) => handler(message.data as CallCancel));
}

/** Says that a role worker is there, with the model that serves it (`pge.workers.<role>`). */
export function publishPresence(bus: Bus, presence: WorkerPresence): Promise<void> {
  return publishOn(bus, () => subjects.presence(presence.role), presence);
}

/** Hears every role worker say it is there (`pge.workers.*`). */
export function subscribePresence(bus: Bus, handler: (presence: WorkerPresence) => void): BusSubscription {
  return bus.subscribe(subjects.presence('*'), (message) => handler(message.data as WorkerPresence));
}

/**
 * For a handler of requests that act (submit a run, take one over): true when `message` can be
 * answered; otherwise it is reported as refused and must not be acted on, since nobody asked for
 * the answer (a request is sent with an inbox to reply on; a message without one is a stray, or a
 * copy JetStream delivered there).
 */
export function answerable(bus: Bus, message: BusMessage): boolean {
  if (message.answerable) return true;
  const refused = new BusError(
    `a request on ${message.subject} without an inbox to answer on (${message.reply ?? 'none'}): not acted on`,
  );
  publishRejection(bus, rejectionOf(message.subject, refused)).catch(() => undefined);
  return false;
}
