import type { PgeOptions } from '../api/options.js';
import { PlannerGeneratorEvaluator } from '../api/planner-generator-evaluator.js';
import type { CliIo } from './io.js';
import { Progress } from './progress.js';

/**
 * The life of a harness in the CLI: built with the progress display as its `onEvent`, interrupted
 * on SIGINT/SIGTERM, and always closed, so that the process ends by itself once `main` returns.
 */

/** What a command gets to run with. */
export interface Session {
  pge: PlannerGeneratorEvaluator;
  progress: Progress;
  /** Whether SIGINT or SIGTERM arrived. */
  interrupted(): boolean;
}

const SIGNALS = ['SIGINT', 'SIGTERM'] as const;

/**
 * Builds the harness (a bad option throws `ConfigurationError` before anything starts), runs
 * `work`, and closes the harness whatever happens. The first signal interrupts the runs in progress;
 * they end as `interrupted` with a consistent log. Closing waits for a model call in flight, so a
 * second signal quits at once for a user who will not wait.
 */
export async function withSession<T>(
  options: PgeOptions,
  io: CliIo,
  work: (session: Session) => Promise<T>,
): Promise<T> {
  const progress = new Progress({
    stream: io.stderr,
    live: io.stderr.isTTY === true,
    verbose: options.verbose === true,
  });
  // The CLI shows events itself; the library's `verbose` lines would break the live display.
  const pge = new PlannerGeneratorEvaluator({ ...options, verbose: false, onEvent: progress.onEvent });
  let interrupted = false;
  const onSignal = (signal: NodeJS.Signals) => {
    if (interrupted) {
      progress.stop();
      io.stderr.write(`pge: ${signal} again: quitting without waiting\n`);
      process.exit(130);
    }
    interrupted = true;
    progress.note(
      `${signal}: interrupting the run; the log is being closed (press Ctrl-C again to quit at once)`,
    );
    pge.interrupt();
  };
  for (const signal of SIGNALS) process.on(signal, onSignal);
  try {
    return await work({ pge, progress, interrupted: () => interrupted });
  } finally {
    progress.stop();
    try {
      await pge.close();
    } finally {
      for (const signal of SIGNALS) process.off(signal, onSignal);
    }
  }
}
