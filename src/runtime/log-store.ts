import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { hostname } from 'node:os';
import { join } from 'node:path';
import type { StoredMessages, StoredReadOptions } from '../bus/bus.js';
import { runIdOfSubject } from '../bus/subjects.js';
import { ConfigurationError } from '../errors.js';
import { readLogTail } from '../persistence/log-reader.js';
import type { RunEvent } from '../schemas/index.js';
import { eventsInMemory, readLoggedRuns } from './logged-runs.js';
import { logFileOf, type RunOwnership } from './services.js';

/**
 * The embedded runtime's store of runs: where a deployment keeps a run's events in `PGE_EVENTS`
 * and its claim in the KV bucket `pge-runs`, the embedded host keeps its events in the run's
 * markdown log (`<dir>/pge_shared_state_<runId>.md`, written by the persistence actor) and its
 * claim in this process. It reads back as the stream does (`StoredMessages`, by subject), so the
 * coordinator service (to fork, continue or refuse a taken id) and its clients (to list runs, decide
 * a gate, cancel) read the embedded runs as they read a deployment's.
 */

/** A store of runs kept in the markdown logs of one directory, for one process. */
export interface LogRunStore extends RunOwnership, StoredMessages {
  /** Whether a run of this id was ever started here: its log exists, or this process claimed it. */
  runExists(runId: string): Promise<boolean>;
}

/**
 * The runs whose logs are in `dir`. A run is claimed by the one process that writes its log: two
 * processes must never write one log, so a claim is refused when the log exists already. Taking a
 * run over is `pge resume <log>`'s, which checks the models and tools against the log first; this
 * store refuses it with a sentence that says so. A log that cannot be read is told to `onProblem`
 * when every run is read (a list), and rejects the read of its own run.
 */
export function logRunStore(dir: string, onProblem: (problem: string) => void = () => {}): LogRunStore {
  const claimed = new Set<string>();
  const logOf = (runId: string) => join(dir, logFileOf(runId));
  const refuseTakeOver = (runId: string): never => {
    throw new ConfigurationError(
      `run ${runId} is embedded: resume it from its log once its process is gone (pge resume ${logOf(runId)})`,
    );
  };
  /** The events of one run's log; none when it has no log (yet). */
  const runEvents = async (runId: string): Promise<RunEvent[]> => {
    const path = logOf(runId);
    let text: string;
    try {
      text = await readFile(path, 'utf8');
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return [];
      throw error;
    }
    // A log torn by a crash holds its run up to its last whole event, as `pge resume` reads it.
    return readLogTail(text, path).events;
  };
  /** The records a subject's messages are among: its run's log, or every log for `pge.run.*.…`. */
  const recordsOf = async (subject: string): Promise<StoredMessages> => {
    const runId = runIdOfSubject(subject);
    if (runId !== null && runId !== '*' && runId !== '>') return eventsInMemory(await runEvents(runId));
    const { records, problems } = await readLoggedRuns(dir);
    for (const problem of problems) onProblem(problem);
    return records;
  };
  return {
    owner: `${hostname()}:${process.pid}`,
    async claim(runId) {
      if (claimed.has(runId) || existsSync(logOf(runId))) return false;
      claimed.add(runId);
      return true;
    },
    async release(runId) {
      claimed.delete(runId);
    },
    letExpire(runId) {
      claimed.delete(runId);
    },
    takeOver: async (runId) => refuseTakeOver(runId),
    takeOverNow: async (runId) => refuseTakeOver(runId),
    events: runEvents,
    // Results travel on the in-process bus only: the log holds those the run applied, as events.
    storedResult: async () => null,
    async runExists(runId) {
      return claimed.has(runId) || existsSync(logOf(runId));
    },
    async stored(subject: string, options?: StoredReadOptions) {
      const found = await (await recordsOf(subject)).stored(subject);
      return options?.first === undefined ? found : found.slice(0, options.first);
    },
    async lastStored(subject: string) {
      return (await recordsOf(subject)).lastStored(subject);
    },
  };
}
