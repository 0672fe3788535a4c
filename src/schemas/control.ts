import { z } from 'zod';
import { Role, SafeId } from './domain.js';
import { ApprovalGate } from './settings.js';

/**
 * Control of a run from outside its coordinator, on `pge.run.<runId>.control`: an interrupt (a
 * persistence worker whose log write failed stops the run, since the log is not best-effort).
 */
export const RunControl = z.strictObject({
  runId: SafeId,
  action: z.literal('interrupt'),
  /** Why, in words that end up in the run's closing event. */
  reason: z.string().min(1),
  ts: z.iso.datetime(),
});
export type RunControl = z.infer<typeof RunControl>;

/**
 * A person's decision at the gate a run waits at (`pge approve`), on `pge.run.<runId>.approval`: a
 * subject of its own, which only clients may publish (the persistence worker, which may interrupt
 * a run on its control subject, may not decide for a person). One for another gate, or another
 * request than the one the run waits at, is ignored.
 */
export const RunApproval = z.strictObject({
  runId: SafeId,
  action: z.enum(['approve', 'reject']),
  gate: ApprovalGate,
  /** The `approval.requested` the decision answers: one made on it never settles a later request. */
  requestId: z.string().min(1).optional(),
  /** Why a rejection was made: the planner or the generator is told. */
  reason: z.string().max(4000).nullable(),
  by: z.string().min(1).max(200),
  ts: z.iso.datetime(),
});
export type RunApproval = z.infer<typeof RunApproval>;

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

/**
 * A role worker saying it is there, on `pge.workers.<role>` every few seconds: its id, and the model
 * that serves its role with whether its client knows that model's price (`false`: its calls would
 * count as free, so a cost budget could not be kept). Coordinators read it to name the models of a
 * run's roles in `run.started` and to refuse a cost budget that a worker could not keep, and
 * `holding`, the requests it has taken and not yet settled, to tell a work item that no worker
 * holds from a long call (a worker of an earlier pge does not say it).
 */
export const WorkerPresence = z.strictObject({
  role: Role,
  worker: z.string().min(1),
  model: z.string().min(1),
  priced: z.boolean(),
  holding: z.array(z.string().min(1)).optional(),
  ts: z.iso.datetime(),
});
export type WorkerPresence = z.infer<typeof WorkerPresence>;
