import { setTimeout as sleep } from 'node:timers/promises';
import type { Bus, StoredMessages } from '../bus/bus.js';
import { publishApproval, readRunEvents } from '../bus/channels.js';
import { subjects } from '../bus/subjects.js';
import { ConfigurationError, PgeError } from '../errors.js';
import type { ApprovalDecision, ApprovalGate, RunEvent, RunEventOf } from '../schemas/index.js';
import { isClosingEvent } from '../schemas/index.js';

/**
 * Approval gates of a distributed deployment, from outside it (`pge approvals`, `pge approve`): the
 * gates runs wait at are read from the events stream (an `approval.requested` with no
 * `approval.decided`, of a run that has not ended), and a decision is a message on the run's
 * approval subject, which the coordinator driving the run applies and records.
 */

/** A gate a run waits at. */
export interface PendingApproval {
  runId: string;
  gate: ApprovalGate;
  requestId: string;
  stepNumber: number | null;
  attempt: number | null;
  summary: string;
  /** When the run started waiting. */
  since: string;
}

/**
 * The `approval.requested` among `events` (approval events of one run or of many) that no
 * `approval.decided` among them answers, in their order: a run that has not ended waits at these.
 */
export function undecidedRequests(events: readonly RunEvent[]): RunEventOf<'approval.requested'>[] {
  const decided = new Set(
    events.flatMap((e) => (e.type === 'approval.decided' ? [e.payload.requestId] : [])),
  );
  return events.filter(
    (e): e is RunEventOf<'approval.requested'> => e.type === 'approval.requested' && !decided.has(e.id),
  );
}

/** Every gate a run of the deployment waits at, oldest first. */
export async function pendingApprovals(bus: StoredMessages): Promise<PendingApproval[]> {
  const events = (await bus.stored(`${subjects.events('*').slice(0, -1)}approval.>`)) as RunEvent[];
  const pending: PendingApproval[] = [];
  for (const request of undecidedRequests(events)) {
    // A run that has ended waits at no gate (one interrupted while it waited, say).
    const runEvents = (await bus.stored(`${subjects.events(request.runId).slice(0, -1)}run.>`)) as RunEvent[];
    if (runEvents.some(isClosingEvent)) continue;
    const { gate, stepNumber, attempt, summary } = request.payload;
    pending.push({
      runId: request.runId,
      gate,
      requestId: request.id,
      stepNumber,
      attempt,
      summary,
      since: request.ts,
    });
  }
  return pending;
}

/** No coordinator applied a decision within the wait: none drives the run now. */
export class DecisionNotAppliedError extends PgeError {
  readonly retryable = true;
}

/**
 * Sends a person's decision to the gate run `runId` waits at (`gate`, or the one it waits at when
 * left out; `requestId`, when given, names the very request decided: steps side by side may wait
 * at gates of one kind at once, and a later request must not be settled by a decision on an earlier
 * one) and waits up to `timeoutMs` for the coordinator to record it; resolves with the recorded
 * `approval.decided`. Throws `ConfigurationError` when the run waits at no such gate or request.
 */
export async function decide(
  bus: Bus & StoredMessages,
  runId: string,
  gate: ApprovalGate | undefined,
  decision: ApprovalDecision,
  { timeoutMs = 10_000, requestId }: { timeoutMs?: number; requestId?: string } = {},
): Promise<RunEventOf<'approval.decided'>> {
  const waiting = (await pendingApprovals(bus)).filter((p) => p.runId === runId);
  const at = waiting.find(
    (p) => (gate === undefined || p.gate === gate) && (requestId === undefined || p.requestId === requestId),
  );
  if (at === undefined)
    throw new ConfigurationError(
      waiting.length === 0
        ? `run ${runId} waits at no gate (pge approvals lists those that do)`
        : requestId !== undefined
          ? `run ${runId} does not wait at request ${requestId} (any more): it was decided, or the run moved on`
          : `run ${runId} waits at its ${waiting[0]!.gate}, not at a ${gate}`,
    );
  await publishApproval(bus, {
    runId,
    action: decision.decision,
    gate: at.gate,
    requestId: at.requestId,
    reason: decision.reason,
    by: decision.by,
    ts: new Date().toISOString(),
  });
  return untilRecorded(
    bus,
    runId,
    (events) =>
      events.find(
        (e): e is RunEventOf<'approval.decided'> =>
          e.type === 'approval.decided' && e.payload.requestId === at.requestId,
      ),
    timeoutMs,
    () =>
      new DecisionNotAppliedError(
        `no coordinator recorded the decision for run ${runId} within ${timeoutMs} ms: is one running? (the run waits at its ${at.gate} still; decide again once one is)`,
      ),
  );
}

/**
 * What `pick` finds among run `runId`'s stored events, read again every 100 ms until it finds
 * something; after `timeoutMs` without, throws `timedOut()`. For a command that sent a run's
 * coordinator something and waits until it is recorded (a decision, a cancel).
 */
export async function untilRecorded<T>(
  bus: StoredMessages,
  runId: string,
  pick: (events: RunEvent[]) => T | undefined,
  timeoutMs: number,
  timedOut: () => Error,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const found = pick(await readRunEvents(bus, runId));
    if (found !== undefined) return found;
    if (Date.now() > deadline) throw timedOut();
    await sleep(100);
  }
}
