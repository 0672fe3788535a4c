import { z } from 'zod';
import {
  CriterionName,
  CriterionWeight,
  checkPlanGraph,
  type Plan,
  type ResolvedCriterion,
  SafeId,
  Score,
} from './domain.js';

/**
 * A plan as a file (`pge plan --out plan.json`, `pge run --plan plan.json`): the planner's plan
 * and its rubric in a versioned document a person can read, write and edit, checked as a
 * planner's plan is (ids, dependency graph, thresholds). Its JSON Schema ships with the package
 * (`schemas/plan.schema.json`, made from this by `npm run schemas`). Unknown fields are refused, so
 * a misspelt one is named rather than ignored.
 */

/** The version of the plan document this pge writes and reads. */
export const PLAN_DOCUMENT_VERSION = 1;

/** The `$id` of the plan document's JSON Schema: a name, not a place to fetch it from. */
export const PLAN_DOCUMENT_SCHEMA_ID = `urn:pge:plan-document:${PLAN_DOCUMENT_VERSION}`;

/**
 * The `$schema` `pge plan` writes: where the shipped JSON Schema is in a project that has pge
 * installed, relative to a plan file kept at the project's root (the directory of its
 * `node_modules`), which is where editors look for it. A file kept elsewhere may change it, or
 * drop it: pge does not read it.
 */
export const PLAN_DOCUMENT_SCHEMA_REF = 'node_modules/pge/schemas/plan.schema.json';

/** One step of a plan document; `dependsOn` may be left out (no dependency). */
export const PlanDocumentStep = z.strictObject({
  id: SafeId.describe('Unique within the plan; letters, digits, "-" and "_"'),
  title: z.string().min(1),
  description: z.string().min(1).describe('What the step does, for the generator'),
  expectedOutput: z.string().min(1).describe('What the step delivers, for the generator and the evaluator'),
  dependsOn: z
    .array(SafeId)
    .default([])
    .describe('Ids of earlier steps whose artifacts this step receives, and which must end before it starts'),
});
export type PlanDocumentStep = z.infer<typeof PlanDocumentStep>;

/** A criterion of a plan document's rubric; `threshold` null or left out: the run's defaults decide. */
export const PlanDocumentCriterion = z.strictObject({
  name: CriterionName.describe('Unique within the rubric; compared trimmed and in lower case'),
  weight: CriterionWeight.default('standard').describe("The criterion's weight in a step's weighted mean"),
  description: z.string().default('').describe('What the evaluator judges'),
  threshold: Score.nullable()
    .default(null)
    .describe(
      "The score (1-10) the criterion must reach; null: the run's defaultThresholds, else its fallbackThreshold",
    ),
});
export type PlanDocumentCriterion = z.infer<typeof PlanDocumentCriterion>;

/** A plan document, version 1. */
export const PlanDocument = z
  .strictObject({
    $schema: z.string().optional().describe('Where this schema is, for editors'),
    version: z.literal(PLAN_DOCUMENT_VERSION, {
      error: (issue) =>
        issue.input === undefined
          ? `a plan document says its version: "version": ${PLAN_DOCUMENT_VERSION}`
          : `this pge reads plan documents of version ${PLAN_DOCUMENT_VERSION}, not ${JSON.stringify(issue.input)}`,
    }),
    task: z
      .string()
      .min(1)
      .optional()
      .describe('The task the plan is for; `pge run --plan` takes it unless one is given'),
    scope: z.string().default('').describe('What the plan covers, and what it leaves out'),
    steps: z.array(PlanDocumentStep).min(1, { error: 'a plan needs at least one step' }),
    criteria: z.array(PlanDocumentCriterion).min(1, { error: 'a rubric needs at least one criterion' }),
  })
  .superRefine((doc, ctx) => checkPlanGraph(doc, ctx));
/** A plan document as read (defaults filled in). */
export type PlanDocument = z.infer<typeof PlanDocument>;
/** A plan document as written: the fields with defaults may be left out. */
export type PlanDocumentInput = z.input<typeof PlanDocument>;

/** The plan a document holds, as a planner's answer would be. */
export function planOfDocument(doc: PlanDocument): Plan {
  return {
    scope: doc.scope,
    steps: doc.steps.map(({ id, title, description, expectedOutput, dependsOn }) => ({
      id,
      title,
      description,
      expectedOutput,
      dependsOn,
    })),
    criteria: doc.criteria.map(({ name, weight, description, threshold }) => ({
      name,
      weight,
      description,
      threshold,
    })),
  };
}

/**
 * The document of a plan: its steps, and its rubric with the thresholds the run enforces
 * (`criteria`, resolved) when given, else the plan's own. `task` is recorded when given.
 */
export function documentOfPlan(
  plan: Plan,
  options: { task?: string; criteria?: readonly ResolvedCriterion[] } = {},
): PlanDocument {
  return {
    version: PLAN_DOCUMENT_VERSION,
    ...(options.task === undefined ? {} : { task: options.task }),
    scope: plan.scope,
    steps: plan.steps.map((s) => ({ ...s, dependsOn: [...s.dependsOn] })),
    criteria: (options.criteria ?? plan.criteria).map(({ name, weight, description, threshold }) => ({
      name,
      weight,
      description,
      threshold,
    })),
  };
}

/**
 * A plan a run is given instead of asking the planner (`pge run --plan`, the `plan` option): the
 * document, and the file it was read from (null: given as an object through the API).
 */
export const GivenPlan = z.strictObject({ document: PlanDocument, file: z.string().min(1).nullable() });
export type GivenPlan = z.infer<typeof GivenPlan>;
