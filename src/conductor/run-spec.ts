import type { RoleResult, RunEventOf, RunSettings } from '../schemas/index.js';
import type { RecordedRun } from './replay.js';

/**
 * What a run is started or resumed with: what its `run.started` records (`RunSpec`), made from
 * options (`runSettingsOf` in src/schemas) or read back from its log (`resumedSpec`), and how a
 * resume goes on (`ResumeOptions`). The coordinator takes them, and the session and recorder read
 * them: they live apart from all three so that none has to import another for its input.
 */

/**
 * A run to start: its id, and what its `run.started` records (its task, its log, its settings
 * whole, who started it, the job and the run it carries on); the coordinator adds the trace context.
 */
export type RunSpec = { runId: string } & Omit<RunEventOf<'run.started'>['payload'], 'traceparent'>;

/** Options of a coordinator's `resumeRun`. */
export interface ResumeOptions {
  /** Who continues the run, for `run.resumed`: `<host>:<pid>` of an embedded process, a coordinator's id. */
  owner: string;
  /** The log the run continues in, if not the one its `run.started` names (the file was moved). */
  logPath?: string;
  /**
   * Queue again the request in flight at the crash (default true). An embedded run's queue died
   * with its process; a coordinator taking a run over on NATS may find the request still queued.
   */
  resend?: boolean;
  /** Bytes of a torn last write removed from the log before it was continued, for `run.resumed`. */
  discardedBytes?: number;
  /** Thresholds for a log whose `run.started` does not record them (written before they were recorded). */
  defaults?: Pick<RunSettings, 'defaultThresholds' | 'fallbackThreshold'>;
  /**
   * The result a worker already stored for a request, if any (NATS: `PGE_RESULTS`). The request in
   * flight when the run's last owner died may have been answered after it died: that answer is
   * applied, and no model is asked again.
   */
  storedResult?: (requestId: string) => Promise<RoleResult | null>;
  /**
   * Replays the recorded events and never goes live (`pge replay`): where the charts go on past
   * the log, or make a request the log does not answer, the run ends and `done` rejects with a
   * `ReplayDivergence`. Nothing is asked of a worker.
   */
  replayOnly?: boolean;
}

/** A resumed run: what its `run.started` recorded, in the log it continues in. */
export function resumedSpec({ runId, started }: RecordedRun, options: ResumeOptions): RunSpec {
  const { traceparent: _, ...recorded } = started.payload;
  return {
    runId,
    ...recorded,
    logPath: options.logPath ?? recorded.logPath,
    // A log that does not record its thresholds takes the resuming options'.
    settings: { ...options.defaults, ...recorded.settings },
  };
}
