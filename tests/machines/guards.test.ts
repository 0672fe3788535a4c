import { describe, expect, it } from 'vitest';
import {
  allCriteriaPass,
  bestAttemptIndex,
  budgetExceeded,
  noTrajectoryYet,
  resolveCriteria,
  retriesLeft,
  scoreAttempt,
  scoresImproving,
  weightedMeanOf,
} from '../../src/machines/guards.js';
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
