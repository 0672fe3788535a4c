import { replayEvents } from '../runtime/replay-log.js';
import type { RunEvent } from '../schemas/index.js';
import { formatOutput, type OutputType, type RunOutput } from './output.js';
import { buildResult, type HarnessResult } from './result.js';

/**
 * The result of a run that another process drove (a run submitted with `pge run --nats`), from
 * its recorded events: its charts are replayed from them (`replayEvents`, nothing asked of a
 * model), and the result is built from their outcome as `run` builds `lastResult`, so the two are
 * the same object. The events must be the run's, from its first to its closing one.
 */

/** A run's result and its output, rebuilt from its events. */
export interface RecordedResult {
  result: HarnessResult;
  output: RunOutput;
}

/**
 * Builds what `run` returns and `lastResult` holds for the ended run whose `events` these are, by
 * harness `harnessId`, with `outputPath` as where its log is, formatted by `outputType`. Throws
 * `ResumeError` when the events are no ended run, `ReplayDivergence` when this pge replays them
 * otherwise (an older or newer coordinator's run).
 */
export async function recordedResult(
  harnessId: string,
  events: readonly RunEvent[],
  outputPath: string,
  outputType: OutputType,
): Promise<RecordedResult> {
  const started = events[0];
  const source = `run ${started?.runId ?? '(none)'} in the stream`;
  const { runId, outcome, calls } = await replayEvents(events, source);
  const result = buildResult(harnessId, runId, outputPath, outcome, calls, outcome.totals.durationMs);
  const task = started?.type === 'run.started' ? started.payload.task : '';
  return { result, output: await formatOutput(outputType, task, result) };
}
