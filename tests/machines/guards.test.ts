import { describe, expect, it } from 'vitest';
import {
  allCriteriaPass,
  bestAttemptIndex,
  budgetExceeded,
  judgeAttempt,
  resolveCriteria,
  retriesLeft,
  retrySignal,
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

describe('judgeAttempt', () => {
  it('fails closed on a missing criterion even if the rest pass', () => {
    const evaluation = scored(9, 9);
    evaluation.scores = evaluation.scores.filter((s) => s.criterion !== 'clarity');
    const j = judgeAttempt(criteria, { evaluation, invalid: null });
    expect(j.verdict).toBe('fail');
    expect(j.reason).toBe('below_threshold');
    expect(j.weightedMean).toBeNull();
  });
  it('uses the harness threshold, not anything the evaluator says', () => {
    expect(judgeAttempt(criteria, { evaluation: scored(6.5, 9), invalid: null }).verdict).toBe('fail');
    expect(judgeAttempt(criteria, { evaluation: scored(7, 6), invalid: null }).verdict).toBe('pass');
  });
  it('an invalid attempt fails whatever its scores', () => {
    expect(judgeAttempt(criteria, { evaluation: null, invalid: 'invalid_evaluation' })).toMatchObject({
      verdict: 'fail',
      reason: 'invalid_evaluation',
    });
  });
  it('weights high 2, standard 1, low 0.5', () => {
    expect(judgeAttempt(criteria, { evaluation: scored(8, 5), invalid: null }).weightedMean).toBeCloseTo(
      (8 * 2 + 5 * 0.5) / 2.5,
    );
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

describe('scoresImproving and retrySignal', () => {
  it('compares the last two scored means', () => {
    expect(scoresImproving([5, 6])).toBe(true);
    expect(scoresImproving([6, 6])).toBe(false);
    expect(scoresImproving([6, 5])).toBe(false);
    expect(scoresImproving([5, null, 6])).toBe(true);
    expect(scoresImproving([5])).toBe(false);
  });
  it('refines on the first retry, then by trajectory', () => {
    expect(retrySignal([9])).toBe('refine');
    expect(retrySignal([3])).toBe('refine');
    expect(retrySignal([4, 5])).toBe('refine');
    expect(retrySignal([5, 5])).toBe('pivot');
    expect(retrySignal([5, 4])).toBe('pivot');
    expect(retrySignal([null, 5])).toBe('refine');
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
