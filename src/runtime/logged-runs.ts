import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { StoredMessages } from '../bus/bus.js';
import { subjectMatches, subjects } from '../bus/subjects.js';
import { describeError } from '../errors.js';
import { readLogRunId, readLogTail } from '../persistence/index.js';
import type { RunEvent } from '../schemas/index.js';
import { listRuns, type RunListFilter, type RunSummary } from './run-list.js';

/**
 * The runs of the embedded runtime, from their logs: where a deployment keeps its runs' events in
 * the stream, embedded runs keep them in their markdown logs, one per run, in the working directory.
 * Read into memory as a stream of the same subjects, they are listed by `listRuns` as a
 * deployment's runs are, so `pge runs` says the same of a run whichever bus carried it.
 */

/** The runs' events that the logs of a directory hold, and the files that could not be read. */
export interface LoggedRuns {
  /** Every run's events, in log order, as a stream holds them (`StoredMessages`). */
  readonly records: StoredMessages;
  /** One line per file that starts like a pge log but could not be read. */
  readonly problems: readonly string[];
}

/**
 * Reads every pge log directly in `dir` (any `.md` file whose header names a run; other files are
 * passed over). A log whose last write a crash cut short is read up to its last whole event, as
 * `pge resume` reads it: such a run is listed as still running, since nothing recorded its end.
 * Rejects only when `dir` cannot be listed.
 */
export async function readLoggedRuns(dir: string): Promise<LoggedRuns> {
  const names = (await readdir(dir, { withFileTypes: true }))
    .filter((entry) => entry.isFile() && entry.name.endsWith('.md'))
    .map((entry) => entry.name)
    .sort();
  const events: RunEvent[] = [];
  const problems: string[] = [];
  for (const name of names) {
    const path = join(dir, name);
    try {
      const text = await readFile(path, 'utf8');
      if (readLogRunId(text) === null) continue;
      events.push(...readLogTail(text, path).events);
    } catch (error) {
      problems.push(`${path}: ${describeError(error).message}`);
    }
  }
  return { records: eventsInMemory(events), problems };
}

/** The runs whose logs are in `dir`, as `listRuns` lists a deployment's, and the logs it could not read. */
export async function listLoggedRuns(
  dir: string,
  filter: RunListFilter = {},
): Promise<{ runs: RunSummary[]; problems: readonly string[] }> {
  const { records, problems } = await readLoggedRuns(dir);
  return { runs: await listRuns(records, filter), problems };
}

/** Events held in memory, read as a client reads `PGE_EVENTS`: by subject, under NATS's wildcards. */
export function eventsInMemory(events: readonly RunEvent[]): StoredMessages {
  const matching = (pattern: string) =>
    events.filter((e) => subjectMatches(pattern, subjects.event(e.runId, e.type)));
  return {
    stored: async (subject) => matching(subject),
    lastStored: async (subject) => matching(subject).at(-1) ?? null,
  };
}
