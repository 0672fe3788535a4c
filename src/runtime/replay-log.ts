import { InProcessBus } from '../bus/in-process-bus.js';
import { subjects } from '../bus/subjects.js';
import { createCoordinator } from '../conductor/coordinator.js';
import { ReplayDivergence, readRecordedRun } from '../conductor/replay.js';
import { ResumeError } from '../errors.js';
import type { RunOutcome } from '../machines/run-machine.js';
import { readLogFile } from '../persistence/log-reader.js';
import type { ModelCall, RunEvent } from '../schemas/index.js';
import { OPTION_DEFAULTS, ROLES } from '../schemas/setting-values.js';

/**
 * `pge replay`: a recorded run's charts run again with every call answered from its log, and the
 * events they produce compared with the recorded ones, one by one: a regression check of the
 * charts (a change that makes a recorded run take another path shows where), and a proof that a
 * log holds everything its run decided. Nothing is asked of a model: the replay has no workers,
 * and it counts every request that would have gone to one.
 */

/** What a replay found. */
export interface ReplayReport {
  runId: string;
  /** Every recorded event was produced again, in order, and nothing else. */
  identical: boolean;
  /** Events in the log. */
  events: number;
  /** Requests that went to a worker, so to a model: 0, since the replay never goes live. */
  modelCalls: number;
  /** Where the replay and the log part: a seq of the log, and how; null when identical. */
  firstDifference: { seq: number; problem: string } | null;
}

/** Replays the ended run of the log at `path`. Throws `ResumeError` when it is no ended pge run. */
export async function replayLog(path: string): Promise<ReplayReport> {
  const events = await readLogFile(path).catch((error: Error) => {
    throw new ResumeError(`cannot replay ${path}: ${error.message}`, { cause: error });
  });
  const report = { runId: events[0]?.runId ?? '', events: events.length };
  try {
    const { runId, modelCalls } = await replayEvents(events, path);
    return { ...report, runId, identical: true, modelCalls, firstDifference: null };
  } catch (error) {
    if (!(error instanceof ReplayDivergence)) throw error;
    const { seq, problem } = error;
    return { ...report, identical: false, modelCalls: 0, firstDifference: { seq, problem } };
  }
}

/** What the charts of a replayed run ended with. */
export interface ReplayedRun {
  runId: string;
  /** The run chart's outcome: the same as the run's own, since every event was produced again. */
  outcome: RunOutcome;
  /** The run's model calls, as recorded. */
  calls: readonly ModelCall[];
  /** Requests that went to a worker: 0, since the replay never goes live. */
  modelCalls: number;
}

/**
 * Runs an ended run's charts again from its recorded `events` (of a log, or of the stream), every
 * call answered from them, and returns what they ended with: how a process that did not drive a run
 * (`pge run --nats`) gets the outcome its result is built from. Throws `ResumeError` when `events`
 * are no ended pge run (`source` names them), `ReplayDivergence` when the charts part from them.
 * With `ended: false`, `events` are a run that has not ended (a fork's first events): the charts
 * go on past them, and it rejects with a `ReplayDivergence` that says so (`beyondLog`) when they
 * produced every one of them.
 */
export async function replayEvents(
  events: readonly RunEvent[],
  source: string,
  { ended = true }: { ended?: boolean } = {},
): Promise<ReplayedRun> {
  const recorded = readRecordedRun(events, source, { ended });
  const bus = new InProcessBus();
  let modelCalls = 0;
  const queues = ROLES.map((role) =>
    bus.subscribe(subjects.work(role), () => {
      modelCalls += 1;
    }),
  );
  const coordinator = createCoordinator({ bus });
  try {
    const handle = coordinator.resumeRun(recorded, {
      owner: 'pge replay',
      replayOnly: true,
      // A log written before run.started recorded its thresholds replays with the defaults.
      defaults: { defaultThresholds: {}, fallbackThreshold: OPTION_DEFAULTS.fallbackThreshold },
    });
    const outcome = await handle.done;
    return { runId: recorded.runId, outcome, calls: handle.calls, modelCalls };
  } finally {
    for (const queue of queues) queue.unsubscribe();
    coordinator.close();
    await bus.close();
  }
}
