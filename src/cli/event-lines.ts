import type { JudgedScore, RunEvent } from '../schemas/index.js';

/**
 * One line of text per run event, for the progress display: what a person watching a run wants to
 * know of each event, with scores shown against their thresholds. Pure functions of the event and
 * the little state they keep (steps in the plan, current step and attempt, tokens and cost so far).
 */

/** What the display knows of the run in progress. */
export interface RunState {
  startedAt: number;
  steps: number;
  step: number;
  attempt: number;
  phase: string;
  scores: readonly JudgedScore[] | null;
  tokens: number;
  costUsd: number;
}

/** A described event: its line, and whether a live display keeps it above the status line. */
export interface EventLine {
  text: string;
  milestone: boolean;
}

/** The state of a run that has just started. */
export function newRunState(startedAt: number): RunState {
  return { startedAt, steps: 0, step: 0, attempt: 0, phase: 'starting', scores: null, tokens: 0, costUsd: 0 };
}

const mean = (value: number | null): string => (value === null ? '-' : value.toFixed(2));
const plural = (n: number, word: string): string => `${n} ${word}${n === 1 ? '' : 's'}`;

/** Scores against thresholds: `accuracy 5/7 ✗, clarity 8/7 ✓`. */
export function formatScores(scores: readonly JudgedScore[]): string {
  return scores
    .map((s) => `${s.criterion} ${s.score ?? '-'}/${s.threshold} ${s.passed ? '✓' : '✗'}`)
    .join(', ');
}

/** Tokens and cost so far: `12,345 tokens, $0.0123`. */
export function formatUsage(state: RunState): string {
  return `${state.tokens.toLocaleString('en-US')} tokens, $${state.costUsd.toFixed(4)}`;
}

