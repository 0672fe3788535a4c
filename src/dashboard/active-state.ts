import type { RunEvent } from '../schemas/index.js';

/**
 * Where a run's statecharts stand, read from its events alone. The dashboard has no machine to ask:
 * it follows a log or the bus, so the state each event implies is written down here, once. The ids
 * are xstate's state ids in `machineGraph(runMachine)` and `machineGraph(stepMachine)`; a test
 * checks each one against the graphs, so renaming a state in a machine fails it instead of
 * silently un-highlighting the dashboard.
 */

/** The states a run is in after its latest event: the run chart's and the current step's. */
export interface ActiveStates {
  /** The deepest active state of the run machine (`run.stepping.running`). */
  run: string;
  /** The deepest active state of the current step's machine, or null before the first step. */
  step: string | null;
  /** The plan position of the step that `step` belongs to. */
  stepNumber: number | null;
}

/** The run machine's state after each event that moves it; other events leave it where it was. */
const RUN_STATE: Partial<Record<RunEvent['type'], string>> = {
  'run.started': 'run.planning.gate',
  'plan.requested': 'run.planning.calling',
  'plan.created': 'run.stepping.next',
  'step.started': 'run.stepping.running',
  'step.passed': 'run.stepping.next',
  'step.failed': 'run.stepping.next',
  'step.plan.rejected': 'run.planning.gate',
  'run.completed': 'run.completed',
};

/** The step machine's state after each event that moves it. */
const STEP_STATE: Partial<Record<RunEvent['type'], string>> = {
  'step.started': 'step.negotiating.proposing',
  'step.contract.requested': 'step.negotiating.proposing',
  'step.contract.proposed': 'step.negotiating.reviewing',
  'step.review.requested': 'step.negotiating.reviewing',
  'step.contract.reviewed': 'step.negotiating.decided',
  'step.contract.agreed': 'step.executing.firstAttempt',
  'step.contract.imposed': 'step.executing.firstAttempt',
  // Through `step.validating`, which decides at once; a failed validator goes to `step.judging` (below).
  'step.work.completed': 'step.evaluating',
  'step.work.invalid': 'step.judging',
  'step.evaluation.requested': 'step.evaluating',
  'step.evaluation.completed': 'step.judging',
  'step.evaluation.invalid': 'step.judging',
  'step.attempt.judged': 'step.judging',
  // `step.retry.scheduled` goes to `step.executing.refining` or `.pivoting`, by its signal (below);
  // `step.work.requested` leaves the step in the executing state it is in.
  'step.passed': 'step.passed',
  'step.failed': 'step.exhausted',
  'step.plan.rejected': 'step.planRejected',
};

/** Where a run waits for a person, by gate: the plan's in the run chart, the others in the step's. */
const APPROVAL_STATE = {
  plan: { run: 'run.planning.awaitingApproval', step: null },
  contract: { run: null, step: 'step.negotiating.awaitingApproval' },
  step: { run: null, step: 'step.awaitingApproval' },
} as const;

/** Work a validator failed goes from `step.validating` to judgement, never to the evaluator. */
const VALIDATION_FAILED_STATE = 'step.judging';

/** The retry state the chart entered, named by the signal it gave the generator. */
const RETRY_STATE = { refine: 'step.executing.refining', pivot: 'step.executing.pivoting' } as const;

/** `run.failed` names its reason; each reason is a final state of the run chart. */
const FAILED_RUN_STATE = {
  aborted: 'run.aborted',
  budget: 'run.stopped',
  error: 'run.failed',
  interrupted: 'run.interrupted',
} as const;

/** A step still running when the run failed ends in the step chart's matching final state. */
const FAILED_STEP_STATE: Partial<Record<keyof typeof FAILED_RUN_STATE, string>> = {
  budget: 'step.stopped',
  error: 'step.failed',
};

/** Every state id this module can name, for the test that holds it to the machines. */
export const NAMED_STATES: readonly string[] = [
  ...new Set([
    ...Object.values(RUN_STATE),
    ...Object.values(STEP_STATE),
    ...Object.values(FAILED_RUN_STATE),
    ...Object.values(FAILED_STEP_STATE),
    ...Object.values(RETRY_STATE),
    VALIDATION_FAILED_STATE,
    ...Object.values(APPROVAL_STATE).flatMap((s) => [s.run, s.step].filter((id) => id !== null)),
  ]),
];

const isFinalStep = (state: string | null) =>
  state === 'step.passed' ||
  state === 'step.planRejected' ||
  state === 'step.exhausted' ||
  state === 'step.stopped' ||
  state === 'step.failed';

/** The step number an event is about, where it says. */
function stepNumberOf(event: RunEvent): number | null {
  const payload = event.payload as { stepNumber?: unknown; input?: { stepNumber?: unknown } };
  if (typeof payload.stepNumber === 'number') return payload.stepNumber;
  if (typeof payload.input?.stepNumber === 'number') return payload.input.stepNumber;
  return null;
}

/** Moves `states` by one event. */
export function nextActiveStates(states: ActiveStates, event: RunEvent): ActiveStates {
  if (event.type === 'run.failed') {
    const reason = event.payload.reason;
    const running = states.step !== null && !isFinalStep(states.step);
    const step = running ? (FAILED_STEP_STATE[reason] ?? states.step) : states.step;
    return { ...states, run: FAILED_RUN_STATE[reason], step };
  }
  if (event.type === 'approval.requested') {
    const waits = APPROVAL_STATE[event.payload.gate];
    return waits.run !== null
      ? { ...states, run: waits.run }
      : { ...states, step: waits.step, stepNumber: event.payload.stepNumber ?? states.stepNumber };
  }
  const run = RUN_STATE[event.type] ?? states.run;
  const step =
    event.type === 'step.retry.scheduled'
      ? RETRY_STATE[event.payload.signal]
      : event.type === 'step.work.completed' && event.payload.validation?.some((v) => !v.passed)
        ? VALIDATION_FAILED_STATE
        : STEP_STATE[event.type];
  if (step === undefined) return { ...states, run };
  return { run, step, stepNumber: stepNumberOf(event) ?? states.stepNumber };
}

/**
 * The active states after a sequence of events. A run seen from the middle (a dashboard that
 * joined the bus late) starts from its first event seen, so the picture is right from the next
 * state-changing event on.
 */
export function activeStates(events: readonly RunEvent[]): ActiveStates {
  let states: ActiveStates = { run: 'run.planning.gate', step: null, stepNumber: null };
  for (const event of events) states = nextActiveStates(states, event);
  return states;
}
