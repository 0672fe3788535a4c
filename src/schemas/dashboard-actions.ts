import { z } from 'zod';
import { SafeId } from './domain.js';
import { ApprovalGate } from './settings.js';

/**
 * The actions a person takes on the dashboard's page with `pge dashboard --control`: each is a
 * POST of one of these bodies, as JSON, to `/api/actions/<name>`. Unknown fields are an error, so
 * a page and a server out of step say so rather than drop a setting.
 */

/** A reason a person gives: a rejection's, a cancel's. */
const Reason = z.string().trim().min(1).max(4000);

/** `/api/actions/decide`: approve, or reject with a reason, the gate run `runId` waits at. */
export const DecideAction = z
  .strictObject({
    runId: SafeId,
    gate: ApprovalGate,
    /** The `approval.requested` decided on: a decision never settles a later request. */
    requestId: z.string().min(1).max(200),
    decision: z.enum(['approve', 'reject']),
    reason: Reason.nullable(),
  })
  // The run takes a rejection's reason back to the planner or the generator: it must have one.
  .refine((a) => a.decision === 'approve' || a.reason !== null, {
    message: 'a rejection needs a reason',
    path: ['reason'],
  });
export type DecideAction = z.infer<typeof DecideAction>;

/** `/api/actions/cancel`: cancels run `runId`. */
export const CancelAction = z.strictObject({ runId: SafeId, reason: Reason.nullable() });
export type CancelAction = z.infer<typeof CancelAction>;

/** The settings a person may set for a run started, or forked, from the page. */
const Limits = {
  maxRetriesPerStep: z.number().int().min(0).max(100).optional(),
  maxCostUsd: z.number().positive().max(1_000_000).optional(),
};

/** `/api/actions/start`: a new run of `task`. */
export const StartAction = z.strictObject({
  task: z.string().trim().min(1),
  /** The model of every role; left out, the dashboard's (its flags, or the demo model). */
  model: z.string().trim().min(1).max(200).optional(),
  maxSteps: z.number().int().min(1).max(100).optional(),
  ...Limits,
  /** Where the run waits for a person. */
  approve: z.array(ApprovalGate).max(3).optional(),
});
export type StartAction = z.infer<typeof StartAction>;

/** `/api/actions/fork`: a new run that takes run `runId`'s events before step `fromStep` and runs on from there. */
export const ForkAction = z.strictObject({
  runId: SafeId,
  fromStep: z.number().int().min(1).max(1000),
  settings: z.strictObject(Limits).optional(),
});
export type ForkAction = z.infer<typeof ForkAction>;

/** What an action answers: the run it started (start, fork) or acted on. */
export const ActionReply = z.strictObject({ runId: SafeId, message: z.string() });
export type ActionReply = z.infer<typeof ActionReply>;
