import { spawn } from 'node:child_process';
import { mkdir } from 'node:fs/promises';
import { raceAbort } from '../race-abort.js';
import type { ValidatorRun } from '../schemas/index.js';
import { workspaceLock } from './workspace.js';
import { holding } from './workspace-lock.js';

/**
 * Deterministic validators: checks that run in the run's workspace after the generator's work and
 * before the evaluator (a build, a test suite, a linter, a renderer). A failing one fails the
 * attempt with its output as the generator's feedback, and the evaluator is not asked. They run on
 * the generator's worker, where the workspace is, as part of the work call, so they see the files
 * exactly as the work left them: they hold the workspace's lock exclusive, so no other step that
 * runs beside this one writes while they run (`workspace-lock.ts`).
 */

/** What a validator is given. */
export interface ValidatorContext {
  /** The run's workspace (an absolute path), where a command runs; made if the work wrote nothing. */
  readonly workspace: string;
  /** The work's `output`, the artifact's text of its answer (a command reads it on its stdin). */
  readonly output: string;
  readonly runId: string;
  readonly stepId: string;
  readonly stepNumber: number;
  readonly attempt: number;
  /** Aborted when the call is cancelled or the validator's time is up. */
  readonly signal: AbortSignal;
}

/** A validator function's verdict; `output` is what the generator is told (and the log keeps). */
export interface ValidatorVerdict {
  passed: boolean;
  output?: string;
}

/** A validator of the API: named by its function's name in the log. */
export type ValidatorFunction = (context: ValidatorContext) => ValidatorVerdict | Promise<ValidatorVerdict>;

/** A validator: a shell command, which passes when it exits with 0, or a function. */
export type Validator = string | ValidatorFunction;

/** Bounds of one validator run. */
export interface ValidatorLimits {
  /** Wall time of one validator, in milliseconds; past it, it is stopped and has failed. */
  readonly timeoutMs: number;
  /** Characters of its output kept: the end, where a failure is usually told. */
  readonly maxOutputChars: number;
}

export const DEFAULT_VALIDATOR_LIMITS: ValidatorLimits = { timeoutMs: 300_000, maxOutputChars: 4_000 };

/**
 * The variables of the worker's environment a command is given: what a shell, a compiler or a
 * test runner needs, and no credential (the code it runs may be the model's). This is hygiene,
 * not a boundary: a process of the same user can read the worker's own environment
 * (`/proc/<pid>/environ`), so run generator workers as a user that holds no secret it must keep
 * from the model's code, or in a sandbox.
 */
const PASSED = /^(PATH|HOME|USER|LOGNAME|SHELL|LANG|LANGUAGE|LC_[A-Z_]+|TZ|TERM|TMPDIR|TMP|TEMP)$/;

/** The end of `text`, at most `chars` characters, saying how much was cut. */
function tail(text: string, chars: number): string {
  return text.length <= chars
    ? text
    : `[${text.length - chars} earlier characters cut]\n${text.slice(-chars)}`;
}

/** The name a validator has in the log and in the generator's feedback. */
export function validatorName(validator: Validator, index: number): string {
  if (typeof validator === 'string') return validator;
  return validator.name === '' ? `validator ${index + 1}` : validator.name;
}

/**
 * Runs every validator in order on one attempt's work (all of them, so that the generator learns
 * every failure at once) and reports each. They run holding the workspace's lock exclusive: the
 * writes in flight end first, and no write begins until the last validator is done. Rejects only
 * when `signal` aborts.
 */
export async function runValidators(
  validators: readonly Validator[],
  context: Omit<ValidatorContext, 'signal'>,
  signal: AbortSignal,
  limits: ValidatorLimits = DEFAULT_VALIDATOR_LIMITS,
): Promise<ValidatorRun[]> {
  await mkdir(context.workspace, { recursive: true });
  return holding(workspaceLock(context.workspace).exclusive(signal), () =>
    runInOrder(validators, context, signal, limits),
  );
}

