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
 * that is merely slow. A coordinator answers a ping at once, without any I/O: pings unanswered
 * for `NO_COORDINATOR_MS` tell the two apart.
 *
 * Why not the NATS services protocol (`$SRV.PING|INFO|STATS`, nats.js's `@nats-io/services`), which
 * NATS users know for such an endpoint: that package is still a prerelease (3.0.0-25 when this was
 * weighed), it works on a NATS connection only where this ping must answer on the in-process bus of
 * the embedded host too, and its `$SRV.>` subjects would have to be exported and imported across
 * every role's account of a secured deployment (`pge nats-config`) for a client to discover what
 * one subject already tells it. Revisit once it is released.
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

/** Pings in a row that go unanswered before no coordinator is said to run. */
const PINGS = 2;

/**
 * How long `unlessNoCoordinator` takes to say that no coordinator runs: `COORDINATOR_PING_MS`, in
 * two pings one after the other, each given half of it. One is not enough: a ping sent as a server
 * of a cluster dies is lost with it, though a coordinator runs and answers the next one, sent once
 * the client has moved to another server (at once: a killed server's socket closes).
 */
export const NO_COORDINATOR_MS = COORDINATOR_PING_MS;

/** One ping: null when a coordinator answered it, or when it failed otherwise than unanswered. */
function ping(bus: Bus): Promise<UnansweredRequestError | null> {
  return bus.request(subjects.coordinatorPing, {}, { timeoutMs: NO_COORDINATOR_MS / PINGS }).then(
    () => null,
    (error: unknown) => (error instanceof UnansweredRequestError ? error : null),
  );
}

/**
 * `request` (a submission), or an `UnansweredRequestError` once `NO_COORDINATOR_MS` passed with
 * `request` unsettled and two pings in a row unanswered: no coordinator runs. A ping answered
 * leaves `request` its own timeout; one that failed otherwise (the connection, say) decides
 * nothing either.
 */
export async function unlessNoCoordinator<T>(bus: Bus, request: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, NO_COORDINATOR_MS);
  });
  // The second ping only when the first went unanswered.
  const pings = ping(bus).then((unanswered) => (unanswered === null ? null : ping(bus)));
  const none = Promise.all([pings, deadline]).then(([unanswered]) => {
    if (unanswered === null) return new Promise<never>(() => undefined);
    throw new NoCoordinatorError(`no coordinator answered ${PINGS} pings within ${NO_COORDINATOR_MS} ms`, {
      cause: unanswered,
    });
  });
  try {
    return await Promise.race([request, none]);
  } finally {
    clearTimeout(timer);
  }
}
