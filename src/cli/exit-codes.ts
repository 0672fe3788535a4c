import type { HarnessResult } from '../api/result.js';
import { ConfigurationError, PgeError } from '../errors.js';
import type { RunEventOf } from '../schemas/index.js';

/**
 * The exit codes of `pge` and the mapping from outcomes and errors to them. The help prints the
 * same table (`help.ts`); a script can tell "the work failed" (1) from "fix the command" (2) from
 * "the service failed, try later" (3).
 */

/** Exit codes. */
export const ExitCode = {
  passed: 0,
  failed: 1,
  usage: 2,
  model: 3,
  interrupted: 130,
} as const;
export type ExitCode = (typeof ExitCode)[keyof typeof ExitCode];

/** The exit code of a run that finished (it resolved): passed, failed steps, budget, abort, interrupt. */
export function exitCodeOfResult(result: HarnessResult | null, interrupted: boolean): ExitCode {
  if (interrupted || result?.status === 'interrupted') return ExitCode.interrupted;
  return result?.passed ? ExitCode.passed : ExitCode.failed;
}

/**
 * The exit code of a run followed on NATS, from its closing event: the codes of a local run
 * (a run that failed on a model or transport error is 3, an interrupted one 130).
 */
export function exitCodeOfClosing(event: RunEventOf<'run.completed'> | RunEventOf<'run.failed'>): ExitCode {
  if (event.type === 'run.completed') return event.payload.passed ? ExitCode.passed : ExitCode.failed;
  const reason = event.payload.reason;
  if (reason === 'interrupted') return ExitCode.interrupted;
  return reason === 'error' ? ExitCode.model : ExitCode.failed;
}

/**
 * The exit code of an error a run or its setup threw. A `ConfigurationError` (bad option, no key, a
 * log path that is taken) is detected before any model is called: 2. Everything else stopped a run
 * that had started: a model or transport error, an answer that stayed invalid, a log that could not
 * be written (`LogWriteError` is an I/O failure in flight, not something a flag fixes): 3.
 */
export function exitCodeOfError(error: unknown): ExitCode {
  if (error instanceof ConfigurationError) return ExitCode.usage;
  return ExitCode.model;
}

/** One line for stderr: pge's own errors by their message, anything else with its name too. */
export function errorMessage(error: unknown): string {
  if (error instanceof PgeError) return error.message;
  if (error instanceof Error) return `${error.name}: ${error.message}`;
  return String(error);
}
