/**
 * The closed set of errors pge raises. Each sets `name`, takes `{ cause }`, and says whether the
 * operation may succeed if tried again (as nats.js does in `core/src/errors.ts`).
 */

/** Base of every pge error. */
export abstract class PgeError extends Error {
  abstract readonly retryable: boolean;
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** Bad options, flags or configuration: the user must change something. CLI exit code 2. */
export class ConfigurationError extends PgeError {
  readonly retryable = false;
}

/**
 * The server refused this connection's credential a publish or a subscription (a NATS permissions
 * violation): the credential is another role's, or older than the subject. Asking again cannot
 * help, so, like any configuration error, CLI exit code 2.
 */
export class PermissionDeniedError extends ConfigurationError {}

/**
 * A run that cannot be resumed from its log: the file is not a run's log, the run has ended, the
 * log is damaged beyond a torn last write, or it disagrees with the code that replays it. Detected
 * before any model is asked or anything is written, so, like any configuration error, CLI exit code 2.
 */
export class ResumeError extends ConfigurationError {}

/** Thrown into a call answered after its run ended, or by an actor of a run that has ended; the stopped chart never sees it. */
export class RunClosedError extends PgeError {
  readonly retryable = false;
}

/** A model answer that never validated (bad JSON, schema violation, refusal, cut off), after repairs. */
export class InvalidOutputError extends PgeError {
  readonly retryable = false;
  /** The last raw answer, kept for the log. */
  readonly raw: string | null;
  constructor(message: string, options: { cause?: unknown; raw: string | null }) {
    super(message, options);
    this.raw = options.raw;
  }
}

/** The model server could not be reached or kept failing (timeouts, 429, 5xx) after retries. */
export class ModelTransportError extends PgeError {
  readonly retryable = true;
}

/** The model server refused the request for a reason retrying cannot fix (400, 401, 403, 404). */
export class ModelRequestError extends PgeError {
  readonly retryable = false;
  readonly status: number | null;
  constructor(message: string, options: { cause?: unknown; status: number | null }) {
    super(message, options);
    this.status = options.status;
  }
}

/** A message on a pge subject that is not valid JSON or fails its schema. */
export class MessageRejectedError extends PgeError {
  readonly retryable = false;
  readonly subject: string;
  constructor(message: string, options: { cause?: unknown; subject: string }) {
    super(message, options);
    this.subject = options.subject;
  }
}

/** The shared-state log could not be written; the run stops, since the log is not best-effort. */
export class LogWriteError extends PgeError {
  readonly retryable = false;
}

/** A bus operation failed: closed connection, request timeout, no responders. */
export class BusError extends PgeError {
  readonly retryable = true;
}

/** A request nobody answered: no process subscribes to its subject, or none replied in time. */
export class UnansweredRequestError extends BusError {}

/**
 * Describes any thrown value as `{ name, message, retryable }` for events, results and the
 * charts' outcomes. pge's errors say whether they are retryable; an error rebuilt from another
 * process's description keeps what it said; anything else is taken as not retryable.
 */
export function describeError(error: unknown): { name: string; message: string; retryable: boolean } {
  if (error instanceof PgeError)
    return { name: error.name, message: error.message, retryable: error.retryable };
  if (error !== null && typeof error === 'object' && 'message' in error) {
    const e = error as { name?: unknown; message: unknown; retryable?: unknown };
    return { name: String(e.name ?? 'Error'), message: String(e.message), retryable: e.retryable === true };
  }
  return { name: 'Error', message: String(error), retryable: false };
}

/**
 * A request its run no longer waits for (the chart left the state that asked): its model call is
 * aborted and no result is published.
 */
export class CallCancelledError extends PgeError {
  readonly retryable = false;
}

/** A call had no answer within its deadline (`callTimeoutMs`): it was cancelled and counts as failed. */
export class CallTimeoutError extends PgeError {
  readonly retryable = true;
}

/**
 * JetStream gave up on a work item: it was delivered `maxDeliver` times and no worker finished it
 * (each one died or failed holding it).
 */
export class WorkAbandonedError extends PgeError {
  readonly retryable = false;
}

/** A coordinator let a run go because another coordinator took it over (its lease was lost). */
export class RunTakenOverError extends PgeError {
  readonly retryable = false;
}

/**
 * The stream holds another event at the seq of one being recorded: another coordinator recorded
 * that event of the run (it took the run over, or this one did while the other still sent).
 */
export class EventSeqTakenError extends PgeError {
  readonly retryable = false;
}

/** A worker stopped while it held a request: the request is handed back, not failed. */
export class WorkerStoppedError extends PgeError {
  readonly retryable = true;
}

/**
 * Rebuilds a named error that crossed the bus as `{ name, message, retryable }`, so callers can
 * tell a model transport failure from a rejected request after it came back from a worker.
 */
export function errorFromInfo(info: { name: string; message: string; retryable: boolean }): PgeError {
  switch (info.name) {
    case 'ModelTransportError':
      return new ModelTransportError(info.message);
    case 'ModelRequestError':
      return new ModelRequestError(info.message, { status: null });
    case 'InvalidOutputError':
      return new InvalidOutputError(info.message, { raw: null });
    case 'ConfigurationError':
      return new ConfigurationError(info.message);
    case 'ResumeError':
      return new ResumeError(info.message);
    case 'LogWriteError':
      return new LogWriteError(info.message);
    case 'CallTimeoutError':
      return new CallTimeoutError(info.message);
    case 'WorkAbandonedError':
      return new WorkAbandonedError(info.message);
    case 'BusError':
      return new BusError(info.message);
    default:
      // Anything else came from a role's model (a custom agent's own error, say): a model failure.
      return info.retryable
        ? new ModelTransportError(`${info.name}: ${info.message}`)
        : new ModelRequestError(`${info.name}: ${info.message}`, { status: null });
  }
}