async function runInOrder(
  validators: readonly Validator[],
  context: Omit<ValidatorContext, 'signal'>,
  signal: AbortSignal,
  limits: ValidatorLimits,
): Promise<ValidatorRun[]> {
  const runs: ValidatorRun[] = [];
  for (const [index, validator] of validators.entries()) {
    signal.throwIfAborted();
    const started = performance.now();
    const deadline = AbortSignal.any([signal, AbortSignal.timeout(limits.timeoutMs)]);
    const verdict =
      typeof validator === 'string'
        ? await runCommand(validator, { ...context, signal: deadline })
        : await runFunction(validator, { ...context, signal: deadline });
    signal.throwIfAborted();
    const timedOut = deadline.aborted;
    runs.push({
      validator: validatorName(validator, index),
      passed: verdict.passed && !timedOut,
      exitCode: timedOut ? null : verdict.exitCode,
      output: tail(
        timedOut ? `${verdict.output}\n[stopped: it ran longer than ${limits.timeoutMs} ms]` : verdict.output,
        limits.maxOutputChars,
      ),
      durationMs: performance.now() - started,
    });
  }
  return runs;
}

type Verdict = { passed: boolean; exitCode: number | null; output: string };

async function runFunction(validator: ValidatorFunction, context: ValidatorContext): Promise<Verdict> {
  try {
    const verdict = await raceAbort(Promise.resolve(validator(context)), context.signal);
    return { passed: verdict.passed === true, exitCode: null, output: verdict.output ?? '' };
  } catch (error) {
    return {
      passed: false,
      exitCode: null,
      output: `it threw: ${(error as Error)?.message ?? String(error)}`,
    };
  }
}

/**
 * Runs `command` with the shell in the workspace, the work's output on its stdin, the `PASSED`
 * variables of the worker's environment and the run's coordinates in `PGE_RUN_ID`, `PGE_STEP_ID`,
 * `PGE_STEP_NUMBER`, `PGE_ATTEMPT` and `PGE_WORKSPACE`.
 * Its process group is killed when the signal aborts, so nothing it started outlives it.
 */
function runCommand(command: string, context: ValidatorContext): Promise<Verdict> {
  const env: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(process.env)) if (PASSED.test(name)) env[name] = value;
  Object.assign(env, {
    PGE_RUN_ID: context.runId,
    PGE_STEP_ID: context.stepId,
    PGE_STEP_NUMBER: String(context.stepNumber),
    PGE_ATTEMPT: String(context.attempt),
    PGE_WORKSPACE: context.workspace,
  });
  return new Promise((resolve) => {
    const child = spawn(command, { shell: true, cwd: context.workspace, env, detached: true });
    let output = '';
    const keep = (chunk: Buffer) => {
      output += chunk.toString('utf8');
      // Only the end is kept: a chatty build must not fill the worker's memory.
      if (output.length > 1_000_000) output = output.slice(-500_000);
    };
    child.stdout.on('data', keep);
    child.stderr.on('data', keep);
    // A command that does not read its stdin closes it early: that is not a failure.
    child.stdin.on('error', () => {});
    child.stdin.end(context.output);
    const kill = () => {
      try {
        if (child.pid !== undefined) process.kill(-child.pid, 'SIGKILL');
      } catch {
        // Already gone.
      }
    };
    context.signal.addEventListener('abort', kill, { once: true });
    child.on('error', (error) => {
      context.signal.removeEventListener('abort', kill);
      resolve({ passed: false, exitCode: null, output: `it could not be started: ${error.message}` });
    });
    child.on('close', (code, killedBy) => {
      context.signal.removeEventListener('abort', kill);
      const said = killedBy === null ? output : `${output}\n[ended by ${killedBy}]`;
      resolve({ passed: code === 0, exitCode: code, output: said });
    });
  });
}
