import type { Bus } from '../bus/bus.js';
import { publishRejection } from '../bus/channels.js';
import type { MessageRejection } from '../bus/codec.js';
import { subjects } from '../bus/subjects.js';
import type { RunEvent } from '../schemas/index.js';

/** The piece of the persistence actor that is not about logs: reporting refused events. */

/**
 * Reports an event that no log can take on `pge.errors.rejected.<reporter>`, as the bus reports a message it
 * cannot decode; `onRejected` hears of each report once it went out (or why it did not).
 */
export function createRejecter(
  bus: Bus,
  onRejected?: (rejection: MessageRejection, unpublished?: unknown) => void,
): (event: RunEvent, problem: string) => void {
  return (event, problem) => {
    const rejection: MessageRejection = {
      subject: subjects.event(event.runId, event.type),
      problem: `${event.type} (seq ${event.seq}) of run ${event.runId} ${problem}`,
      ts: new Date().toISOString(),
    };
    publishRejection(bus, rejection).then(
      () => onRejected?.(rejection),
      (error: unknown) => onRejected?.(rejection, error),
    );
  };
}
