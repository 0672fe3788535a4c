import { z } from 'zod';
import {
  Contract,
  ContractProposal,
  Criterion,
  Plan,
  PlanStep,
  ResolvedCriterion,
  SafeId,
  Score,
} from './domain.js';

/**
 * The typed inputs of each role call. A role builds a fresh conversation from these and nothing
 * else (DESIGN semantics 7), so what a role can see is decided here, by the schema: the evaluation
 * input has no field for the generator's self-assessment or notes, and `z.strictObject` rejects
 * one smuggled in. No input carries the run's history, so prompt size does not grow with steps run.
 */

/** A plan reduced to what a step's caller needs to situate the step: scope and step titles. */
export const PlanOutline = z.strictObject({
  scope: z.string(),
  steps: z.array(z.strictObject({ id: SafeId, title: z.string() })),
});
export type PlanOutline = z.infer<typeof PlanOutline>;

/** Why the planner is asked again after a step was exhausted (`onStepExhausted: 'replan'`). */
export const ReplanContext = z.strictObject({
  /**
   * Why the plan is revised: a step ran out of attempts (`onStepExhausted: 'replan'`), the
   * evaluator found a step's failure to be the plan's (`failureKind: 'plan'`), or a person rejected
   * the plan at its gate (`disapproved`; the findings say why). Absent in logs written before it
   * was recorded: those were all exhaustions.
   */
  reason: z.enum(['step_exhausted', 'plan_rejected', 'disapproved']).default('step_exhausted'),
  previousPlan: Plan,
  /** The step that failed; null when a person rejected the plan itself (`disapproved`). */
  failedStepId: SafeId.nullable(),
  findings: z.array(z.string()),
  actionableFeedback: z.array(z.string()),
  completedStepIds: z.array(SafeId),
});
export type ReplanContext = z.infer<typeof ReplanContext>;

/** Planner input. `problem` is set when the previous answer had too many steps. */
export const PlanInput = z.strictObject({
  task: z.string().min(1),
  maxSteps: z.number().int().min(1),
  replan: ReplanContext.nullable(),
  /** A fixed rubric: the plan's criteria must be these, unchanged; absent: the planner writes them. */
  rubric: z.array(Criterion).optional(),
});
export type PlanInput = z.infer<typeof PlanInput>;

/** Fields every step-level input shares. */
const StepScope = {
  task: z.string(),
  stepNumber: z.number().int().min(1),
  step: PlanStep,
  criteria: z.array(ResolvedCriterion).min(1),
};

/** Generator input for a contract proposal; `previous` carries the last round's amendments. */
export const ContractInput = z.strictObject({
  ...StepScope,
  plan: PlanOutline,
  round: z.number().int().min(1),
  previous: z.strictObject({ proposal: ContractProposal, amendments: z.array(z.string()) }).nullable(),
});
export type ContractInput = z.infer<typeof ContractInput>;

/** Evaluator input for a contract review. */
export const ContractReviewInput = z.strictObject({
  ...StepScope,
  round: z.number().int().min(1),
  maxRounds: z.number().int().min(1),
  proposal: ContractProposal,
});
export type ContractReviewInput = z.infer<typeof ContractReviewInput>;

/** One criterion's standing after a failed attempt, as the generator is told on retry. */
export const ScoreStanding = z.strictObject({
  criterion: z.string(),
  score: Score.nullable(),
  threshold: Score,
  delta: z.number().nullable(),
});
export type ScoreStanding = z.infer<typeof ScoreStanding>;

/** Refine keeps the direction and fixes what the evaluator named; pivot tries another approach. */
export const RetrySignal = z.enum(['refine', 'pivot']);
export type RetrySignal = z.infer<typeof RetrySignal>;

/** What the generator gets on a retry: the signal, scores with deltas, and actionable feedback only. */
export const RetryContext = z.strictObject({
  signal: RetrySignal,
  scores: z.array(ScoreStanding),
  feedback: z.array(z.string()),
  invalidEvaluation: z.string().nullable(),
});
export type RetryContext = z.infer<typeof RetryContext>;

/** An artifact of an earlier step that this step depends on. */
export const DependencyArtifact = z.strictObject({ stepId: SafeId, title: z.string(), output: z.string() });
export type DependencyArtifact = z.infer<typeof DependencyArtifact>;

/** Generator input for doing the work of one attempt. */
export const WorkInput = z.strictObject({
  ...StepScope,
  plan: PlanOutline,
  contract: Contract,
  attempt: z.number().int().min(1),
  dependencies: z.array(DependencyArtifact),
  retry: RetryContext.nullable(),
});
export type WorkInput = z.infer<typeof WorkInput>;

/**
 * Evaluator input: criteria, step, contract and the artifact. Structurally unable to carry the
 * self-assessment, notes or earlier evaluations.
 */
export const EvaluationInput = z.strictObject({
  ...StepScope,
  contract: Contract,
  attempt: z.number().int().min(1),
  artifact: z.string(),
});
export type EvaluationInput = z.infer<typeof EvaluationInput>;
