import type { Bus, StoredMessages } from '../bus/bus.js';
import { readRunEvents } from '../bus/channels.js';
import { CANCEL_ANSWER_MS, subjects } from '../bus/subjects.js';
import { ConfigurationError, UnansweredRequestError } from '../errors.js';
import type { RunEventOf } from '../schemas/index.js';
import { isClosingEvent } from '../schemas/index.js';
import { type RunCancelReply, RunCancelReply as RunCancelReplySchema } from '../schemas/submission.js';
import { untilRecorded } from './approvals.js';

/**
 * Cancelling a run of a distributed deployment from outside it (`pge cancel`): the run is looked
 * up in the events stream (a run that has ended is refused), the cancel goes to every coordinator
 * on `pge.runs.cancel`, the one driving the run cancels it and answers, and the cancel is done once
 * the run's closing event is stored.
 */

/** What a cancel did: the coordinator that cancelled the run, and the run's closing event. */
export interface CancelledRun {
  owner: string;
  closing: RunEventOf<'run.failed'> | RunEventOf<'run.completed'>;
}

/** What a closing event says of how a run ended, in a few words. */
export function endedAs(closing: RunEventOf<'run.failed'> | RunEventOf<'run.completed'>): string {
  if (closing.type === 'run.failed') return closing.payload.reason;
  return closing.payload.passed ? 'passed' : 'completed, not every step passed';
}

/**
 * Cancels run `runId` in the name of `by`, with `reason` if given; resolves once its closing event
 * is stored (`run.failed`, reason `cancelled`; or the run's own end, had it ended meanwhile).
 * Throws `ConfigurationError` for a run the stream does not hold or that has ended, and
 * `UnansweredRequestError` when no coordinator drives the run now.
 */
export async function cancelRun(
  bus: Bus & StoredMessages,
  runId: string,
  by: string,
  reason: string | null,
  timeoutMs = 10_000,
): Promise<CancelledRun> {
  const events = await readRunEvents(bus, runId);
  if (events.length === 0)
    throw new ConfigurationError(`the deployment holds no run ${runId} (pge runs lists its runs)`);
  const ended = events.find(isClosingEvent);
  if (ended !== undefined)
    throw new ConfigurationError(`run ${runId} has ended (${endedAs(ended)}): there is nothing to cancel`);
  let reply: RunCancelReply;
  try {
    const request = { runId, by, reason, ts: new Date().toISOString() };
    reply = RunCancelReplySchema.parse(
      await bus.request(subjects.cancelRun, request, { timeoutMs: CANCEL_ANSWER_MS }),
    );
  } catch (error) {
    if (!(error instanceof UnansweredRequestError)) throw error;
    throw new UnansweredRequestError(
      `no coordinator drives run ${runId} now (none answered within ${CANCEL_ANSWER_MS / 1000} s): once one takes it over (pge resume --nats <url> ${runId}), cancel it again`,
      { cause: error },
    );
  }
  const closing = await untilRecorded(
    bus,
    runId,
    (stored) => stored.find(isClosingEvent),
    timeoutMs,
    () =>
      new UnansweredRequestError(
        `coordinator ${reply.owner} took the cancel of run ${runId}, but its closing event is not stored after ${timeoutMs} ms`,
      ),
  );
  return { owner: reply.owner, closing };
}
