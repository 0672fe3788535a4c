import { describeEvent as describe, formatUsage } from '../events/describe-event.js';
import type { JudgedScore, RunEvent } from '../schemas/index.js';

/**
 * One line of text per run event, for the progress display. The words are the shared event
 * description's (`src/events/describe-event.ts`); this file adds the terminal's form (the step
 * as `step i/n`, details only when verbose) and keeps the little state the status line shows
 * (steps in the plan, current step and attempt, phase, last scores, tokens and cost so far).
 */

/** Where one step is: its attempt, phase and last scores. */
type StepView = Pick<RunState, 'attempt' | 'phase' | 'scores'>;

/**
 * What the display knows of the run in progress. `step`, `attempt`, `phase` and `scores` are those
 * of the step whose event came last; steps that run side by side each keep their own in `others`,
 * so that the status line never shows one step's scores under another's number.
 */
export interface RunState {
  startedAt: number;
  steps: number;
  step: number;
  attempt: number;
  phase: string;
  scores: readonly JudgedScore[] | null;
  tokens: number;
  costUsd: number;
  /** The view of each step other than `step` that has had an event, by step number. */
  others: Map<number, StepView>;
}

/** A described event: its line, and whether a live display keeps it above the status line. */
export interface EventLine {
  text: string;
  milestone: boolean;
}

/** The state of a run that has just started. */
export function newRunState(startedAt: number): RunState {
  return {
    startedAt,
    steps: 0,
    step: 0,
    attempt: 0,
    phase: 'starting',
    scores: null,
    tokens: 0,
    costUsd: 0,
    others: new Map(),
  };
}

/** Makes `step` the one the status line shows, keeping the view of the step it showed. */
function follow(state: RunState, step: number): void {
  if (step === state.step) return;
  const { attempt, phase, scores } = state;
  if (state.step > 0) state.others.set(state.step, { attempt, phase, scores });
  Object.assign(state, { step }, state.others.get(step) ?? { attempt: 0, phase: 'contract', scores: null });
  state.others.delete(step);
}

/** Tokens and cost so far: `12,345 tokens, $0.0123`. */
export function formatRunUsage(state: RunState): string {
  return formatUsage(state.tokens, state.costUsd);
}

/** Moves the status line's state on by one event of `step` (null: of the run). */
function advance(event: RunEvent, step: number | null, state: RunState): void {
  if (step !== null) follow(state, step);
  switch (event.type) {
    case 'plan.requested':
      state.phase = 'planning';
      return;
    case 'plan.created':
      Object.assign(state, { steps: event.payload.plan.steps.length, phase: 'plan ready' });
      return;
    case 'step.started':
      // A replan numbers its steps afresh: a step started anew has no attempt yet.
      Object.assign(state, { attempt: 0, scores: null, phase: 'contract' });
      return;
    case 'step.contract.requested':
      state.phase = `contract round ${event.payload.input.round}`;
      return;
    case 'step.review.requested':
      state.phase = 'contract review';
      return;
    case 'step.work.requested':
      Object.assign(state, { phase: 'work', attempt: event.payload.input.attempt });
      return;
    case 'step.evaluation.requested':
      state.phase = 'evaluation';
      return;
    case 'step.attempt.judged':
      state.scores = event.payload.scores;
      return;
    case 'model.call.completed':
      state.tokens += event.payload.promptTokens + event.payload.completionTokens;
      state.costUsd += event.payload.costUsd;
      return;
  }
}

/** The line for one event, or null for a detail when not `verbose`. Updates `state`. */
export function describeEvent(event: RunEvent, state: RunState, verbose: boolean): EventLine | null {
  const { step, text, level } = describe(event);
  advance(event, step, state);
  if (level === 'detail' && !verbose) return null;
  return {
    text: step === null ? text : `step ${step}/${state.steps} ${text}`,
    milestone: level === 'milestone',
  };
}
