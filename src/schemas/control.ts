import { z } from 'zod';
import { SafeId } from './domain.js';
import { ApprovalGate } from './settings.js';

/**
 * Control of a run from outside its coordinator, on `pge.run.<runId>.control`: today an interrupt
 * (a persistence worker whose log write failed stops the run, since the log is not best-effort);
 * the same subject is where later commands for a run (approvals, say) belong.
 */
export const RunControl = z.discriminatedUnion('action', [
  z.strictObject({
    runId: SafeId,
    action: z.literal('interrupt'),
    /** Why, in words that end up in the run's closing event. */
    reason: z.string().min(1),
    ts: z.iso.datetime(),
  }),
  /** A person's decision at the gate the run waits at (`pge approve`); one for another gate is ignored. */
  z.strictObject({
    runId: SafeId,
    action: z.enum(['approve', 'reject']),
    gate: ApprovalGate,
    /** Why a rejection was made: the planner or generator is told. */
    reason: z.string().max(4000).nullable(),
    by: z.string().min(1).max(200),
    ts: z.iso.datetime(),
  }),
]);
export type RunControl = z.infer<typeof RunControl>;

/**
 * A request its run no longer waits for, on `pge.run.<runId>.cancel` (core NATS, not stored):
 * every worker listening hears it; the one holding the request aborts its model call (the HTTP
 * request included) and publishes no result, and one that takes the request from the queue later
 * skips it. A worker that started after the cancel answers it, and the coordinator rejects that
 * result as late.
 */
export const CallCancel = z.strictObject({
  runId: SafeId,
  requestId: z.string().min(1),
  reason: z.string().min(1),
  ts: z.iso.datetime(),
});
export type CallCancel = z.infer<typeof CallCancel>;
