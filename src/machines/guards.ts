import type {
  Budgets,
  Criterion,
  CriterionWeight,
  Evaluation,
  ExhaustionPolicy,
  JudgedScore,
  ResolvedCriterion,
  RunSettings,
  Usage,
  Verdict,
} from '../schemas/index.js';

/**
 * The pure decisions of the step lifecycle. The statecharts name them as guards (and build their
 * records with the scoring); they take plain data and return plain data, so each is unit-tested on
 * its own.
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

/** The settings a rubric is resolved by: a fixed rubric (null or absent: none), and the thresholds of open criteria. */
export type RubricSettings = Partial<Pick<RunSettings, 'defaultThresholds' | 'fallbackThreshold'>> & {
  criteria?: readonly Criterion[] | null | undefined;
};

/**
 * The rubric a run judges a plan by: its fixed rubric, else the plan's criteria, thresholds resolved
 * by the run's settings (none by name and the fallback when its log does not record them).
 */
export function rubricOf(settings: RubricSettings, planCriteria: readonly Criterion[]): ResolvedCriterion[] {
  return resolveCriteria(
    settings.criteria ?? planCriteria,
    settings.defaultThresholds ?? {},
    settings.fallbackThreshold,
  );
}

/** An attempt scored against the rubric: one entry per criterion, and the weighted mean. */
export interface Scoring {
  scores: JudgedScore[];
  weightedMean: number | null;
}

/**
 * Scores an attempt against the rubric: each criterion gets the evaluator's score, or null when
 * the evaluation gave none (or there is no evaluation), beside the threshold the harness resolved.
 * The verdict is the chart's: `allCriteriaPass` over these scores (DESIGN 3).
 */
export function scoreAttempt(criteria: readonly ResolvedCriterion[], evaluation: Evaluation | null): Scoring {
  const byName = new Map(evaluation?.scores.map((s) => [s.criterion, s.score]) ?? []);
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
  return { scores, weightedMean: evaluation ? weightedMeanOf(scores) : null };
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

/**
 * Guard data for an exhausted step: the policy that applies to it. `replan` holds only while a
 * replan is left (`maxReplans`); after that the step is treated as under `advance`. The run's
 * `policyIs…` guards and the step's recorded `policy` both read it, so they cannot disagree.
 */
export function exhaustionPolicy(policy: ExhaustionPolicy, replansLeft: number): ExhaustionPolicy {
  return policy === 'replan' && replansLeft <= 0 ? 'advance' : policy;
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
 * Guard: fewer than two attempts have scores, so there is no trajectory to follow (always so at
 * the first retry; also after attempts whose work or evaluation was invalid). The generator refines.
 */
export function noTrajectoryYet(means: readonly (number | null)[]): boolean {
  return means.filter((m) => m !== null).length < 2;
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
  attempts: readonly { verdict: Verdict; weightedMean: number | null; hasWork: boolean }[],
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

/** `budgetExceeded` for a run's budget state: its limits, its spend, and the time since it started. */
export function budgetBroken(state: {
  budgets: Budgets;
  spent: Usage;
  startedAt: number;
  clock: number;
}): BudgetName | null {
  return budgetExceeded(state.budgets, state.spent, state.clock - state.startedAt);
}
