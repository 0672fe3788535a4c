import { z } from 'zod';
import { SafeId } from './domain.js';

/**
 * Control of a run from outside its coordinator, on `pge.run.<runId>.control`: today an interrupt
 * (a persistence worker whose log write failed stops the run, since the log is not best-effort);
 * the same subject is where later commands for a run (approvals, say) belong.
 */
export const RunControl = z.strictObject({
  runId: SafeId,
  action: z.literal('interrupt'),
  /** Why, in words that end up in the run's closing event. */
  reason: z.string().min(1),
  ts: z.iso.datetime(),
});
export type RunControl = z.infer<typeof RunControl>;
