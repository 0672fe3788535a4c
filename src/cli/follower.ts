import type { PgeOptions } from '../api/options.js';
import type { OutputType } from '../api/output.js';
import type { NatsBus } from '../bus/nats-bus.js';
import { describeNatsServers } from '../bus/nats-connection.js';
import { ConfigurationError } from '../errors.js';
import { type ClosingEvent, followRun } from '../runtime/follow-run.js';
import { isForkPoint } from '../runtime/fork-log.js';
import { isClosingEvent, type RunEvent } from '../schemas/index.js';
import { OPTION_DEFAULTS } from '../schemas/setting-values.js';
import { ExitCode, errorMessage } from './exit-codes.js';
import type { CliIo } from './io.js';
import { Progress } from './progress.js';
import { reportFollowedRun } from './run-report.js';

/**
 * A run of a distributed deployment followed to its end, as `pge follow`, `pge run --nats` and
 * `pge resume --nats` show it: from its first event (read from the stream, so a run that ended long
 * ago or a follower that started late shows the same lines), with the run's exit code when it ends.
 * A follower that stops, by interrupt or after `--follow-timeout` without progress (exit 3),
 * prints the `pge follow` command to go on.
 */

/** How a follower shows a run. */
export interface FollowDisplay {
  json: boolean;
  verbose: boolean;
  /** Milliseconds without a new event before giving up. */
  timeoutMs: number;
  /** Lines are printed from this event on; earlier ones only feed the status. */
  fromSeq: number;
  /**
   * For a fork: the step it goes on from. The events it took from its parent, those before that
   * step's start, only feed the status, as the embedded fork counts them (`Progress.resumeFrom`).
   */
  forkFromStep?: number | undefined;
  /** The NATS servers as given, for the command that follows the run again. */
  servers: string;
  /** The credential file the follower connected with, if any: the command to follow again needs it too. */
  credsFile?: string | undefined;
  /** How the run's output is printed (option `outputType`; default `final`). */
  outputType?: OutputType | undefined;
  /** The harness id its result names (option `id`; default a new one, as a harness's). */
  harnessId?: string | undefined;
}

/**
 * How a run followed from its stored events is shown, from the resolved options (`--json`, where
 * lines start, the servers and the credential of the command that follows it again).
 */
export function followDisplayOf(
  options: PgeOptions,
  shown: { json: boolean; fromSeq: number; servers: string; credsFile?: string | undefined },
): FollowDisplay {
  return {
    ...shown,
    verbose: options.verbose === true,
    timeoutMs: options.followTimeoutMs ?? OPTION_DEFAULTS.followTimeoutMs,
    outputType: options.outputType,
    harnessId: options.id,
  };
}

/** The command that follows run `runId` again, with its servers (credentials in URLs masked) and credential file. */
export function followAgain(runId: string, servers: string, credsFile?: string): string {
  // Comma-separated without spaces, as --nats takes them.
  const creds = credsFile === undefined ? '' : ` --creds ${credsFile}`;
  return `pge follow ${runId} --nats ${describeNatsServers({ servers }, ',')}${creds}`;
}

/**
 * The progress display of a followed run: lines stamped with the time of each event (so a run
 * shown after the fact reads as it happened), and silent before `fromSeq`; and `events`, every
 * event it was shown, which the run's result is rebuilt from once it ends.
 */
export function followProgress(
  io: CliIo,
  display: FollowDisplay,
): { progress: Progress; onEvent: (e: RunEvent) => void; events: RunEvent[] } {
  const events: RunEvent[] = [];
  let current: number | null = null;
  let quiet = display.fromSeq > 1;
  const forkFrom = display.forkFromStep;
  let taken = forkFrom !== undefined;
  const progress = new Progress({
    stream: {
      write: (text: string) => (quiet ? undefined : io.stderr.write(text)),
      columns: io.stderr.columns,
    },
    live: io.stderr.isTTY === true,
    verbose: display.verbose,
    now: () => current ?? Date.now(),
  });
  const onEvent = (event: RunEvent) => {
    events.push(event);
    if (taken && forkFrom !== undefined) taken = !(isForkPoint(event, forkFrom) || isClosingEvent(event));
    quiet = taken || event.seq < display.fromSeq;
    current = Date.parse(event.ts);
    try {
      progress.onEvent(event);
    } finally {
      current = null;
    }
  };
  return { progress, onEvent, events };
}

/**
 * Ctrl-C or SIGTERM while following, from the moment this is called: `signalled` resolves, and the
 * process is not killed (the follower says how to follow again). `dispose` removes the handlers.
 */
export function interruptions(): { signalled: Promise<null>; dispose: () => void } {
  let onSignal: () => void = () => {};
  const signalled = new Promise<null>((resolve) => {
    onSignal = () => resolve(null);
    process.once('SIGINT', onSignal);
    process.once('SIGTERM', onSignal);
  });
  return {
    signalled,
    dispose: () => {
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
    },
  };
}

/**
 * Waits for the run's closing event and prints the run as `pge run` does (`reportFollowedRun`,
 * from its `events`); returns the exit code. A follower that sees no progress in time
 * exits 3, and an interrupt (`signalled`) 130; both say how to follow again.
 */
export async function showToEnd(
  runId: string,
  closing: Promise<ClosingEvent>,
  signalled: Promise<null>,
  progress: Progress,
  display: FollowDisplay,
  io: CliIo,
  events: readonly RunEvent[],
): Promise<number> {
  const again = followAgain(runId, display.servers, display.credsFile);
  let last: ClosingEvent | null;
  try {
    last = await Promise.race([closing, signalled]);
  } catch (error) {
    progress.stop();
    io.stderr.write(
      `pge: ${errorMessage(error)}; its coordinator may be gone, or a model call may be taking that long.\n`,
    );
    io.stderr.write(`pge: the run is not stopped; to follow it again: ${again}\n`);
    return ExitCode.model;
  }
  progress.stop();
  if (last === null) {
    io.stderr.write(`pge: interrupted: no longer following run ${runId}; it goes on in the deployment.\n`);
    io.stderr.write(`pge: to follow it again: ${again}\n`);
    return ExitCode.interrupted;
  }
  return reportFollowedRun(last, events, display, io);
}

/**
 * Shows run `runId` from its first event to its end (`showToEnd`) on `bus`; refuses a run id the
 * stream holds no event of.
 */
export async function followToEnd(
  bus: NatsBus,
  runId: string,
  display: FollowDisplay,
  io: CliIo,
): Promise<number> {
  const { progress, onEvent, events } = followProgress(io, display);
  const interrupt = interruptions();
  const follower = followRun(bus, runId, { onEvent, idleTimeoutMs: display.timeoutMs });
  try {
    // Everything the stream holds on the run is read by now: none at all is a wrong id.
    await bus.flush();
    if (follower.received() === 0)
      throw new ConfigurationError(
        `the stream holds no event of run ${runId}: check the id (a run older than the stream's limits is gone)`,
      );
    return await showToEnd(runId, follower.closing, interrupt.signalled, progress, display, io, events);
  } finally {
    // Interrupted, it stops following: its watch for the run's next event must not hold the process.
    follower.stop();
    interrupt.dispose();
  }
}
