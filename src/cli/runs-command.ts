import { ConfigurationError } from '../errors.js';
import { listRuns, type RunListFilter, type RunSummary } from '../runtime/run-list.js';
import { ID_PATTERN, RunStopReason } from '../schemas/index.js';
import { runListStatuses } from '../schemas/run-status.js';
import { ExitCode } from './exit-codes.js';
import type { CommandLine } from './flags.js';
import type { CliIo } from './io.js';
import { openRecords } from './run-records.js';
import { parseDuration } from './units.js';

/** `pge runs`: the runs of a deployment, or of the embedded runs' logs, one line each (or as JSON). */

/**
 * `--status a,b`: the statuses to keep. Checked against every status a run can have, the stop
 * reasons of this version's schema included, so a reason added to it is a status at once.
 */
export function statusesOf(text: string): string[] {
  const known: readonly string[] = runListStatuses(RunStopReason.options);
  const picked = text
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');
  const unknown = picked.find((s) => !known.includes(s));
  if (picked.length === 0 || unknown !== undefined)
    throw new ConfigurationError(
      `--status takes some of ${known.join(', ')}, comma-separated${unknown === undefined ? '' : `, not "${unknown}"`}`,
    );
  return picked;
}

const ISO_DATE = /^\d{4}-\d{2}-\d{2}/;

/**
 * `--since`: a duration back from `now` (`90m`, `1h`, `7d`) or a time (`2026-11-28`,
 * `2026-11-28T09:00:00Z`); in ms since the epoch. A bare number is refused: as a duration it would
 * be milliseconds, which is never what a person listing runs means.
 */
export function sinceOf(text: string, now: number): number {
  const trimmed = text.trim();
  if (ISO_DATE.test(trimmed)) {
    const at = Date.parse(trimmed);
    if (!Number.isNaN(at)) return at;
  } else if (!/^\d+(\.\d+)?$/.test(trimmed)) {
    const ms = parseDuration(trimmed);
    if (ms !== undefined) return now - ms;
  }
  throw new ConfigurationError(
    `--since takes a duration with its unit (30m, 1h, 7d) or an ISO time (2026-11-28T09:00:00Z), not "${text}"`,
  );
}

/** `--job <id>`: a job's id is its first run's id, so it is checked as a run id is. */
export function jobIdOf(text: string): string {
  const id = text.trim();
  if (!ID_PATTERN.test(id))
    throw new ConfigurationError(
      `--job takes a job's id, its first run's id (letters, digits, "-" and "_"), not "${text}"`,
    );
  return id;
}

/** `2026-11-28 09:00:05`: a time to the second, in UTC as the events record it. */
const shortTime = (iso: string): string => iso.replace('T', ' ').replace(/(\.\d+)?Z$/, '');

/** The columns of the table: each one's heading and value. */
const COLUMNS: readonly [string, (r: RunSummary) => string][] = [
  ['RUN', (r) => r.runId],
  // A job's later runs say which run of which job they are; a run of its own job says nothing more.
  [
    'JOB',
    (r) =>
      r.job === null ? '?' : r.job.run === 1 && r.job.id === r.runId ? '-' : `${r.job.id} #${r.job.run}`,
  ],
  ['STATUS', (r) => r.status],
  ['STEPS', (r) => `${r.stepsPassed}/${r.stepsTotal ?? '?'}`],
  ['COST', (r) => `$${r.costUsd.toFixed(4)}`],
  ['STARTED (UTC)', (r) => shortTime(r.startedAt)],
  [
    'LAST EVENT',
    (r) => {
      const [date, time] = shortTime(r.lastEventAt).split(' ');
      // Its date only when it differs from the start's.
      return `${date === shortTime(r.startedAt).split(' ')[0] ? time : `${date} ${time}`} ${r.lastEvent}`;
    },
  ],
  ['TASK', (r) => r.task ?? '-'],
];

/** The runs as a table, a heading line first, each column as wide as its widest cell. */
export function runsTable(runs: readonly RunSummary[]): string {
  const rows = [COLUMNS.map(([heading]) => heading), ...runs.map((r) => COLUMNS.map(([, cell]) => cell(r)))];
  const widths = COLUMNS.map((_, i) => Math.max(...rows.map((row) => row[i]!.length)));
  return rows
    .map((row) =>
      row
        .map((cell, i) => cell.padEnd(widths[i]!))
        .join('  ')
        .trimEnd(),
    )
    .join('\n');
}

/** `pge runs [--status s,…] [--since 1h] [--job <id>] [--json]`: the deployment's runs, oldest start first. */
export async function runsCommand(line: CommandLine, io: CliIo): Promise<number> {
  const { values } = line.flags;
  const filter: RunListFilter = {};
  if (typeof values.status === 'string') filter.statuses = statusesOf(values.status);
  if (typeof values.since === 'string') filter.since = sinceOf(values.since, Date.now());
  if (typeof values.job === 'string') filter.job = jobIdOf(values.job);
  const dir = values['working-dir'];
  const { records, close } = await openRecords(
    {
      ...(line.flags.nats === null ? {} : { nats: [line.flags.nats] }),
      ...(typeof values.creds === 'string' ? { creds: values.creds } : {}),
      ...(typeof dir === 'string' ? { workingDir: dir } : {}),
    },
    io,
    'pge-runs',
  );
  try {
    const runs = await listRuns(records, filter);
    if (line.flags.json) io.stdout.write(`${JSON.stringify(runs)}\n`);
    else if (runs.length === 0) io.stdout.write('no runs\n');
    else io.stdout.write(`${runsTable(runs)}\n`);
    return ExitCode.passed;
  } finally {
    await close();
  }
}
