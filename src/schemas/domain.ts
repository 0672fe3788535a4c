import { z } from 'zod';
import { ID_PATTERN, PHASES, ROLES } from './setting-values.js';

/**
 * Domain schemas: what the planner, generator and evaluator return, and the records the harness
 * keeps of them. Model-facing schemas avoid `.optional()`, records and top-level arrays so that
 * they convert to strict OpenAI structured-output JSON Schemas; types are inferred, never written twice.
 */

/** Identifiers that travel inside NATS subjects: no `.`, `*`, `>` or white space. */
export const SafeId = z
  .string()
  .min(1)
  .max(128)
  .regex(ID_PATTERN, 'ids may hold only letters, digits, "-" and "_"');

/** A W3C `traceparent` of version 00: version, trace id, parent span id, flags, in lower-case hex. */
export const TRACEPARENT_PATTERN = /^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$/;

/** A W3C trace context (`traceparent`). */
export const TraceParent = z.string().regex(TRACEPARENT_PATTERN, 'a W3C traceparent');

/** A score on the rubric's 1–10 scale. */
export const Score = z.number().min(1).max(10);

/** Criterion weights; `weightValue` turns them into numbers for the weighted mean. */
export const CriterionWeight = z.enum(['high', 'standard', 'low']);
export type CriterionWeight = z.infer<typeof CriterionWeight>;

/** A criterion name, normalised: trimmed and lower-case (DESIGN semantics 1). */
export const CriterionName = z
  .string()
  .transform((s) => s.trim().toLowerCase())
  .pipe(z.string().min(1).max(120));

/** A rubric criterion. `threshold` is the plan's, `null` when the planner leaves it to the harness. */
export const Criterion = z.object({
  name: CriterionName,
  weight: CriterionWeight,
  description: z.string(),
  threshold: Score.nullable(),
});
export type Criterion = z.infer<typeof Criterion>;

/** A criterion with the threshold the harness enforces (plan, else defaults, else fallback). */
export const ResolvedCriterion = Criterion.extend({ threshold: Score });
export type ResolvedCriterion = z.infer<typeof ResolvedCriterion>;

/** One step of a plan. `dependsOn` names earlier steps whose artifacts the generator receives. */
export const PlanStep = z.object({
  id: SafeId,
  title: z.string().min(1),
  description: z.string().min(1),
  expectedOutput: z.string().min(1),
  dependsOn: z.array(SafeId),
});
export type PlanStep = z.infer<typeof PlanStep>;

/** The planner's answer: scope, ordered steps and the graded rubric. */
export const Plan = z
  .object({
    scope: z.string(),
    steps: z.array(PlanStep).min(1),
    criteria: z.array(Criterion).min(1),
  })
  .superRefine((plan, ctx) => checkPlanGraph(plan, ctx));
export type Plan = z.infer<typeof Plan>;

/**
 * The checks every plan gets, a planner's or a file's: step ids unique, each step depending only
 * on earlier steps (so the graph has no cycle and names no unknown step), criteria named once.
 */
export function checkPlanGraph(
  plan: {
    steps: readonly { id: string; dependsOn: readonly string[] }[];
    criteria: readonly { name: string }[];
  },
  ctx: z.RefinementCtx,
): void {
  const seen = new Set<string>();
  plan.steps.forEach((step, i) => {
    if (seen.has(step.id))
      ctx.addIssue({ code: 'custom', path: ['steps', i, 'id'], message: `duplicate step id "${step.id}"` });
    for (const dep of step.dependsOn) {
      if (!seen.has(dep)) {
        ctx.addIssue({
          code: 'custom',
          path: ['steps', i, 'dependsOn'],
          message: `step "${step.id}" depends on "${dep}", which is not an earlier step`,
        });
      }
    }
    seen.add(step.id);
  });
  checkUniqueCriteria(plan.criteria, ctx, ['criteria']);
}

/** Adds an issue for each criterion whose (normalised) name an earlier one has: a rubric names each once. */
export function checkUniqueCriteria(
  criteria: readonly { name: string }[],
  ctx: z.RefinementCtx,
  path: (string | number)[] = [],
): void {
  const names = new Set<string>();
  criteria.forEach((c, i) => {
    if (names.has(c.name))
      ctx.addIssue({
        code: 'custom',
        path: [...path, i, 'name'],
        message: `duplicate criterion "${c.name}"`,
      });
    names.add(c.name);
  });
}

/** The generator's proposal of what a step will deliver and how it will be checked. */
export const ContractProposal = z.object({
  title: z.string().min(1),
  acceptanceCriteria: z.array(z.string().min(1)).min(1),
  expectedOutput: z.string().min(1),
  verificationMethod: z.string().min(1),
});
export type ContractProposal = z.infer<typeof ContractProposal>;

/** The evaluator's review of a proposal: a closed status, never a substring test. */
export const ContractReview = z
  .object({
    status: z.enum(['approved', 'amendments_required']),
    amendments: z.array(z.string().min(1)),
    rationale: z.string(),
  })
  .refine((r) => r.status === 'approved' || r.amendments.length > 0, {
    message: 'amendments_required needs at least one amendment',
    path: ['amendments'],
  });
export type ContractReview = z.infer<typeof ContractReview>;

/** The contract that binds every attempt of a step; `imposed` when negotiation hit its bound. */
export const Contract = ContractProposal.extend({
  rounds: z.number().int().min(1),
  imposed: z.boolean(),
});
export type Contract = z.infer<typeof Contract>;

