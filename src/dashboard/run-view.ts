import type { RoleRequest, RunEvent } from '../schemas/index.js';
import { isClosingEvent, isRoleRequest, ROLE_OF_REQUEST } from '../schemas/index.js';
import { stoppedStatus } from '../schemas/run-status.js';
import { PHASES } from '../schemas/setting-values.js';
import { describeEvent } from './event-text.js';
import { addCall, foldEvent, newAttempt, noUsage, type RunViewFold } from './run-view-fold.js';
import type { ActiveStates, CallView, GateView, RunSummary, RunView, StepView } from './run-view-types.js';

/**
 * What the dashboard shows of one run, folded from its events. The page only renders this object,
 * so every rule about what an event means lives here, typed and tested, not in browser code. All
 * strings are data: the page puts them into the DOM as text, never as markup.
 */

/** The call actor each request is made by, as the charts name it. */
const ACTOR_OF_REQUEST = {
  'plan.requested': 'plan',
  'step.contract.requested': 'proposeContract',
  'step.review.requested': 'reviewContract',
  'step.work.requested': 'doWork',
  'step.evaluation.requested': 'evaluateWork',
} as const satisfies Record<RoleRequest['type'], CallView['actor']>;

/** Who makes a request: the step it is for, or the run (the plan). */
function callerOf(request: RoleRequest): string {
  return request.type === 'plan.requested' ? 'plan' : request.payload.input.step.id;
}

/**
 * The run's calls in flight, in the order they were asked: each caller's (a step's, or the
 * run's for the plan) latest request, until an event of that caller follows it (its answer, or
 * what the chart made of it), a `role.failed` or `request.cancelled` names it, or the run closes.
 * Reports of stray results and model calls recorded before their answer say nothing of it; after a
 * resume, the calls asked again are the same requests, so they stay in flight.
 */
function callsInFlight(events: readonly RunEvent[]): CallView[] {
  const open = new Map<string, RoleRequest>();
  for (const event of events) {
    if (isRoleRequest(event)) open.set(callerOf(event), event);
    else if (isClosingEvent(event)) open.clear();
    else if (event.type === 'role.failed' || event.type === 'request.cancelled') {
      for (const [caller, request] of open) if (request.id === event.payload.requestId) open.delete(caller);
    } else if (event.type === 'plan.created') open.delete('plan');
    else if ('stepId' in event.payload && event.payload.stepId !== null) open.delete(event.payload.stepId);
  }
  return [...open.values()]
    .sort((a, b) => a.seq - b.seq)
    .map((request) => ({
      actor: ACTOR_OF_REQUEST[request.type],
      role: ROLE_OF_REQUEST[request.type],
      requestId: request.id,
      since: request.ts,
      stepNumber: request.type === 'plan.requested' ? null : request.payload.input.stepNumber,
    }));
}

/** The gates a run waits at: each `approval.requested` no `approval.decided` answers, until the run closes. */
function gatesWaiting(events: readonly RunEvent[]): GateView[] {
  if (events.some(isClosingEvent)) return [];
  const decided = new Set(
    events.flatMap((e) => (e.type === 'approval.decided' ? [e.payload.requestId] : [])),
  );
  return events.flatMap((e) =>
    e.type === 'approval.requested' && !decided.has(e.id)
      ? [
          {
            gate: e.payload.gate,
            requestId: e.id,
            stepNumber: e.payload.stepNumber,
            attempt: e.payload.attempt,
            summary: e.payload.summary,
            since: e.ts,
          },
        ]
      : [],
  );
}

/**
 * Why `event` cannot be shown with `events` (a run's events so far, in seq order): it comes after
 * the run's closing event, which ends every run. Null when it can.
 */
export function afterClosingProblem(events: readonly RunEvent[], event: RunEvent): string | null {
  const closing = events.find(isClosingEvent);
  if (closing === undefined || event.seq <= closing.seq) return null;
  return `run ${event.runId}: ${event.type} (seq ${event.seq}) came after the run's closing event ${closing.type} (seq ${closing.seq}); it is not shown`;
}

