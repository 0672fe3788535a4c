import { describe, expect, it } from 'vitest';
import {
  allCriteriaPass,
  bestAttemptIndex,
  budgetExceeded,
  exhaustionPolicy,
  noTrajectoryYet,
  resolveCriteria,
  retriesLeft,
  scoreAttempt,
  scoresImproving,
  weightedMeanOf,
} from '../../src/machines/guards.js';
import { runMachine } from '../../src/machines/run-machine.js';
import { stepMachine } from '../../src/machines/step-machine.js';
import type { EvaluateOutput } from '../../src/machines/types.js';
import type { JudgedScore, ResolvedCriterion } from '../../src/schemas/index.js';
import { scored } from '../support/chart-fixtures.js';

const criteria: ResolvedCriterion[] = [
  { name: 'accuracy', weight: 'high', description: '', threshold: 7 },
  { name: 'clarity', weight: 'low', description: '', threshold: 6 },
];

const js = (
  score: number | null,
  threshold = 6,
  weight: JudgedScore['weight'] = 'standard',
): JudgedScore => ({
  criterion: 'c',
  weight,
  score,
  threshold,
  passed: score !== null && score >= threshold,
});

describe('resolveCriteria', () => {
  it('takes the plan threshold, else defaultThresholds (normalised keys), else the fallback', () => {
    const resolved = resolveCriteria(
      [
        { name: 'accuracy', weight: 'high', description: '', threshold: 8 },
        { name: 'clarity', weight: 'standard', description: '', threshold: null },
        { name: 'depth', weight: 'low', description: '', threshold: null },
      ],
      { ' Clarity ': 5, accuracy: 3 },
      6,
    );
    expect(resolved.map((c) => c.threshold)).toEqual([8, 5, 6]);
  });
});

describe('allCriteriaPass', () => {
  it('needs every score present and at or above its threshold', () => {
    expect(allCriteriaPass([js(6), js(9)])).toBe(true);
    expect(allCriteriaPass([js(5.9), js(9)])).toBe(false);
    expect(allCriteriaPass([js(null), js(9)])).toBe(false);
    expect(allCriteriaPass([])).toBe(false);
  });
});

describe('scoreAttempt', () => {
  it('scores a missing criterion as null, which fails closed even if the rest pass', () => {
    const evaluation = scored(9, 9);
    evaluation.scores = evaluation.scores.filter((s) => s.criterion !== 'clarity');
    const s = scoreAttempt(criteria, evaluation);
    expect(s.scores.map((x) => x.score)).toEqual([9, null]);
    expect(allCriteriaPass(s.scores)).toBe(false);
    expect(s.weightedMean).toBeNull();
  });
  it('uses the harness threshold, not anything the evaluator says', () => {
    expect(allCriteriaPass(scoreAttempt(criteria, scored(6.5, 9)).scores)).toBe(false);
    expect(allCriteriaPass(scoreAttempt(criteria, scored(7, 6)).scores)).toBe(true);
  });
  it('an attempt without an evaluation has no scores, so it never passes', () => {
    const s = scoreAttempt(criteria, null);
    expect(s.scores.map((x) => x.score)).toEqual([null, null]);
    expect(allCriteriaPass(s.scores)).toBe(false);
    expect(s.weightedMean).toBeNull();
  });
  it('weights high 2, standard 1, low 0.5', () => {
    expect(scoreAttempt(criteria, scored(8, 5)).weightedMean).toBeCloseTo((8 * 2 + 5 * 0.5) / 2.5);
    expect(weightedMeanOf([js(4, 1, 'high'), js(10, 1, 'standard')])).toBe(6);
  });
});

describe('retriesLeft', () => {
  it('allows maxRetriesPerStep + 1 attempts in all', () => {
    expect(retriesLeft(1, 0)).toBe(false);
    expect(retriesLeft(1, 3)).toBe(true);
    expect(retriesLeft(3, 3)).toBe(true);
    expect(retriesLeft(4, 3)).toBe(false);
  });
});

describe('scoresImproving and noTrajectoryYet', () => {
  it('compares the last two scored means', () => {
    expect(scoresImproving([5, 6])).toBe(true);
    expect(scoresImproving([6, 6])).toBe(false);
    expect(scoresImproving([6, 5])).toBe(false);
    expect(scoresImproving([5, null, 6])).toBe(true);
    expect(scoresImproving([5])).toBe(false);
  });
  it('has no trajectory before two scored attempts (so the first retry refines)', () => {
    expect(noTrajectoryYet([9])).toBe(true);
    expect(noTrajectoryYet([null, 5])).toBe(true);
    expect(noTrajectoryYet([4, 5])).toBe(false);
    expect(noTrajectoryYet([5, null, 4])).toBe(false);
  });
});