/** The line for one event, or null for an event only `verbose` shows. Updates `state`. */
export function describeEvent(event: RunEvent, state: RunState, verbose: boolean): EventLine | null {
  const at = 'stepNumber' in event.payload ? `step ${event.payload.stepNumber}/${state.steps}` : '';
  const line = (text: string, milestone = false): EventLine => ({ text, milestone });
  const detail = (text: string): EventLine | null => (verbose ? line(text) : null);
  switch (event.type) {
    case 'run.started':
      return line(`run ${event.runId} started; log: ${event.payload.logPath}`, true);
    case 'plan.requested':
      state.phase = 'planning';
      return detail('planner: plan requested');
    case 'plan.created': {
      const { plan, criteria, replan } = event.payload;
      Object.assign(state, { steps: plan.steps.length, phase: 'plan ready' });
      const rubric = criteria.map((c) => `${c.name} >= ${c.threshold}`).join(', ');
      const head = replan > 0 ? `plan revised (replan ${replan})` : 'plan created';
      return line(`${head}: ${plural(plan.steps.length, 'step')}; thresholds: ${rubric}`, true);
    }
    case 'plan.truncated':
      return line(`plan cut from ${event.payload.from} to ${event.payload.to} steps (maxSteps)`, true);
    case 'step.started':
      Object.assign(state, { step: event.payload.stepNumber, attempt: 0, scores: null, phase: 'contract' });
      return line(`${at} started: ${event.payload.title}`);
    case 'step.contract.requested':
      state.phase = `contract round ${event.payload.input.round}`;
      return detail(`generator: contract proposal requested (round ${event.payload.input.round})`);
    case 'step.review.requested':
      state.phase = 'contract review';
      return detail('evaluator: contract review requested');
    case 'step.contract.proposed':
      return detail(`${at} contract proposed (round ${event.payload.round})`);
    case 'step.contract.reviewed': {
      const { round, review } = event.payload;
      if (review.status === 'approved') return detail(`${at} contract approved (round ${round})`);
      return line(
        `${at} contract round ${round}: ${plural(review.amendments.length, 'amendment')} requested`,
      );
    }
    case 'step.contract.agreed':
      return line(`${at} contract agreed (${plural(event.payload.contract.rounds, 'round')})`);
    case 'step.contract.imposed': {
      const { contract, outstandingAmendments } = event.payload;
      const left = plural(outstandingAmendments.length, 'amendment');
      return line(`${at} contract imposed after ${plural(contract.rounds, 'round')} (${left} added)`, true);
    }
    case 'step.work.requested':
      Object.assign(state, { phase: 'work', attempt: event.payload.input.attempt });
      return detail(`generator: work requested (attempt ${event.payload.input.attempt})`);
    case 'step.work.completed':
      return detail(`${at} attempt ${event.payload.attempt}: work delivered`);
    case 'step.work.invalid':
      return line(`${at} attempt ${event.payload.attempt}: invalid work: ${event.payload.problem}`, true);
    case 'step.evaluation.requested':
      state.phase = 'evaluation';
      return detail(`evaluator: evaluation requested (attempt ${event.payload.input.attempt})`);
    case 'step.evaluation.completed':
      return detail(`${at} attempt ${event.payload.attempt}: evaluation received`);
    case 'step.evaluation.invalid':
      return line(
        `${at} attempt ${event.payload.attempt}: invalid evaluation: ${event.payload.problem}`,
        true,
      );
    case 'step.attempt.judged': {
      const { attempt, verdict, reason, scores, weightedMean } = event.payload;
      state.scores = scores;
      const how = verdict === 'pass' ? 'passed' : `failed (${reason.replaceAll('_', ' ')})`;
      return line(`${at} attempt ${attempt} ${how}: ${formatScores(scores)}; mean ${mean(weightedMean)}`);
    }
    case 'step.retry.scheduled': {
      const { nextAttempt, signal, previousMean, lastMean } = event.payload;
      const trend =
        previousMean === null
          ? `mean ${mean(lastMean)}`
          : `mean ${mean(previousMean)} -> ${mean(lastMean)}, ${signal === 'refine' ? 'improving' : 'not improving'}`;
      return line(`${at} retry: attempt ${nextAttempt} will ${signal} (${trend})`);
    }
    case 'step.passed':
      return line(`${at} passed on attempt ${event.payload.attempt}`, true);
    case 'step.failed': {
      const { attempts, bestAttempt, policy } = event.payload;
      const best = bestAttempt === null ? 'no usable attempt' : `keeps attempt ${bestAttempt}`;
      return line(
        `${at} failed after ${plural(attempts, 'attempt')} (${best}); on exhausted: ${policy}`,
        true,
      );
    }
    case 'model.call.completed': {
      const c = event.payload;
      state.tokens += c.promptTokens + c.completionTokens;
      state.costUsd += c.costUsd;
      const tokens = `${c.promptTokens} in + ${c.completionTokens} out tokens`;
      return detail(
        `model call: ${c.role} ${c.phase} (${c.model}) ${tokens}, $${c.costUsd.toFixed(4)}, ${Math.round(c.latencyMs)} ms`,
      );
    }
    case 'role.failed': {
      const { role, phase, error } = event.payload;
      return line(`${role} failed (${phase}): ${error.name}: ${error.message}`, true);
    }
    case 'request.cancelled':
      return detail(
        `request ${event.payload.requestId} (${event.payload.phase}) cancelled: ${event.payload.reason}`,
      );
    case 'result.rejected':
      return line(
        `${event.payload.reason} result for ${event.payload.requestId} from ${event.payload.worker} ignored`,
        true,
      );
    case 'run.completed': {
      const p = event.payload;
      const head = p.passed ? 'run passed' : 'run finished with failed steps';
      return line(
        `${head}: ${p.stepsPassed}/${p.stepsTotal} steps passed, ${p.totalRetries} ${p.totalRetries === 1 ? 'retry' : 'retries'}, ${formatUsage(state)}, ${(p.durationMs / 1000).toFixed(1)}s`,
        true,
      );
    }
    case 'run.failed': {
      const p = event.payload;
      return line(
        `run stopped (${p.reason}): ${p.message}; ${p.stepsPassed}/${p.stepsTotal} steps passed, ${formatUsage(state)}`,
        true,
      );
    }
  }
}
