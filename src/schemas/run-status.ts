import type { RunStopReason } from './events.js';

/**
 * The names of where a run stands, shared by the run chart (how it ended), `pge runs` and the
 * dashboard's run list (where it stands now). No Node code: the dashboard's page imports them.
 */

/** How a run ended: the run chart's final state. */
export type RunStatus = 'completed' | 'aborted' | 'stopped' | 'failed' | 'interrupted' | 'cancelled';

/** The closing event's `reason` of each way a run stops. */
export const STOP_REASON: Record<Exclude<RunStatus, 'completed'>, RunStopReason> = {
  aborted: 'aborted',
  stopped: 'budget',
  failed: 'error',
  interrupted: 'interrupted',
  cancelled: 'cancelled',
};

/**
 * Where a run stands: `running`, `waiting` at a gate, or how it ended, named as its run chart's
 * final state names it (`passed` when every step passed, else `completed`; `aborted`, `stopped` by a
 * budget, `failed` on an error, `interrupted`, `cancelled`). A stop reason the chart does not name
 * yet shows as the reason itself.
 */
export type RunListStatus = 'running' | 'waiting' | 'passed' | RunStatus | RunStopReason;

/** The status of each stop reason the run chart names (the reverse of its `STOP_REASON`). */
const STATUS_OF_REASON: ReadonlyMap<string, RunStatus> = new Map(
  Object.entries(STOP_REASON).map(([status, reason]) => [reason, status as RunStatus]),
);

/** The status a run that stopped for `reason` has: the chart's name for it, else the reason itself. */
export function stoppedStatus(reason: RunStopReason): RunListStatus {
  return STATUS_OF_REASON.get(reason) ?? reason;
}

/** Every status a run can have, for checking a filter: a stop reason added later is one too. */
export function runListStatuses(reasons: readonly RunStopReason[]): RunListStatus[] {
  return [
    ...new Set<RunListStatus>(['running', 'waiting', 'passed', 'completed', ...reasons.map(stoppedStatus)]),
  ];
}