describe('bestAttemptIndex', () => {
  it('prefers a pass, then the highest mean (later on ties), then the last work', () => {
    const a = (verdict: 'pass' | 'fail', weightedMean: number | null, hasWork = true) => ({
      verdict,
      weightedMean,
      hasWork,
    });
    expect(bestAttemptIndex([a('fail', 5), a('pass', 4)])).toBe(1);
    expect(bestAttemptIndex([a('fail', 5), a('fail', 7), a('fail', 6)])).toBe(1);
    expect(bestAttemptIndex([a('fail', 7), a('fail', 7)])).toBe(1);
    expect(bestAttemptIndex([a('fail', null), a('fail', null, false)])).toBe(0);
    expect(bestAttemptIndex([a('fail', null, false)])).toBe(-1);
  });
});

describe('budgetExceeded', () => {
  const none = { maxCostUsd: null, maxTokens: null, maxDurationMs: null };
  const spent = { promptTokens: 300, completionTokens: 100, costUsd: 0.3, calls: 3 };
  it('reserves the mean call before the next one', () => {
    expect(budgetExceeded({ ...none, maxCostUsd: 0.45 }, spent, 0)).toBeNull();
    expect(budgetExceeded({ ...none, maxCostUsd: 0.39 }, spent, 0)).toBe('maxCostUsd');
    expect(budgetExceeded({ ...none, maxTokens: 533 }, spent, 0)).toBe('maxTokens');
    expect(budgetExceeded({ ...none, maxTokens: 534 }, spent, 0)).toBeNull();
    expect(budgetExceeded({ ...none, maxDurationMs: 1000 }, spent, 1000)).toBe('maxDurationMs');
    expect(budgetExceeded(none, spent, 1e9)).toBeNull();
  });
});

describe('exhaustionPolicy', () => {
  it('keeps abort and advance; replan holds only while a replan is left, then advances', () => {
    expect(exhaustionPolicy('abort', 0)).toBe('abort');
    expect(exhaustionPolicy('advance', 2)).toBe('advance');
    expect(exhaustionPolicy('replan', 1)).toBe('replan');
    expect(exhaustionPolicy('replan', 0)).toBe('advance');
  });
});

/** A guard of a machine as the chart calls it: its arguments (here only `context`) and its params. */
type Guard = (args: { context: unknown }, params?: unknown) => boolean;
const guardOf = (machine: typeof runMachine | typeof stepMachine, name: string) =>
  (machine.implementations.guards as unknown as Record<string, Guard>)[name]!;

describe("the run chart's exhaustion guards", () => {
  const context = (onStepExhausted: 'abort' | 'advance' | 'replan', replans: number) => ({
    context: { input: { onStepExhausted, maxReplans: 1 }, replans },
  });
  const policyIsReplan = guardOf(runMachine, 'policyIsReplan');
  const policyIsAbort = guardOf(runMachine, 'policyIsAbort');

  it('policyIsReplan holds under replan while a replan is left, and never after', () => {
    expect(policyIsReplan(context('replan', 0))).toBe(true);
    expect(policyIsReplan(context('replan', 1))).toBe(false);
    expect(policyIsReplan(context('advance', 0))).toBe(false);
  });
  it('policyIsAbort holds under abort alone', () => {
    expect(policyIsAbort(context('abort', 1))).toBe(true);
    expect(policyIsAbort(context('replan', 1))).toBe(false);
    expect(policyIsAbort(context('advance', 0))).toBe(false);
  });
});

describe("the step chart's evaluationInvalid guard", () => {
  const evaluationInvalid = guardOf(stepMachine, 'evaluationInvalid');
  const answer = (evaluation: EvaluateOutput['evaluation']): EvaluateOutput => ({
    evaluation,
    problem: evaluation ? null : 'criterion "clarity" has no score',
    usage: { promptTokens: 1, completionTokens: 1, costUsd: 0, calls: 1 },
    finishedAt: 0,
  });
  it('holds for an evaluation that never validated, not for a valid one', () => {
    expect(evaluationInvalid({ context: {} }, answer(null))).toBe(true);
    expect(evaluationInvalid({ context: {} }, answer(scored(2, 2)))).toBe(false);
  });
});
