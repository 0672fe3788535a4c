import type { RunOutcome, RunStatus } from '../machines/run-machine.js';
import type { AttemptRecord, ContractRound, StepOutcome } from '../machines/types.js';
import type {
  Contract,
  ErrorInfo,
  ModelCall,
  Phase,
  Plan,
  ResolvedCriterion,
  Usage,
} from '../schemas/index.js';
import { phaseTotals } from '../schemas/index.js';

/**
 * `lastResult`: the reference's `HarnessResult` fields (outputPath, plan, stepLogs, totalDuration,
 * totalStepsCompleted, totalRetries) and what it lacks: whether the run passed, the final
 * artifact, usage per phase, and the self-evaluation bias.
 */

/** One attempt in a step log. */
export interface AttemptLog {
  attempt: number;
  signal: AttemptRecord['signal'];
  verdict: AttemptRecord['verdict'];
  reason: AttemptRecord['reason'];
  scores: AttemptRecord['scores'];
  weightedMean: number | null;
  /** The generator's artifact (null when its answer was invalid). */
  output: string | null;
  /** The evaluator's feedback and summary (null when the evaluation was invalid). */
  feedback: string[];
  summary: string | null;
  problem: string | null;
}

/** One step as it ran. */
export interface StepLog {
  stepNumber: number;
  stepId: string;
  title: string;
  status: StepOutcome['status'];
  passed: boolean;
  contract: Contract | null;
  contractRounds: ContractRound[];
  attempts: AttemptLog[];
  /** Re-executions of the step. */
  retries: number;
  /** 1-based number of the attempt the step keeps, or null. */
  bestAttempt: number | null;
  /** The kept attempt's artifact. */
  output: string | null;
  /** The run the step passed in when this run kept it from there (`continue`) rather than ran it; null: run here. */
  keptFrom: string | null;
}

/** Calls, tokens, cost and model time of one phase. */
export interface PhaseUsage extends Usage {
  latencyMs: number;
}

/** Self score minus evaluator score, per criterion and on average (positive: the generator flatters itself). */
export interface SelfEvaluationBias {
  byCriterion: Record<string, number>;
  mean: number | null;
  samples: number;
}

/** The result of a run. */
export interface HarnessResult {
  /** The harness that ran it (option `id`). */
  harnessId: string;
  runId: string;
  status: RunStatus;
  passed: boolean;
  outputPath: string;
  plan: Plan | null;
  criteria: ResolvedCriterion[];
  stepLogs: StepLog[];
  /** Seconds. */
  totalDuration: number;
  totalStepsCompleted: number;
  totalSteps: number;
  totalRetries: number;
  replans: number;
  finalArtifact: string;
  /**
   * Tokens and cost of the run's calls. `priced` is false when a call's model had no price: its
   * cost counted as 0, so `costUsd` is a lower bound, not the cost.
   */
  usage: Usage & { priced: boolean };
  usageByPhase: Record<Phase, PhaseUsage>;
  selfEvaluationBias: SelfEvaluationBias;
  summary: string;
  error: ErrorInfo | null;
}

function attemptLog(a: AttemptRecord): AttemptLog {
  return {
    attempt: a.attempt,
    signal: a.signal,
    verdict: a.verdict,
    reason: a.reason,
    scores: a.scores,
    weightedMean: a.weightedMean,
    output: a.work?.output ?? null,
    feedback: a.evaluation?.actionableFeedback ?? [],
    summary: a.evaluation?.summary ?? null,
    problem: a.problem,
  };
}

function stepLog(o: StepOutcome): StepLog {
  return {
    stepNumber: o.stepNumber,
    stepId: o.stepId,
    title: o.title,
    status: o.status,
    passed: o.status === 'passed',
    contract: o.contract,
    contractRounds: o.rounds,
    attempts: o.attempts.map(attemptLog),
    retries: Math.max(0, o.attempts.length - 1),
    bestAttempt: o.best >= 0 ? o.best + 1 : null,
    output: o.best >= 0 ? (o.attempts[o.best]!.work?.output ?? null) : null,
    keptFrom: o.carriedFrom ?? null,
  };
}

/** The best output of each step of the final plan, in plan order. */
function finalArtifact(outcome: RunOutcome): string {
  if (!outcome.plan) return '';
  return outcome.plan.steps
    .flatMap((step, i) => {
      const o = outcome.outcomes.findLast((x) => x.stepId === step.id);
      const output = o && o.best >= 0 ? o.attempts[o.best]!.work?.output : undefined;
      if (output === undefined) return [];
      const mark = o!.status === 'passed' ? '' : ' (did not pass)';
      return [`## Step ${i + 1}: ${step.title}${mark}\n\n${output}`];
    })
    .join('\n\n');
}

function usageByPhase(calls: readonly ModelCall[]): Record<Phase, PhaseUsage> {
  return Object.fromEntries(phaseTotals(calls).map(({ phase, ...usage }) => [phase, usage])) as Record<
    Phase,
    PhaseUsage
  >;
}

/** Self-assessment against the evaluator's scores, over every attempt that has both. */
export function selfEvaluationBias(outcomes: readonly StepOutcome[]): SelfEvaluationBias {
  const diffs = new Map<string, number[]>();
  for (const o of outcomes) {
    for (const a of o.attempts) {
      if (!a.work || !a.evaluation) continue;
      for (const s of a.evaluation.scores) {
        const self = a.work.selfAssessment.find((x) => x.criterion === s.criterion);
        if (self) diffs.set(s.criterion, [...(diffs.get(s.criterion) ?? []), self.score - s.score]);
      }
    }
  }
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
  const all = [...diffs.values()].flat();
  return {
    byCriterion: Object.fromEntries([...diffs].map(([k, v]) => [k, mean(v)])),
    mean: all.length > 0 ? mean(all) : null,
    samples: all.length,
  };
}

/** Builds `lastResult` from the chart's outcome and the run's model calls. */
export function buildResult(
  harnessId: string,
  runId: string,
  outputPath: string,
  outcome: RunOutcome,
  calls: readonly ModelCall[],
  durationMs: number,
): HarnessResult {
  return {
    harnessId,
    runId,
    status: outcome.status,
    passed: outcome.totals.passed,
    outputPath,
    plan: outcome.plan,
    criteria: outcome.criteria,
    stepLogs: outcome.outcomes.map(stepLog),
    totalDuration: durationMs / 1000,
    totalStepsCompleted: outcome.totals.stepsPassed,
    totalSteps: outcome.totals.stepsTotal,
    totalRetries: outcome.totals.totalRetries,
    replans: outcome.replans,
    finalArtifact: finalArtifact(outcome),
    usage: { ...outcome.totals.usage, priced: calls.every((call) => call.priced !== false) },
    usageByPhase: usageByPhase(calls),
    selfEvaluationBias: selfEvaluationBias(outcome.outcomes),
    summary: outcome.totals.summary,
    error: outcome.error,
  };
}
