/**
 * What the main thread and the log thread say to each other. Writers and requests are numbered by
 * the main side. To the thread, everything travels in order as lines of text through the shared
 * ring (`log-ring.ts`): an event as `<writer id> <JSON.stringify(event)>`, a command as
 * `COMMAND` followed by the command's JSON. Replies come back by `postMessage`, in batches (arrays),
 * a few per run.
 */

/** The first character of a command's line; an event's line starts with a digit. */
export const COMMAND = '!';

/** Commands to the log thread, carried out in the order sent (with the events around them). */
export type ToLogThread =
  /** Open writer `id` on the log at `path` for run `runId` (see `LogWriter`). */
  | readonly ['open', id: number, path: string, runId: string]
  /** Reply `settled` with `token` once every event appended so far is on disk. */
  | readonly ['flush', id: number, token: number]
  /** Finish the queued writes, close the file, forget the writer; reply `settled` with `token`. */
  | readonly ['close', id: number, token: number]
  /** As `close`, once every event up to the highest seq is written (`LogWriter.finish`). */
  | readonly ['finish', id: number, token: number];

/** Replies of the log thread. */
export type FromLogThread =
  /** Writer `id` failed (`LogWriteError` message); the first one reported counts. */
  | readonly ['failed', id: number, message: string]
  /** A `flush` or `close` is done: `error` is null, or the message of the `LogWriteError`. */
  | readonly ['settled', token: number, error: string | null];
