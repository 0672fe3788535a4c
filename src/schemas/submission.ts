import { z } from 'zod';
import { SafeId, Score } from './domain.js';

/**
 * Run submission by request/reply on `pge.runs.submit`: a client sends a task and the run settings
 * it wants to override; the coordinator that takes it replies with the new run's id, and the run's
 * events follow on `pge.run.<runId>.evt.>`. Model names, keys and paths are the coordinator's
 * business, not the submitter's, so only run settings travel here.
 */

/**
 * Run settings a submitter may set, each with the name and bounds of the option of the same name
 * (`PgeOptionsSchema`); an omitted one takes the coordinator's value. Unknown names are an error.
 */
export const RunSubmissionOptions = z.strictObject({
  maxSteps: z.number().int().min(1).optional(),
  maxRetriesPerStep: z.number().int().min(0).optional(),
  maxContractRounds: z.number().int().min(1).optional(),
  onStepExhausted: z.enum(['advance', 'abort', 'replan']).optional(),
  maxReplans: z.number().int().min(0).optional(),
  /** Thresholds by criterion name, for criteria the plan leaves without one. */
  defaultThresholds: z.record(z.string(), Score).optional(),
  fallbackThreshold: Score.optional(),
  maxCostUsd: z.number().positive().optional(),
  // Integers because the run's budgets (`Budgets` in run.started) are integers.
  maxTokens: z.number().int().positive().optional(),
  maxDurationMs: z.number().int().positive().optional(),
});
export type RunSubmissionOptions = z.infer<typeof RunSubmissionOptions>;

/** A request to start a run, sent on `pge.runs.submit`. */
export const RunSubmission = z.strictObject({
  task: z.string().min(1),
  /** The run id to use, so that a submitter can follow the run's events before submitting it. */
  runId: SafeId.optional(),
  options: RunSubmissionOptions.optional(),
});
export type RunSubmission = z.infer<typeof RunSubmission>;

/** The reply to a submission: the id of the run that was started. */
export const RunSubmissionReply = z.strictObject({ runId: SafeId });
export type RunSubmissionReply = z.infer<typeof RunSubmissionReply>;
