import type { PgeOptions } from '../api/options.js';
import { NatsBus } from '../bus/nats-bus.js';
import type { NatsConnectionOptions } from '../bus/nats-connection.js';
import { ConfigurationError } from '../errors.js';
import { logFileOf, submitAndFollow } from '../runtime/services.js';
import { checkTask } from '../runtime/task.js';
import { OPTION_DEFAULTS } from '../schemas/setting-values.js';
import { type RunSubmission, RunSubmissionOptions } from '../schemas/submission.js';
import { flagsFor } from './command-flags.js';
import type { ConfigKey, FlagSpec } from './flag-table.js';
import { type FollowDisplay, followProgress, interruptions, showToEnd } from './follower.js';
import type { CliIo } from './io.js';

/**
 * `pge run --nats <url> "<task>"`: the task goes to a distributed deployment (`pge worker`
 * processes, or docker compose) by `pge.runs.submit`; this process only follows the run's events,
 * read from the stream (so a reconnect or a server restart loses none), showing the same progress
 * as a local run, and exits with the same codes. The workers own the models and the logs, so only
 * run settings travel; the log is written where the persistence worker keeps its logs. With no
 * new event for `followTimeoutMs` it stops following (exit 3) and prints the `pge follow` command.
 */

// Every run setting a submission may carry: the schema is the list.
const SUBMITTED = RunSubmissionOptions.keyof().options;

/**
 * Options that act in this process: the task's limit, how the run is shown, how long it is
 * followed, and how long its submission is sent again.
 */
const CLIENT_SIDE: ReadonlySet<string> = new Set([
  'maxTaskBytes',
  'outputType',
  'verbose',
  'followTimeoutMs',
  'submitTimeoutMs',
]);

/** Where a flag that a run on NATS cannot take belongs instead, by the option it sets. */
function elsewhere(flag: FlagSpec, fork: boolean): string {
  if (flag.option === 'workingDirectory' || flag.option === 'sharedStatePath')
    return `the persistence worker writes each run's log, as ${logFileOf('<runId>')} in its own --working-dir: give that to \`pge worker --role persistence\``;
  if (flag.option === 'validators')
    return 'it runs on the generator workers of a deployment: give it to `pge worker --role generator`';
  if (flag.group === 'model')
    return 'the role workers of a deployment hold the models: give it to `pge worker --role planner|generator|evaluator`';
  if (fork)
    return "a fork takes its parent's settings; only the bounds, thresholds, budgets and call deadline may differ (pge fork --help)";
  return 'it acts where the role workers of a deployment run: give it to `pge worker`';
}

/**
 * Refuses the flags of a `pge run` command line (or of `pge fork`'s, whose settings that travel are
 * `FORK_SETTINGS`) that would have no effect on a run submitted to a deployment: only run settings
 * travel with a submission, and a flag silently dropped would run the task otherwise than asked.
 * Throws `ConfigurationError` (exit 2) naming the first.
 */
export function refuseWorkerFlags(
  given: Partial<Record<ConfigKey, unknown>>,
  fork?: { settings: readonly string[] },
): void {
  const submitted: ReadonlySet<string> = new Set(fork?.settings ?? SUBMITTED);
  for (const flag of flagsFor(fork ? 'fork' : 'run')) {
    const { option } = flag;
    if (option === undefined || given[option] === undefined) continue;
    if (submitted.has(option) || CLIENT_SIDE.has(option)) continue;
    throw new ConfigurationError(
      `--${flag.name} has no effect on a ${fork ? 'fork' : 'run'} on NATS (--nats): ${elsewhere(flag, fork !== undefined)}`,
    );
  }
}

/** Runs `task` on the deployment at `servers`, connecting with `connection`; returns the exit code. */
export async function remoteRun(
  task: string,
  servers: string,
  connection: NatsConnectionOptions,
  options: PgeOptions,
  json: boolean,
  io: CliIo,
  /** With `pge continue --nats`: the run it carries on and its job. */
  continued: Pick<RunSubmission, 'continues' | 'job'> = {},
): Promise<number> {
  // The coordinator holds the task to its own limit too; this one answers before connecting.
  checkTask(task, options.maxTaskBytes ?? OPTION_DEFAULTS.maxTaskBytes);
  const submitted = Object.fromEntries(
    SUBMITTED.filter((k) => options[k] !== undefined).map((k) => [k, options[k]]),
  ) as RunSubmissionOptions;
  return followSubmission({ task, options: submitted, ...continued }, servers, connection, options, json, io);
}

/**
 * Submits `submission` (a task's run, or a fork: `pge fork --nats`) to the deployment at `servers`
 * and follows the run it starts as `pge run --nats` does; returns the exit code. `options` are how
 * it is shown and followed.
 */
export async function followSubmission(
  submission: Omit<RunSubmission, 'runId'>,
  servers: string,
  connection: NatsConnectionOptions,
  options: PgeOptions,
  json: boolean,
  io: CliIo,
): Promise<number> {
  const display: FollowDisplay = {
    json,
    verbose: options.verbose === true,
    timeoutMs: options.followTimeoutMs ?? OPTION_DEFAULTS.followTimeoutMs,
    fromSeq: 1,
    forkFromStep: submission.fork?.fromStep,
    servers,
    credsFile: connection.credsFile,
    outputType: options.outputType,
    harnessId: options.id,
  };
  const { progress, onEvent, events } = followProgress(io, display);
  const bus = await NatsBus.connect({ ...connection, servers, name: 'pge-run' });
  const interrupt = interruptions();
  try {
    const { runId, closing, stop } = await submitAndFollow(bus, submission, onEvent, {
      idleTimeoutMs: display.timeoutMs,
      submitTimeoutMs: options.submitTimeoutMs ?? OPTION_DEFAULTS.submitTimeoutMs,
    });
    try {
      return await showToEnd(runId, closing, interrupt.signalled, progress, display, io, events);
    } finally {
      // Interrupted, it stops following: its watch for the run's next event must not hold the process.
      stop();
    }
  } finally {
    interrupt.dispose();
    progress.stop();
    await bus.close();
  }
}
