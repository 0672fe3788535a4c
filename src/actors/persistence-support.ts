import type { Bus } from '../bus/bus.js';
import { publishRejection } from '../bus/channels.js';
import type { MessageRejection } from '../bus/codec.js';
import { subjects } from '../bus/subjects.js';
import type { RunEvent } from '../schemas/index.js';

/** Pieces of the persistence actor that are not about logs: reporting refused events, and running one task at a time. */

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

const ignore = (): void => undefined;

/** Runs tasks one after another, in the order given; a task's failure goes to its caller only. */
export class Serial {
  #tail: Promise<void> = Promise.resolve();

  /** Runs `task` once every task given before it has settled; settles as `task` does. */
  run(task: () => Promise<void> | void): Promise<void> {
    const result = this.#tail.then(task);
    this.#tail = result.then(ignore, ignore);
    return result;
  }

  /** Resolves once every task given so far has settled. */
  idle(): Promise<void> {
    return this.#tail;
  }
}
