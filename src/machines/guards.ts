import type {
  AttemptReason,
  Budgets,
  Criterion,
  CriterionWeight,
  ErrorInfo,
  Evaluation,
  JudgedScore,
  ResolvedCriterion,
  RetrySignal,
  Usage,
} from '../schemas/index.js';

/**
 * The pure decisions of the step lifecycle. The statecharts call these as guards and in assign
 * actions; they take plain data and return plain data, so each is unit-tested on its own.
 */

/** Numeric value of each criterion weight in the weighted mean. */
export const WEIGHT_VALUE: Readonly<Record<CriterionWeight, number>> = { high: 2, standard: 1, low: 0.5 };

/** The fallback threshold when neither the plan nor `defaultThresholds` sets one (DESIGN 2). */
export const FALLBACK_THRESHOLD = 6;

/**
 * The harness owns thresholds: the plan's threshold for a criterion, else `defaultThresholds`
 * (keys normalised like criterion names), else `fallback`.
 */
export function resolveCriteria(
  criteria: readonly Criterion[],
  defaultThresholds: Readonly<Record<string, number>>,
  fallback: number = FALLBACK_THRESHOLD,
): ResolvedCriterion[] {
  const defaults = new Map(Object.entries(defaultThresholds).map(([k, v]) => [k.trim().toLowerCase(), v]));
  return criteria.map((c) => ({ ...c, threshold: c.threshold ?? defaults.get(c.name) ?? fallback }));
}

/** An attempt as the judge sees it: either an evaluation, or the reason there is none. */
export interface JudgeInput {
  evaluation: Evaluation | null;
  invalid: 'invalid_evaluation' | 'invalid_work' | null;
}

/** The verdict on one attempt. */
export interface Judgement {
  verdict: 'pass' | 'fail';
  reason: AttemptReason;
  scores: JudgedScore[];
  weightedMean: number | null;
}

/**
 * Judges an attempt against the rubric, failing closed (DESIGN 3): it passes only when every
 * criterion has a score and every score is at least its threshold. A missing score counts as failed.
 */
export function judgeAttempt(criteria: readonly ResolvedCriterion[], attempt: JudgeInput): Judgement {
  const byName = new Map(attempt.evaluation?.scores.map((s) => [s.criterion, s.score]) ?? []);
  const scores: JudgedScore[] = criteria.map((c) => {
    const score = byName.get(c.name) ?? null;
    return {
      criterion: c.name,
      weight: c.weight,
      score,
      threshold: c.threshold,
      passed: score !== null && score >= c.threshold,
    };
  });
  const weightedMean = attempt.evaluation ? weightedMeanOf(scores) : null;
  if (attempt.invalid) return { verdict: 'fail', reason: attempt.invalid, scores, weightedMean };
  return allCriteriaPass(scores)
    ? { verdict: 'pass', reason: 'all_criteria_pass', scores, weightedMean }
    : { verdict: 'fail', reason: 'below_threshold', scores, weightedMean };
}

/** Guard: every criterion was scored and met its threshold. An empty rubric never passes. */
export function allCriteriaPass(scores: readonly JudgedScore[]): boolean {
  return scores.length > 0 && scores.every((s) => s.score !== null && s.score >= s.threshold);
}

/** Weight-averaged score; null when some criterion has no score. */
export function weightedMeanOf(scores: readonly JudgedScore[]): number | null {
  let sum = 0;
  let weights = 0;
  for (const s of scores) {
    if (s.score === null) return null;
    sum += s.score * WEIGHT_VALUE[s.weight];
    weights += WEIGHT_VALUE[s.weight];
  }
  return weights === 0 ? null : sum / weights;
}

/** Guard: attempt `attempt` (1-based) may be followed by another (at most `maxRetriesPerStep + 1`). */
export function retriesLeft(attempt: number, maxRetriesPerStep: number): boolean {
  return attempt < maxRetriesPerStep + 1;
}

/**
 * Guard: the weighted mean rose from the previous scored attempt to the last one. Attempts
 * without scores (invalid work or evaluation) are skipped: they say nothing about the direction.
 */