/** How the events of a run find, in its view, the step and attempt they speak of. */
function foldOf(view: RunView): RunViewFold {
  // A step number names the latest run of that step: a replanned plan may reuse it.
  const stepOf = (stepNumber: number) => view.steps.findLast((s) => s.stepNumber === stepNumber);
  const attemptOf = (stepNumber: number, attempt: number) => {
    const step = stepOf(stepNumber);
    if (!step) return null;
    let found = step.attempts.find((a) => a.attempt === attempt);
    if (!found) {
      found = newAttempt(attempt);
      step.attempts.push(found);
    }
    return found;
  };
  return { view, stepOf, attemptOf };
}

/**
 * The view of a run from its events so far, in seq order, and where its charts stand after them
 * (`replayActiveStates`; null when unknown). The view ends with the run's closing event: anything
 * after it is not part of the run (`afterClosingProblem` says why).
 */
export function buildRunView(
  runId: string,
  all: readonly RunEvent[],
  active: ActiveStates | null = null,
): RunView {
  const end = all.findIndex(isClosingEvent);
  const events = end === -1 ? all : all.slice(0, end + 1);
  const view: RunView = {
    runId,
    task: null,
    job: null,
    status: 'running',
    outcome: null,
    startedAt: events[0]?.ts ?? null,
    startedBy: null,
    updatedAt: events.at(-1)?.ts ?? null,
    durationMs: null,
    models: null,
    active,
    calls: callsInFlight(events),
    plan: null,
    gates: gatesWaiting(events),
    steps: [],
    phases: PHASES.map((phase) => ({ phase, ...noUsage() })),
    totals: noUsage(),
    timeline: events.map((e) => ({ seq: e.seq, ts: e.ts, type: e.type, text: describeEvent(e) })),
  };
  const fold = foldOf(view);
  // A model call is the step's whose request it answers: its `requestId` is the request's id.
  const stepOfRequest = new Map<string, StepView>();
  for (const event of events) {
    foldEvent(fold, event);
    if (isRoleRequest(event) && event.type !== 'plan.requested') {
      const step = fold.stepOf(event.payload.input.stepNumber);
      if (step) stepOfRequest.set(event.id, step);
    } else if (event.type === 'model.call.completed') {
      const step = stepOfRequest.get(event.payload.requestId);
      if (step) addCall(step.usage, event.payload);
    }
  }
  if (view.plan) {
    for (const planStep of view.plan.steps) {
      const latest = view.steps.findLast((s) => s.stepId === planStep.id);
      planStep.status = latest?.status ?? 'pending';
    }
  }
  const first = events[0];
  const last = events.at(-1);
  if (view.durationMs === null && first && last) view.durationMs = Date.parse(last.ts) - Date.parse(first.ts);
  return view;
}

/** Where a run stands, as `pge runs` names it (`src/runtime/run-list.ts`). */
function listStatus(view: RunView): RunSummary['status'] {
  if (view.outcome === null) return view.gates.length > 0 ? 'waiting' : 'running';
  if (view.outcome.reason !== null) return stoppedStatus(view.outcome.reason);
  return view.status === 'passed' ? 'passed' : 'completed';
}

/** The run list's line for a view. */
export function summarize(view: RunView): RunSummary {
  const steps = view.plan?.steps ?? [];
  return {
    runId: view.runId,
    task: view.task,
    status: listStatus(view),
    waitingAt: view.outcome === null ? (view.gates[0]?.gate ?? null) : null,
    stepsPassed: steps.filter((s) => s.status === 'passed').length,
    stepsTotal: view.plan === null ? null : steps.length,
    costUsd: view.totals.costUsd,
    startedAt: view.startedAt,
    updatedAt: view.updatedAt,
    durationMs: view.outcome === null ? null : view.durationMs,
    events: view.timeline.length,
  };
}

/** How much a run needs a person: waiting at a gate first, then running, then ended. */
const ATTENTION: Partial<Record<RunSummary['status'], number>> = { waiting: 0, running: 1 };

/**
 * The run list in the order a person reads it: the runs waiting for a person first, then those
 * running, then the ended ones; in each, the most recently updated first.
 */
export function byAttention(a: RunSummary, b: RunSummary): number {
  return (
    (ATTENTION[a.status] ?? 2) - (ATTENTION[b.status] ?? 2) ||
    (b.updatedAt ?? '').localeCompare(a.updatedAt ?? '')
  );
}
