import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { Command, Option } from '@commander-js/extra-typings';
import type { HarnessResult } from '../api/result.js';
import { ConfigurationError, InvalidOutputError } from '../errors.js';
import { checkTask } from '../runtime/task.js';
import { OPTION_DEFAULTS } from '../schemas/setting-values.js';
import { ExitCode, errorMessage, exitCodeOfError, exitCodeOfResult } from './exit-codes.js';
import { addTableFlags, configFileOption, LOCAL_RUN_FLAGS, optionsGiven } from './flag-options.js';
import { FLAG_GROUPS } from './flag-table.js';
import type { CliIo } from './io.js';

/**
 * `pge batch <file>`: one task per line, run one after another with `batchedRun`'s semantics (each
 * its own run id and log), one summary line per task on stdout as it finishes. Declared here
 * whole, as commander takes a command: a run's flags from the flag table (which `run` shares), its
 * own typed, and its action; `program.ts` adds the help's prose.
 */

/** `pge batch`, declared: it runs the file's tasks; `done` is given the batch's exit code. */
export function batchCommand(io: CliIo, done: (code: ExitCode) => void) {
  const command = new Command('batch').argument('<file>');
  addTableFlags(command, LOCAL_RUN_FLAGS);
  return command
    .addOption(
      new Option(
        '--json',
        "Print the tasks' outcomes as a JSON array on stdout, once all ended: task, status, exitCode, error, result",
      ).helpGroup(`${FLAG_GROUPS.output}:`),
    )
    .addOption(configFileOption())
    .action(async (file, { json, config }, parsed) => {
      const flags = { options: optionsGiven(parsed), configPath: config ?? null };
      done(await runBatch(resolve(io.cwd, file), flags, json === true, io));
    });
}

/** How one task of a batch ended. */
export interface BatchEntry {
  task: string;
  status: 'passed' | 'failed' | 'interrupted' | 'error' | 'skipped';
  exitCode: ExitCode | null;
  error: string | null;
  result: HarnessResult | null;
}

/** The tasks of a batch file: non-empty lines, trimmed, except comments (`#`). */
export function readTasks(text: string): string[] {
  return text
    .split(/\r?\n/)
    .map((line) => line.trim())
    .filter((line) => line !== '' && !line.startsWith('#'));
}

function quote(task: string): string {
  return JSON.stringify(task.length > 60 ? `${task.slice(0, 59)}…` : task);
}

/** The summary line of one task. */
export function entryLine(entry: BatchEntry, index: number, total: number): string {
  const head = `[${index + 1}/${total}] ${entry.status}`;
  const r = entry.result;
  const figures = r
    ? `${r.totalStepsCompleted}/${r.totalSteps} steps passed, ${r.totalRetries} retries, ` +
      `${r.totalDuration.toFixed(1)}s, $${r.usage.costUsd.toFixed(4)}`
    : null;
  return [head, entry.error, figures, quote(entry.task), r ? `log: ${r.outputPath}` : null]
    .filter((part) => part !== null)
    .join('  ');
}

/**
 * Whether the tasks after a failed one may still succeed. An invalid answer is about one task; a
 * refused request (key, model name) or a failing server would fail every task the same way, and a
 * configuration error or an unwritable log will not fix itself.
 */
function stopsBatch(error: unknown): boolean {
  return !(error instanceof InvalidOutputError);
}

function statusOf(result: HarnessResult, interrupted: boolean): BatchEntry['status'] {
  if (interrupted || result.status === 'interrupted') return 'interrupted';
  return result.passed ? 'passed' : 'failed';
}

/** Runs the tasks of the file at `path`, with the options `flags` set; returns the exit code. */
async function runBatch(
  path: string,
  flags: { options: ReturnType<typeof optionsGiven>; configPath: string | null },
  json: boolean,
  io: CliIo,
): Promise<ExitCode> {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (cause) {
    throw new ConfigurationError(`cannot read the task file ${path}: ${(cause as Error).message}`, { cause });
  }
  const tasks = readTasks(text);
  if (tasks.length === 0) throw new ConfigurationError(`the task file ${path} holds no tasks`);
  // Loaded once the line is known to be good: the help and a usage error load no harness.
  const { resolveConfig } = await import('./config.js');
  const { withSession } = await import('./session.js');
  const config = resolveConfig({ flags, env: io.env, cwd: io.cwd });
  // Every task is checked before the first one runs, as `batchedRun` does.
  const maxTaskBytes = config.options.maxTaskBytes ?? OPTION_DEFAULTS.maxTaskBytes;
  for (const [i, task] of tasks.entries()) {
    try {
      checkTask(task, maxTaskBytes);
    } catch (cause) {
      throw new ConfigurationError(`task ${i + 1} of ${path}: ${errorMessage(cause)}`, { cause });
    }
  }

  return withSession(config.options, io, async ({ pge, progress, interrupted }) => {
    const entries: BatchEntry[] = [];
    let stop = false;
    for (const [i, task] of tasks.entries()) {
      let entry: BatchEntry;
      if (stop || interrupted()) {
        entry = { task, status: 'skipped', exitCode: null, error: null, result: null };
      } else {
        progress.note(`task ${i + 1}/${tasks.length}: ${task}`);
        const before = pge.lastResult;
        try {
          await pge.batchedRun([task]);
          const result = pge.lastResult!;
          const exitCode = exitCodeOfResult(result, interrupted());
          entry = { task, status: statusOf(result, interrupted()), exitCode, error: null, result };
        } catch (error) {
          // `lastResult` is this task's only if the run got far enough to have one.
          const result = pge.lastResult === before ? null : pge.lastResult;
          const exitCode = interrupted() ? ExitCode.interrupted : exitCodeOfError(error);
          entry = { task, status: 'error', exitCode, error: errorMessage(error), result };
          stop = stopsBatch(error);
        }
      }
      entries.push(entry);
      progress.stop();
      if (!json) io.stdout.write(`${entryLine(entry, i, tasks.length)}\n`);
    }
    if (json) io.stdout.write(`${JSON.stringify(entries, null, 2)}\n`);
    else io.stdout.write(`${tally(entries)}\n`);
    return worst(entries);
  });
}

function tally(entries: readonly BatchEntry[]): string {
  const counts = new Map<string, number>();
  for (const e of entries) counts.set(e.status, (counts.get(e.status) ?? 0) + 1);
  const parts = [...counts].map(([status, n]) => `${n} ${status}`);
  return `batch: ${entries.length} task${entries.length === 1 ? '' : 's'}: ${parts.join(', ')}`;
}

/** The batch's exit code: an interrupt first, then the highest code of any task. */
function worst(entries: readonly BatchEntry[]): ExitCode {
  const codes = entries.map((e) => e.exitCode ?? ExitCode.passed);
  if (codes.includes(ExitCode.interrupted)) return ExitCode.interrupted;
  return codes.reduce((highest, code) => (code > highest ? code : highest), ExitCode.passed);
}
