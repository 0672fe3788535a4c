import { basename } from 'node:path';
import { newHarnessId } from '../api/options.js';
import type { OutputType, RunOutput } from '../api/output.js';
import { type RecordedResult, recordedResult } from '../api/recorded-result.js';
import type { HarnessResult } from '../api/result.js';
import { errorFromInfo } from '../errors.js';
import type { ClosingEvent } from '../runtime/follow-run.js';
import { logFileOf } from '../runtime/services.js';
import type { RunEvent } from '../schemas/index.js';
import { errorMessage, exitCodeOfClosing } from './exit-codes.js';
import type { CliIo } from './io.js';

/**
 * How `pge run` prints a run that ended, wherever it ran (in this process, or in a deployment it
 * was submitted to with `--nats`): the result as JSON with `--json`; else the output on stdout,
 * with the summary after it, or on stderr when the output is a document that stdout must hold alone.
 */

/** The run's output as text: a string as it is, a transcript as pretty JSON. */
export function outputText(output: RunOutput): string {
  return typeof output === 'string' ? output : JSON.stringify(output, null, 2);
}

/** Output types that print a document (JSON or YAML), which stdout must hold alone to be parsed. */
const DOCUMENT_TYPES: ReadonlySet<string> = new Set<OutputType>(['dict', 'list', 'json', 'yaml']);

/** The summary line, and the log path if the summary does not already name it. */
export function summaryLines(result: HarnessResult): string {
  return result.summary.includes(result.outputPath)
    ? `${result.summary}\n`
    : `${result.summary}\nLog: ${result.outputPath}\n`;
}

/** Prints a run's `result` (with `json`) or its `output` formatted by `outputType`, and its summary. */
export function printResult(
  result: HarnessResult,
  output: RunOutput,
  outputType: OutputType | undefined,
  json: boolean,
  io: CliIo,
): void {
  if (json) {
    io.stdout.write(`${JSON.stringify(result, null, 2)}\n`);
  } else if (DOCUMENT_TYPES.has(outputType ?? 'final')) {
    // A document on stdout parses as it is: the summary goes with the progress.
    io.stdout.write(`${outputText(output)}\n`);
    io.stderr.write(summaryLines(result));
  } else {
    const text = outputText(output);
    io.stdout.write(`${text === '' ? '' : `${text}\n\n`}${summaryLines(result)}`);
  }
}

/**
 * Prints a run of a deployment that this process followed (`pge run --nats`, `pge follow`,
 * `pge resume --nats`) as `pge run` prints a run of its own (`reportRun`): its result,
 * rebuilt from its events (`recordedResult`), as JSON with `--json`, else its output by
 * `--output-type` and its summary; a run that failed on an error says so on stderr. The log is
 * where the persistence worker writes it, which this process cannot see: it names the file, and
 * says whose directory it is in. Returns the exit code.
 */
export async function reportFollowedRun(
  last: ClosingEvent,
  events: readonly RunEvent[],
  shown: { json: boolean; outputType?: OutputType | undefined; harnessId?: string | undefined },
  io: CliIo,
): Promise<number> {
  const { json, outputType } = shown;
  const { runId } = last;
  const started = events[0];
  const logFile = basename(started?.type === 'run.started' ? started.payload.logPath : logFileOf(runId));
  const whereLog = `pge: the log of run ${runId} is ${logFile}, written by the persistence worker in its --working-dir\n`;
  let recorded: RecordedResult;
  try {
    recorded = await recordedResult(
      shown.harnessId ?? newHarnessId(),
      events,
      logFile,
      outputType ?? 'final',
    );
  } catch (error) {
    // The run ended as its closing event says; only its details are missing here.
    io.stderr.write(
      `pge: cannot rebuild the result of run ${runId} from its events: ${errorMessage(error)}\n`,
    );
    io.stderr.write(whereLog);
    io.stdout.write(json ? `${JSON.stringify(last, null, 2)}\n` : `${last.payload.summary}\n`);
    return exitCodeOfClosing(last);
  }
  const { result, output } = recorded;
  // As `run` throws it: a run that failed on an error, not one stopped by a budget or an interrupt.
  if (result.status === 'failed' && result.error !== null) {
    io.stderr.write(`pge: ${errorMessage(errorFromInfo(result.error))}\n`);
    io.stderr.write(whereLog);
    if (json) io.stdout.write(`${JSON.stringify(result, null, 2)}\n`);
  } else {
    io.stderr.write(whereLog);
    printResult(result, output, outputType, json, io);
  }
  return exitCodeOfClosing(last);
}
