import type {
  ActionReply,
  CancelAction,
  DecideAction,
  ForkAction,
  StartAction,
} from '../schemas/dashboard-actions.js';
import type { ControlAbilities, RunAbilities } from './control-types.js';
import type { RunView } from './run-view-types.js';

/**
 * What `pge dashboard --control` acts through (`host-control.ts`): the coordinator service of the
 * dashboard's own embedded host, or of a deployment on NATS with a client's credential.
 * Each action names the person who took it (`by`), which the run's log records: `approval.decided`
 * names who decided, a cancelled run's `run.failed` who cancelled it. A refusal (the run waits at
 * no such gate, has ended, is not driven here) throws `ConfigurationError`, and nothing is done.
 */

/** A way to act on runs. */
export interface RunControl {
  readonly abilities: ControlAbilities;
  /** What may be done to the run shown by `view`. */
  abilitiesFor(view: RunView): RunAbilities;
  decide(action: DecideAction, by: string): Promise<ActionReply>;
  cancel(action: CancelAction, by: string): Promise<ActionReply>;
  start(action: StartAction, by: string): Promise<ActionReply>;
  fork(action: ForkAction, by: string): Promise<ActionReply>;
  /** Interrupts what it started and lets go of its connections. */
  close(): Promise<void>;
}

/** The run settings a start action sets, as options and submissions name them. */
export function startSettingsOf(action: StartAction) {
  return {
    ...(action.maxSteps === undefined ? {} : { maxSteps: action.maxSteps }),
    ...(action.maxRetriesPerStep === undefined ? {} : { maxRetriesPerStep: action.maxRetriesPerStep }),
    ...(action.maxCostUsd === undefined ? {} : { maxCostUsd: action.maxCostUsd }),
    ...(action.approve === undefined || action.approve.length === 0 ? {} : { approve: action.approve }),
  };
}

/** What a decision did, in words for the page. */
export function decidedMessage(action: DecideAction, by: string): string {
  const done = action.decision === 'approve' ? 'approved' : `rejected (${action.reason ?? 'no reason'})`;
  return `run ${action.runId}: ${action.gate} ${done} by ${by}`;
}

/** What a fork did, in words for the page: `runId` is the fork's. */
export function forkedMessage(action: ForkAction, runId: string, by: string): string {
  return `run ${runId} forked from run ${action.runId} at step ${action.fromStep} by ${by}`;
}
