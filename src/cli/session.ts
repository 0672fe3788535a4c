import { createInterface, type Interface } from 'node:readline/promises';
import type { PgeOptions } from '../api/options.js';
import { PlannerGeneratorEvaluator } from '../api/planner-generator-evaluator.js';
import { ConfigurationError } from '../errors.js';
import type { ApprovalGate } from '../schemas/index.js';
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

/** The longest reason a rejection carries (`ApprovalDecision`). */
const MAX_REASON = 4000;

/**
 * The person at the terminal, asked for the decision at each gate a run of the session waits at:
 * yes (or nothing) approves, no rejects, any other answer rejects with it as the reason the
 * planner or the generator is told. One readline interface for the session; a question whose gate
 * was decided otherwise (its deadline) is withdrawn; Ctrl-C while asking is the signal it means.
 */
class TerminalGates {
  #terminal: Interface | null = null;
  /** The questions being asked, by the request they answer. */
  readonly #asking = new Map<string, AbortController>();

  constructor(
    private readonly pge: PlannerGeneratorEvaluator,
    private readonly progress: Progress,
    private readonly onSignal: (signal: NodeJS.Signals) => void,
  ) {}

  ask(runId: string, gate: ApprovalGate, requestId: string, summary: string | null): void {
    if (this.#asking.has(requestId)) return;
    if (this.#terminal === null) {
      this.#terminal = createInterface({ input: process.stdin, output: process.stderr });
      this.#terminal.on('SIGINT', () => this.onSignal('SIGINT'));
    }
    if (summary !== null) this.progress.note(`${gate} to approve:\n${summary}`);
    const asked = new AbortController();
    this.#asking.set(requestId, asked);
    this.#terminal
      .question(`Approve the ${gate}? [Y]es, [n]o, or the reason to reject it: `, { signal: asked.signal })
      .then(
        (text) => {
          const answer = text.trim();
          const approved = answer === '' || /^y(es)?$/i.test(answer);
          const reason = approved || /^no?$/i.test(answer) ? undefined : answer.slice(0, MAX_REASON);
          this.pge.approve(runId, gate, {
            decision: approved ? 'approve' : 'reject',
            ...(reason === undefined ? {} : { reason }),
            by: 'terminal',
            requestId,
          });
        },
        () => {
          // Withdrawn: decided otherwise, or the session ended.
        },
      )
      .finally(() => this.#asking.delete(requestId));
  }

  /** Withdraws the question of a request decided otherwise. */
  withdraw(requestId: string): void {
    this.#asking.get(requestId)?.abort();
  }

  close(): void {
    for (const asked of this.#asking.values()) asked.abort();
    this.#terminal?.close();
    this.#terminal = null;
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
  if ((options.approve ?? []).length > 0 && process.stdin.isTTY !== true)
    throw new ConfigurationError(
      '--approve asks on the terminal, and this process has none: run it in a terminal, or on NATS (pge run --nats, then pge approve), or from TypeScript with approve()',
    );
  // The CLI shows events itself; the library's `verbose` lines would break the live display.
  const pge: PlannerGeneratorEvaluator = new PlannerGeneratorEvaluator({
    ...options,
    verbose: false,
    onEvent: (event) => {
      progress.onEvent(event);
      if (event.type === 'approval.requested')
        gates.ask(event.runId, event.payload.gate, event.id, event.payload.summary);
      else if (event.type === 'approval.decided') gates.withdraw(event.payload.requestId);
      // A run resumed while it waited at a gate waits again: its request is in the log, not new.
      else if (event.type === 'run.resumed') setTimeout(() => askAgain(event.runId), 0);
    },
  });
  const askAgain = (runId: string) => {
    for (const waiting of pge.pendingApprovals().filter((p) => p.runId === runId)) {
      if (process.stdin.isTTY === true) gates.ask(runId, waiting.gate, waiting.requestId, null);
      else {
        progress.note(`run ${runId} waits at its ${waiting.gate} gate, and there is no terminal to ask on`);
        pge.interrupt();
      }
    }
  };
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
  const gates = new TerminalGates(pge, progress, onSignal);
  for (const signal of SIGNALS) process.on(signal, onSignal);
  try {
    return await work({ pge, progress, interrupted: () => interrupted });
  } finally {
    gates.close();
    progress.stop();
    try {
      await pge.close();
    } finally {
      for (const signal of SIGNALS) process.off(signal, onSignal);
    }
  }
}
