import { Command, Option } from '@commander-js/extra-typings';
import { ConfigurationError } from '../errors.js';
import type { RunListFilter, RunSummary } from '../runtime/run-list.js';
import type { RunStopReason } from '../schemas/index.js';
import { runListStatuses } from '../schemas/run-status.js';
import { ID_PATTERN } from '../schemas/setting-values.js';
import { FLAG_GROUPS } from './flag-table.js';
import type { CliIo } from './io.js';
import { credsOption, embeddedLogsOption, listingServersOption } from './nats-flags.js';
import { parseDuration } from './units.js';

/**
 * `pge runs`: the runs of a deployment, or of the embedded runs' logs, one line each (or as JSON).
 * Declared here whole, as commander takes a command: its typed options and its action;
 * `program.ts` adds the help's prose.
 */

const OUTPUT = `${FLAG_GROUPS.output}:`;

/** `pge runs`, declared: it lists the runs on `io.stdout`, oldest start first. */
export function runsCommand(io: CliIo) {
  return new Command('runs')
    .addOption(
      new Option(
        '--status <s[,s…]>',
        'Only runs of these statuses, comma-separated: running, waiting (at a gate), passed, completed (not every step passed), or how a run stopped: aborted, stopped (a budget), failed (an error), interrupted, …',
      ).helpGroup(OUTPUT),
    )
    .addOption(
      new Option(
        '--since <duration|time>',
        'Only runs started since: a duration back from now (30m, 1h, 7d) or an ISO time (2026-11-28T09:00:00Z)',
      ).helpGroup(OUTPUT),
    )
    .addOption(
      new Option(
        '--job <id>',
        "Only the runs of this job (pge continue): its id is its first run's id, which is listed too",
      ).helpGroup(OUTPUT),
    )
    .addOption(
      new Option(
        '--json',
        'Print the runs as a JSON array on stdout: runId, job ({ id, run }), task, status, stepsPassed, stepsTotal, costUsd, startedAt, lastEventAt, lastEvent',
      ).helpGroup(OUTPUT),
    )
    .addOption(listingServersOption())
    .addOption(credsOption())
    .addOption(embeddedLogsOption())
    .action(async (flags) => {
      // Loaded here: the help and a usage error load no NATS client nor the event schemas.
      const { RunStopReason } = await import('../schemas/index.js');
      // The filters are checked before anything is read: a wrong one is a usage error at once.
      const filter: RunListFilter = {};
      if (flags.status !== undefined) filter.statuses = statusesOf(flags.status, RunStopReason.options);
      if (flags.since !== undefined) filter.since = sinceOf(flags.since, Date.now());
      if (flags.job !== undefined) filter.job = jobIdOf(flags.job);
      const { openRecords } = await import('./run-records.js');
      const { listRuns } = await import('../runtime/run-list.js');
      const { records, close } = await openRecords(flags, io, 'pge-runs');
      try {
        const runs = await listRuns(records, filter);
        if (flags.json) io.stdout.write(`${JSON.stringify(runs)}\n`);
        else if (runs.length === 0) io.stdout.write('no runs\n');
        else io.stdout.write(`${runsTable(runs)}\n`);
      } finally {
        await close();
      }
    });
}

/**
 * `--status a,b`: the statuses to keep. Checked against every status a run can have, the stop
 * `reasons` of this version's schema included, so a reason added to it is a status at once.
 */
export function statusesOf(text: string, reasons: readonly RunStopReason[]): string[] {
  const known: readonly string[] = runListStatuses(reasons);
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
