import type { OutputType, RunOutput } from '../api/output.js';
import type { HarnessResult } from '../api/result.js';
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
