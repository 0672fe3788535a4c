import { createInterface } from 'node:readline/promises';
import type { PgeOptions } from '../api/options.js';
import { PlannerGeneratorEvaluator } from '../api/planner-generator-evaluator.js';
import { ConfigurationError } from '../errors.js';
import type { RunEventOf } from '../schemas/index.js';
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
 * Asks the person at the terminal for the decision at a gate: yes (or nothing) approves, no
 * rejects, any other answer rejects with it as the reason the planner or the generator is told.
 */
async function askOnTerminal(
  event: RunEventOf<'approval.requested'>,
  pge: PlannerGeneratorEvaluator,
  progress: Progress,
): Promise<void> {
  const { gate, summary } = event.payload;
  progress.note(`${gate} to approve:\n${summary}`);
  const terminal = createInterface({ input: process.stdin, output: process.stderr });
  try {
    const answer = (
      await terminal.question(`Approve the ${gate}? [Y]es, [n]o, or the reason to reject it: `)
    ).trim();
    const approved = answer === '' || /^y(es)?$/i.test(answer);
    const reason = approved || /^no?$/i.test(answer) ? undefined : answer;
    pge.approve(event.runId, gate, {
      decision: approved ? 'approve' : 'reject',
      ...(reason === undefined ? {} : { reason }),
      by: 'terminal',
    });
  } finally {
    terminal.close();
  }
}

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
  const gates = options.approve ?? [];
  if (gates.length > 0 && process.stdin.isTTY !== true)
    throw new ConfigurationError(
      '--approve asks on the terminal, and this process has none: run it in a terminal, or on NATS (pge run --nats, then pge approve), or from TypeScript with approve()',
    );
  // The CLI shows events itself; the library's `verbose` lines would break the live display.
  const pge: PlannerGeneratorEvaluator = new PlannerGeneratorEvaluator({
    ...options,
    verbose: false,
    onEvent: (event) => {
      progress.onEvent(event);
      if (event.type === 'approval.requested') void askOnTerminal(event, pge, progress);
    },
  });
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