/** A self-assessed or evaluated score for one criterion. */
export const SelfScore = z.object({ criterion: CriterionName, score: Score, comment: z.string() });
export type SelfScore = z.infer<typeof SelfScore>;

/** The generator's work: the artifact, its notes, and its self-assessment (never shown to the evaluator). */
export const Work = z.object({
  output: z.string().min(1),
  notes: z.string(),
  selfAssessment: z.array(SelfScore),
});
export type Work = z.infer<typeof Work>;

/**
 * One validator's run on an attempt's work: a command (named by itself) or a function of the API
 * (named by its name), run in the run's workspace after the work and before the evaluator. `output`
 * is the end of what it printed (stdout and stderr), bounded; `exitCode` is a command's, null for
 * a function or a command that was stopped (its deadline passed).
 */
export const ValidatorRun = z.strictObject({
  validator: z.string().min(1),
  passed: z.boolean(),
  exitCode: z.number().int().nullable(),
  output: z.string(),
  durationMs: z.number().min(0),
});
export type ValidatorRun = z.infer<typeof ValidatorRun>;

/** One criterion's score with the evidence for it. */
export const CriterionScore = z.object({ criterion: CriterionName, score: Score, evidence: z.string() });
export type CriterionScore = z.infer<typeof CriterionScore>;

/**
 * Where the fault of a failed attempt lies, as the evaluator judges it: `execution`, the generator
 * can pass this step with a better attempt; `plan`, the step cannot pass as planned, so the
 * planner must revise the plan (bounded by `maxReplans`).
 */
export const FailureKind = z.enum(['execution', 'plan']);
export type FailureKind = z.infer<typeof FailureKind>;

/** The evaluator's answer. Whether it covers the plan's criteria is checked by `checkEvaluationCoverage`. */
export const Evaluation = z.object({
  scores: z.array(CriterionScore).min(1),
  findings: z.array(z.string()),
  actionableFeedback: z.array(z.string()),
  summary: z.string(),
  // Required of the model (strict mode); null in evaluations recorded before it was asked for.
  failureKind: FailureKind.nullable()
    .default(null)
    .describe(
      'When a criterion is below its threshold, where the fault lies: "execution" if a better attempt at this same step can pass; "plan" if the step cannot pass as planned (it is wrong, impossible, or needs what no earlier step made), so the plan must change. null when every criterion meets its threshold.',
    ),
});
export type Evaluation = z.infer<typeof Evaluation>;

/**
 * Problems that make an evaluation invalid for a rubric: a criterion missing, scored twice, or not
 * in the rubric. An empty list means the evaluation covers exactly the rubric.
 */
export function checkEvaluationCoverage(
  evaluation: Evaluation,
  criteria: readonly { name: string }[],
): string[] {
  const wanted = new Set(criteria.map((c) => c.name));
  const problems: string[] = [];
  const seen = new Set<string>();
  for (const s of evaluation.scores) {
    if (!wanted.has(s.criterion)) problems.push(`"${s.criterion}" is not a criterion of this rubric`);
    else if (seen.has(s.criterion)) problems.push(`"${s.criterion}" is scored more than once`);
    seen.add(s.criterion);
  }
  for (const name of wanted) if (!seen.has(name)) problems.push(`criterion "${name}" has no score`);
  return problems;
}

/** Token usage and cost of one or more model calls. */
export const Usage = z.object({
  promptTokens: z.number().int().min(0),
  completionTokens: z.number().int().min(0),
  costUsd: z.number().min(0),
  calls: z.number().int().min(0),
});
export type Usage = z.infer<typeof Usage>;

/** Zero usage, the identity of `addUsage`. */
export const ZERO_USAGE: Usage = Object.freeze({
  promptTokens: 0,
  completionTokens: 0,
  costUsd: 0,
  calls: 0,
});

/** Sums two usage records. */
export function addUsage(a: Usage, b: Usage): Usage {
  return {
    promptTokens: a.promptTokens + b.promptTokens,
    completionTokens: a.completionTokens + b.completionTokens,
    costUsd: a.costUsd + b.costUsd,
    calls: a.calls + b.calls,
  };
}

/** Roles and the phases each one answers; a phase names the schema of its answer (`pge_<phase>`). */
export const Role = z.enum(ROLES);
export type Role = z.infer<typeof Role>;
export const Phase = z.enum(PHASES);
export type Phase = z.infer<typeof Phase>;

/**
 * Cuts a plan to `maxSteps` (DESIGN 1: after one re-ask, a longer plan is cut, never silently):
 * returns the plan, and what was dropped (null when nothing was), dependencies on the dropped
 * steps removed.
 */
export function truncatePlan(
  plan: Plan,
  maxSteps: number,
): { plan: Plan; truncation: { from: number; droppedStepIds: string[] } | null } {
  if (plan.steps.length <= maxSteps) return { plan, truncation: null };
  const steps = plan.steps.slice(0, maxSteps);
  const kept = new Set(steps.map((s) => s.id));
  return {
    plan: { ...plan, steps: steps.map((s) => ({ ...s, dependsOn: s.dependsOn.filter((d) => kept.has(d)) })) },
    truncation: { from: plan.steps.length, droppedStepIds: plan.steps.slice(maxSteps).map((s) => s.id) },
  };
}
