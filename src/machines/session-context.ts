import type { ApprovalDecision, ApprovalGate } from '../schemas/index.js';
import type { RunInput, RunOutcome, RunStopEvent } from './run-context.js';

/**
 * The data of the session chart (`session-machine.ts`): what it is started with, what it keeps,
 * the events the coordinator sends it and the output its final states give.
 */

/** What a session is started with: the run chart's input, whose settings hold the gates' deadline. */
export interface SessionInput {
  runId: string;
  /** The run chart's input. */
  run: RunInput;
  /** True for a resumed run: its recorded events are replayed before it goes live. */
  replaying: boolean;
}

/** A gate a session waits at: its request, and when it was recorded (epoch ms). */
export interface OpenGate {
  gate: ApprovalGate;
  requestId: string;
  /** The time of the gate's `approval.requested` (a resumed gate: the recorded one): its deadline is `requestedAt + timeoutMs`. */
  requestedAt: number;
}

/** The session's context. */
export interface SessionContext extends SessionInput {
  /** The gates the session waits at, oldest first, while `live.awaitingDecision` (steps side by side may each wait at one). */
  gates: OpenGate[];
  /** When the session last entered `live.awaitingDecision` (epoch ms, from the event that led there): the deadline counts from it. */
  since: number;
  /** Why the session ended without the run's outcome. */
  error: unknown;
  outcome: RunOutcome | null;
}

/** How a session ended: the run's outcome, or the error that ended it (taken over, diverged, failed). */
export type SessionOutput =
  | { outcome: RunOutcome; error?: undefined }
  | { outcome?: undefined; error: unknown };

/** The events a session takes: from the coordinator, its gates and a person. */
export type SessionEvent =
  /** Stop the run (`interrupt`, or a person's `cancel`): forwarded to the run chart, which records its closing event. */
  | RunStopEvent
  /** The replay handed out the last recorded event; `run.resumed` is recorded. */
  | { type: 'replay.ended' }
  /** The replay and its log disagree (a `ResumeError`): nothing more is recorded. */
  | { type: 'diverged'; error: unknown }
  /** A gate's `approval.requested` was recorded: a person is waited for. */
  | { type: 'approval.requested'; gate: ApprovalGate; requestId: string; requestedAt: number; now: number }
  /**
   * A person's decision at a gate of kind `gate` (the oldest, or the one of `requestId` when
   * given); `now` is when it came.
   */
  | { type: 'decide'; gate: ApprovalGate; decision: ApprovalDecision; requestId?: string; now: number }
  /** The gate's actor was stopped before a decision came (the run was interrupted); at `now`. */
  | { type: 'approval.left'; requestId: string; now: number }
  /** The run was taken over by `owner` (a lost lease, or another coordinator's event of a seq). */
  | { type: 'abandon'; owner: string; error: Error }
  /** An event or work item of the run could not be published: the run is stopped. */
  | { type: 'publish.failed'; error: unknown };

/** The interrupt a failed publish sends the run, its reason naming the failure. */
export function publishFailedInterrupt(error: unknown): { type: 'interrupt'; reason: string } {
  return { type: 'interrupt', reason: `its events could not be published: ${String(error)}` };
}

/** The gate whose deadline comes first: the oldest. */
export function dueGate(context: SessionContext): OpenGate {
  return context.gates[0]!;
}

/** Milliseconds from `since` until the first open gate's deadline. */
export function approvalDelay(context: SessionContext): number {
  const { gates } = context;
  const { approvalDeadline } = context.run;
  if (gates.length === 0 || approvalDeadline === undefined) return 0;
  return Math.max(0, dueGate(context).requestedAt + approvalDeadline.timeoutMs - context.since);
}

/** The open gate a decision is for: the oldest of its kind, or the one of its request. */
export function fittingGate(
  context: SessionContext,
  event: { gate: ApprovalGate; requestId?: string | undefined },
): OpenGate | undefined {
  return context.gates.find(
    (g) => g.gate === event.gate && (event.requestId === undefined || event.requestId === g.requestId),
  );
}

/** The open gates without the one of `requestId`. */
export function withoutGate(context: SessionContext, requestId: string): OpenGate[] {
  return context.gates.filter((g) => g.requestId !== requestId);
}

/** The words of a gate's deadline: `no decision within <ms> ms`. */
export function noDecisionWithin(context: SessionContext): string {
  return `no decision within ${context.run.approvalDeadline?.timeoutMs} ms`;
}
