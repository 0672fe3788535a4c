import type { Bus, BusSubscription } from '../bus/bus.js';
import { answerable } from '../bus/channels.js';
import { COORDINATOR_PING_MS, subjects } from '../bus/subjects.js';
import { UnansweredRequestError } from '../errors.js';
import type { CoordinatorPong } from '../schemas/submission.js';

/**
 * Whether any coordinator runs, asked on `pge.coordinators.ping`. On an open server a submission
 * that nobody serves gets "no responders" at once; across the accounts of a server secured by `pge
 * nats-config`, the server drops a request that the coordinators' account does not serve, and the
 * submitter hears nothing until its timeout (`SUBMIT_ANSWER_MS`), as it would from a coordinator
 * that is merely slow. A coordinator answers a ping at once, without any I/O: a ping unanswered
 * for `COORDINATOR_PING_MS` tells the two apart.
 */

/** No coordinator answered a ping: none runs (or none could be reached). */
export class NoCoordinatorError extends UnansweredRequestError {}

/** Answers pings as `name`, one coordinator of the queue group `queue` for each. */
export function answerPings(bus: Bus, name: string, queue: string): BusSubscription {
  return bus.subscribe(
    subjects.coordinatorPing,
    async (message) => {
      if (!answerable(bus, message)) return;
      await message.respond({ coordinator: name } satisfies CoordinatorPong);
    },
    { queue },
  );
}

/**
 * `request` (a submission), or an `UnansweredRequestError` once `COORDINATOR_PING_MS` passed with
 * `request` unsettled and a ping unanswered: no coordinator runs. A ping answered leaves `request`
 * its own timeout; one that failed otherwise (the connection, say) decides nothing either.
 */
export async function unlessNoCoordinator<T>(bus: Bus, request: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, COORDINATOR_PING_MS);
  });
  const ping = bus.request(subjects.coordinatorPing, {}, { timeoutMs: COORDINATOR_PING_MS }).then(
    () => null,
    (error: unknown) => (error instanceof UnansweredRequestError ? error : null),
  );
  const none = Promise.all([ping, deadline]).then(([unanswered]) => {
    if (unanswered === null) return new Promise<never>(() => undefined);
    throw new NoCoordinatorError(`no coordinator answered a ping within ${COORDINATOR_PING_MS} ms`, {
      cause: unanswered,
    });
  });
  try {
    return await Promise.race([request, none]);
  } finally {
    clearTimeout(timer);
  }
}
