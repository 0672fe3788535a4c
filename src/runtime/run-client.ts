import type { Bus, StoredMessages } from '../bus/bus.js';
import { RESUME_ANSWER_MS, subjects } from '../bus/subjects.js';
import { errorFromInfo } from '../errors.js';
import type { ApprovalDecision, ApprovalGate, RunEvent, RunEventOf } from '../schemas/index.js';
import {
  type RunResumeReply,
  RunResumeReply as RunResumeReplySchema,
  type RunSubmission,
} from '../schemas/submission.js';
import { decide, type PendingApproval, pendingApprovals } from './approvals.js';
import { NoCoordinatorError, unlessNoCoordinator } from './coordinator-ping.js';
import { type ClosingEvent, type FollowRunOptions, followRun, type RunFollower } from './follow-run.js';
import { type CancelledRun, cancelRun } from './run-cancel.js';
import { listRuns, type RunListFilter, type RunSummary } from './run-list.js';
import { submitAndFollow } from './services.js';

/**
 * One client of the run host, whatever the bus: a deployment's coordinators on NATS, or the
 * embedded host of this process on its in-process bus (`HostBus`). What it sends goes to the
 * coordinator service's subjects, and what it reads comes from the host's store of runs through
 * the bus's `StoredMessages` (the streams on NATS, the logs embedded), so a command, the dashboard
 * or a program acts on a run in the same words wherever the run lives.
 */

/** Options of `RunClient.submit`. */
export interface SubmitOptions {
  /** Told of every event of the run, once each, in `seq` order, from its first. */
  onEvent?: (event: RunEvent) => void;
  /** The run id to use (default: a new one); a try sent again under it starts the run once. */
  runId?: string;
  /** Milliseconds without the run's next event after which `closing` rejects. */
  idleTimeoutMs?: number;
  /** Milliseconds to keep sending a submission that no coordinator answered. */
  submitTimeoutMs?: number;
}

/** A run submitted: its id, its closing event to come, and how to stop following it. */
export interface Submitted {
  runId: string;
  closing: Promise<ClosingEvent>;
  stop(): void;
}

/** The host's runs, as one typed client reaches them. */
export interface RunClient {
  /** Starts a run, a fork (`submission.fork`) or a continuation (`submission.continues`), and follows it. */
  submit(submission: Omit<RunSubmission, 'runId'>, options?: SubmitOptions): Promise<Submitted>;
  /** The host's runs, oldest start first, those `filter` keeps. */
  list(filter?: RunListFilter): Promise<RunSummary[]>;
  /** The gates runs wait at, undecided. */
  approvals(): Promise<PendingApproval[]>;
  /** Follows run `runId` from its first event. */
  follow(runId: string, options?: FollowRunOptions): RunFollower;
  /** Decides a gate run `runId` waits at (`requestId`: that very request); resolves once recorded. */
  approve(
    runId: string,
    gate: ApprovalGate | undefined,
    decision: ApprovalDecision,
    options?: { requestId?: string; timeoutMs?: number },
  ): Promise<RunEventOf<'approval.decided'>>;
  /** Cancels run `runId`; resolves once its closing event is recorded. */
  cancel(runId: string, by: string, reason: string | null): Promise<CancelledRun>;
  /** Asks the host to take run `runId` over now, unless a live coordinator drives it. */
  resume(runId: string): Promise<Exclude<RunResumeReply, { error: unknown }>>;
  /** Lets go of the bus (or the host) this client was opened on. */
  close(): Promise<void>;
}

/** The client of the host that answers on `bus`; `close` lets go of what it was opened on. */
export function runClient(bus: Bus & StoredMessages, close: () => Promise<void>): RunClient {
  return {
    submit: (submission, options = {}) => {
      const { onEvent, ...rest } = options;
      return submitAndFollow(bus, submission, onEvent, rest);
    },
    list: (filter) => listRuns(bus, filter),
    approvals: () => pendingApprovals(bus),
    follow: (runId, options) => followRun(bus, runId, options),
    approve: (runId, gate, decision, options) => decide(bus, runId, gate, decision, options),
    cancel: (runId, by, reason) => cancelRun(bus, runId, by, reason),
    resume: (runId) => askResume(bus, runId),
    close,
  };
}

/** `pge.runs.resume`: the coordinator that drives run `runId` now, or the refusal thrown. */
async function askResume(bus: Bus, runId: string): Promise<Exclude<RunResumeReply, { error: unknown }>> {
  // A ping beside it: on a secured server no coordinator is silence for RESUME_ANSWER_MS, not "no responders".
  const asked = bus.request(subjects.resume, { runId }, { timeoutMs: RESUME_ANSWER_MS });
  const reply = RunResumeReplySchema.parse(
    await unlessNoCoordinator(bus, asked).catch((error: unknown) => {
      if (!(error instanceof NoCoordinatorError)) throw error;
      throw new NoCoordinatorError(
        `no coordinator answered the resume of run ${runId}: is one running? (pge worker --role coordinator; ${error.message})`,
        { cause: error },
      );
    }),
  );
  if ('error' in reply) throw errorFromInfo(reply.error);
  return reply;
}