export function scoresImproving(means: readonly (number | null)[]): boolean {
  const scored = means.filter((m): m is number => m !== null);
  if (scored.length < 2) return false;
  return scored[scored.length - 1]! > scored[scored.length - 2]!;
}

/**
 * The signal for the retry that follows `failedAttempts` (DESIGN 5): the first retry refines;
 * later ones refine while the weighted mean rises and pivot when it is flat or falling. With
 * fewer than two scored attempts there is no trajectory yet, so the generator refines.
 */
export function retrySignal(means: readonly (number | null)[]): RetrySignal {
  if (means.length <= 1) return 'refine';
  const scored = means.filter((m) => m !== null).length;
  if (scored < 2) return 'refine';
  return scoresImproving(means) ? 'refine' : 'pivot';
}

/** The previous and last scored means, for the retry event. */
export function lastTwoMeans(means: readonly (number | null)[]): {
  previousMean: number | null;
  lastMean: number | null;
} {
  const scored = means.filter((m): m is number => m !== null);
  return { previousMean: scored.at(-2) ?? null, lastMean: scored.at(-1) ?? null };
}

/**
 * Index of the best attempt: a passing one if any, else the highest weighted mean (the later on
 * a tie, as it carries more feedback), else the last attempt that produced work; -1 when none did.
 */
export function bestAttemptIndex(
  attempts: readonly { verdict: 'pass' | 'fail'; weightedMean: number | null; hasWork: boolean }[],
): number {
  const passed = attempts.findIndex((a) => a.verdict === 'pass');
  if (passed >= 0) return passed;
  let best = -1;
  let bestMean = Number.NEGATIVE_INFINITY;
  attempts.forEach((a, i) => {
    if (a.weightedMean !== null && a.weightedMean >= bestMean) {
      best = i;
      bestMean = a.weightedMean;
    }
  });
  if (best >= 0) return best;
  for (let i = attempts.length - 1; i >= 0; i--) if (attempts[i]!.hasWork) return i;
  return -1;
}

/** Which budget, if any, the next model call would break. */
export type BudgetName = 'maxCostUsd' | 'maxTokens' | 'maxDurationMs';

/**
 * Guard data for budgets (DESIGN 9): before a call, the spend so far plus an estimate of the next
 * call (the mean of the calls so far) must stay within each limit; elapsed time must be below its
 * limit. Returns the first budget that would be broken, or null.
 */
export function budgetExceeded(budgets: Budgets, spent: Usage, elapsedMs: number): BudgetName | null {
  const perCall = spent.calls > 0 ? 1 / spent.calls : 0;
  if (budgets.maxCostUsd !== null && spent.costUsd + spent.costUsd * perCall > budgets.maxCostUsd)
    return 'maxCostUsd';
  const tokens = spent.promptTokens + spent.completionTokens;
  if (budgets.maxTokens !== null && tokens + tokens * perCall > budgets.maxTokens) return 'maxTokens';
  if (budgets.maxDurationMs !== null && elapsedMs >= budgets.maxDurationMs) return 'maxDurationMs';
  return null;
}

/**
 * An actor's failure as the machines keep it. Errors cross from actors as thrown values; pge's own
 * carry `retryable`, anything else is taken as not retryable.
 */
export function toErrorInfo(error: unknown): ErrorInfo {
  if (error && typeof error === 'object' && 'message' in error) {
    const e = error as { name?: unknown; message: unknown; retryable?: unknown };
    return { name: String(e.name ?? 'Error'), message: String(e.message), retryable: e.retryable === true };
  }
  return { name: 'Error', message: String(error), retryable: false };
}

/** `budgetExceeded` for a run's budget state: its limits, its spend, and the time since it started. */
export function budgetBroken(state: {
  budgets: Budgets;
  spent: Usage;
  startedAt: number;
  clock: number;
}): BudgetName | null {
  return budgetExceeded(state.budgets, state.spent, state.clock - state.startedAt);
}
