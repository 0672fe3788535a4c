import { z } from 'zod';
import {
  ContractProposal,
  ContractReview,
  Evaluation,
  Phase,
  Plan,
  Role,
  SafeId,
  ValidatorRun,
  Work,
} from './domain.js';
import { ErrorInfo, ModelCall } from './events.js';

/**
 * What a role worker sends back for one request, on `pge.run.<runId>.result`. The coordinator,
 * the only writer of a run's events, turns it into events (`model.call.completed` per call, then
 * the result event) and into a machine event.
 */

function ok<P extends string, S extends z.ZodType>(phase: P, output: S) {
  return z.strictObject({ status: z.literal('ok'), phase: z.literal(phase), output });
}

/** A successful answer, typed by phase; the plan also says whether it was cut to `maxSteps`. */
export const RoleSuccess = z.discriminatedUnion('phase', [
  ok(
    'plan',
    z.strictObject({
      plan: Plan,
      truncation: z.strictObject({ from: z.number().int(), droppedStepIds: z.array(SafeId) }).nullable(),
    }),
  ),
  ok('contract', ContractProposal),
  ok('contract_review', ContractReview),
  // The work, and its validators' runs when the worker has validators (they run where it runs).
  ok('work', Work).extend({ validation: z.array(ValidatorRun).optional() }),
  ok('evaluation', Evaluation),
]);
export type RoleSuccess = z.infer<typeof RoleSuccess>;

/** A failed request: `raw` is the last answer when the model's output never validated. */
export const RoleFailure = z.strictObject({
  status: z.literal('error'),
  phase: Phase,
  error: ErrorInfo,
  raw: z.string().nullable(),
});
export type RoleFailure = z.infer<typeof RoleFailure>;

/** A worker's reply to one request. */
export const RoleResult = z.strictObject({
  requestId: z.string().min(1),
  runId: SafeId,
  role: Role,
  worker: z.string(),
  calls: z.array(ModelCall),
  result: z.union([RoleSuccess, RoleFailure]),
});
export type RoleResult = z.infer<typeof RoleResult>;
