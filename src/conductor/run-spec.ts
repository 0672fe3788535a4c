import type { RunInput } from '../machines/run-machine.js';
import type { ApprovalTimeoutPolicy, RoleResult, RunActing, RunJob } from '../schemas/index.js';
import { OPTION_DEFAULTS } from '../schemas/index.js';
import type { RecordedRun } from './replay.js';

/**
 * What a run is started or resumed with: its settings (`RunSpec`), made from the API's options
 * (`runSettingsOf`) or read back from its log (`resumedSpec`), and how a resume goes on
 * (`ResumeOptions`). The coordinator takes them, and the session and recorder read them: they
 * live apart from all three so that none has to import another for its input.
 */
/** Settings of one run, as the API resolves them. */
export interface RunSpec extends Omit<RunInput, 'startedAt'> {
  runId: string;
  models: { planner: string; generator: string; evaluator: string };
  /** Milliseconds each call may take, from its request to its result, before it fails (`RunSettings`). */
  callTimeoutMs: number;
  /** How long a gate waits for a person, and what its deadline does; null: as long as it takes. */
  approvalDeadline: { timeoutMs: number; policy: ApprovalTimeoutPolicy } | null;
  /** The acting roles' tools, validators and workspace, when this process holds the workers (`run.started`'s `acting`). */
  acting?: RunActing;
  /** The job the run belongs to when it carries one on (`pge continue`); absent: a job of its own. */
  job?: RunJob;
  /** Who started the run, when a person did it by name (`run.started`'s `startedBy`). */
  startedBy?: string;
}

/** The options a run's settings are taken from (a subset of the API's resolved options). */
export type RunSettingsSource = Pick<
  RunInput,
  | 'maxSteps'
  | 'maxRetriesPerStep'
  | 'maxContractRounds'
  | 'onStepExhausted'
  | 'maxReplans'
  | 'maxParallelSteps'
  | 'defaultThresholds'
  | 'fallbackThreshold'
> & {
  criteria?: RunInput['criteria'] | undefined;
  approve?: RunInput['approve'] | undefined;
  plan?: RunInput['plan'] | undefined;
  maxCostUsd?: number | undefined;
  maxTokens?: number | undefined;
  maxDurationMs?: number | undefined;
  callTimeoutMs: number;
  approvalTimeoutMs?: number | null | undefined;
  onApprovalTimeout?: ApprovalTimeoutPolicy | undefined;
};

/** A run's settings from options: the harness bounds and the budgets (`null` is no limit). */
export function runSettingsOf(o: RunSettingsSource): Omit<RunSpec, 'runId' | 'task' | 'logPath' | 'models'> {
  return {
    maxSteps: o.maxSteps,
    maxRetriesPerStep: o.maxRetriesPerStep,
    maxContractRounds: o.maxContractRounds,
    onStepExhausted: o.onStepExhausted,
    maxReplans: o.maxReplans,
    maxParallelSteps: o.maxParallelSteps,
    defaultThresholds: o.defaultThresholds,
    fallbackThreshold: o.fallbackThreshold,
    criteria: o.criteria ?? null,
    approve: o.approve ?? [],
    plan: o.plan ?? null,
    continues: null,
    budgets: {
      maxCostUsd: o.maxCostUsd ?? null,
      maxTokens: o.maxTokens ?? null,
      maxDurationMs: o.maxDurationMs ?? null,
    },
    callTimeoutMs: o.callTimeoutMs,
    approvalDeadline:
      o.approvalTimeoutMs === undefined || o.approvalTimeoutMs === null
        ? null
        : { timeoutMs: o.approvalTimeoutMs, policy: o.onApprovalTimeout ?? 'stop' },
  };
}

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
  defaults?: Pick<RunSpec, 'defaultThresholds' | 'fallbackThreshold'>;
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

/** The settings of a resumed run: those its `run.started` recorded. */
export function resumedSpec({ runId, started }: RecordedRun, options: ResumeOptions): RunSpec {
  const { task, logPath, settings } = started.payload;
  const {
    models,
    defaultThresholds,
    fallbackThreshold,
    criteria,
    approve,
    approvalDeadline,
    maxParallelSteps,
    plan,
    ...rest
  } = settings;
  const { job, continues } = started.payload;
  return {
    runId,
    task,
    logPath: options.logPath ?? logPath,
    ...rest,
    plan: plan ?? null,
    continues: continues ?? null,
    ...(job === undefined ? {} : { job }),
    criteria: criteria ?? null,
    approve: approve ?? [],
    approvalDeadline: approvalDeadline ?? null,
    // A log written before steps could run side by side ran them one at a time.
    maxParallelSteps: maxParallelSteps ?? 1,
    defaultThresholds: defaultThresholds ?? options.defaults?.defaultThresholds ?? {},
    fallbackThreshold:
      fallbackThreshold ?? options.defaults?.fallbackThreshold ?? OPTION_DEFAULTS.fallbackThreshold,
    models,
  };
}
