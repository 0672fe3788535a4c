import { join } from 'node:path';
import type { InspectionEvent } from 'xstate';
import type { Bus } from '../bus/bus.js';
import { subjects } from '../bus/subjects.js';
import type { RecordedRun } from '../conductor/replay.js';
import type { LostWork } from '../conductor/run-calls.js';
import type { RunHandle } from '../conductor/run-session.js';
import type { ResumeOptions, RunSpec } from '../conductor/run-spec.js';
import { BusError, errorFromInfo, UnansweredRequestError } from '../errors.js';
import { type Backoff, retry } from '../retry.js';
import type { Role, RoleResult, RunActing, RunEvent, RunSettingOptions } from '../schemas/index.js';
import { runSettingsOf } from '../schemas/index.js';
import { OPTION_DEFAULTS } from '../schemas/setting-values.js';
import { type RunSubmission, RunSubmissionReply } from '../schemas/submission.js';
import type { RunTracing } from '../telemetry/run-tracing.js';
import { NoCoordinatorError, unlessNoCoordinator } from './coordinator-ping.js';
import { type ClosingEvent, followRun, seconds } from './follow-run.js';
import { newRunId } from './run-id.js';
import type { WorkerDirectory } from './worker-presence.js';

export type { ClosingEvent } from './follow-run.js';

/**
 * The run host's contract, written against the `Bus` interface so that it holds on NATS (`pge
 * worker --role coordinator`) and on the in-process bus (the embedded host): the coordinator
 * service's options and store of runs (`startCoordinatorService` is in `coordinator-service.ts`),
 * and the client side that submits a run and follows its events.
 */

/** The queue group of coordinators: a submitted run is taken by exactly one of them. */
export const COORDINATOR_QUEUE = 'pge-coordinator';

/**
 * The settings a coordinator service runs with: the harness bounds and budgets a submission may
 * override, the longest task it takes, and the directory its runs' logs are written to when this
 * process knows it. A coordinator of a distributed deployment does not: its persistence worker
 * writes each log in its own working directory, so `run.started` names the log's file alone. The
 * API's resolved options are one; the runtime names only what it reads, so that it does not depend
 * on the API that is built on it.
 */
export type CoordinatorSettings = RunSettingOptions & {
  workingDirectory?: string | undefined;
  maxTaskBytes: number;
};

/** Options of `startCoordinatorService`. */
export interface CoordinatorServiceOptions {
  bus: Bus;
  /** Run settings that a submission may override, and where logs are said to go. */
  options: CoordinatorSettings;
  /**
   * The model names `run.started` reports for each role: fixed (the workers are this process's), or
   * those the workers heard lately say serve each role (`hearWorkers`: the workers of a distributed
   * deployment own the models). With the workers heard, a run with a cost budget is refused while
   * one of them has no price for its model.
   */
  models: Record<Role, string> | WorkerDirectory;
  /** Called with every run started, for logging. */
  onRun?: (runId: string, task: string) => void;
  /**
   * Whether a run of this id was ever started by any coordinator: on NATS, whether `PGE_EVENTS`
   * holds events of it. Asked for a run id the submitter chose; without it, only this
   * coordinator's own runs are known.
   */
  runExists?: (runId: string) => Promise<boolean>;
  /**
   * How coordinators share runs (on NATS: `natsRunOwnership`): a new run's id is claimed at once
   * (so that two coordinators can never both start it), an ended run's claim is released, and a
   * run whose owner died can be taken over (`CoordinatorService.takeOver`), and a call that waits
   * long looks for its result in what the workers stored (`CoordinatorOptions.storedResult`).
   * Without it a run lives and dies with this coordinator.
   */
  ownership?: RunOwnership;
  /** Milliseconds between a waiting call's looks for its stored result (default `RESULT_CHECK_MS`). */
  resultCheckMs?: number;
  /** With `ownership`: how those looks tell a lost work item, and send it again (`CoordinatorOptions.lostWork`). */
  lostWork?: LostWork;
  /** Tracing of the coordinator's runs (`traceRuns`). */
  tracing?: RunTracing;
  /** XState inspection of every run's actors (`@statelyai/inspect`), in this process. */
  inspect?: (event: InspectionEvent) => void;
  /** The clock events are stamped with (tests). */
  clock?: () => number;
  /**
   * The directory the generator workers keep runs' workspaces in, one per run id (their
   * `<working-dir>/workspaces`): a continued run's workspace is copied there from the earlier
   * run's before it starts. Default `<options.workingDirectory>/workspaces` when this process
   * knows that directory; without either, nothing is copied and the new run's workspace starts empty.
   */
  workspaces?: string;
  /**
   * The acting roles' tools, validators and workspace of a run, recorded in its `run.started` when
   * this process holds the workers (the embedded host); a deployment's workers are elsewhere.
   */
  acting?: (runId: string) => RunActing;
}

/** Runs shared between coordinators: who owns which, and what a run left in the transport. */
export interface RunOwnership {
  /** This coordinator's name, recorded in `run.resumed` when it takes a run over. */
  readonly owner: string;
  /** Claims a new run's id; false when another run has it. */
  claim(runId: string): Promise<boolean>;
  /** Releases the claim of a run that ended here. */
  release(runId: string): Promise<void>;
  /**
   * Stops renewing the claim of a run this coordinator took but cannot drive (its events could not
   * be read): the claim expires, and the run is taken over again, by this coordinator or another.
   */
  letExpire(runId: string): void;
  /** Takes over a run whose owner stopped renewing its claim; false when another coordinator won it. */
  takeOver(runId: string): Promise<boolean>;
  /** Takes a run's claim now unless a live owner holds it (`pge resume --nats`): the owner afterwards. */
  takeOverNow(runId: string): Promise<{ owner: string; taken: boolean }>;
  /** Every stored event of the run, in seq order. */
  events(runId: string): Promise<readonly RunEvent[]>;
  /** The result a worker stored for a request of the run, if any. */
  storedResult(runId: string, requestId: string): Promise<RoleResult | null>;
}

/** The file name of a run's log, in whatever directory its writer keeps logs. */
export function logFileOf(runId: string): string {
  return `pge_shared_state_${runId}.md`;
}

/**
 * The model names of a run's roles: the workers' own, several of one role comma-separated; a role
 * whose workers have not been heard yet (a coordinator that started a moment ago) says so.
 */
export function modelNames(models: Record<Role, string> | WorkerDirectory): Record<Role, string> {
  if (!isDirectory(models)) return models;
  const named = (role: Role) => models.models(role).join(', ') || `unknown (no ${role} worker heard yet)`;
  return { planner: named('planner'), generator: named('generator'), evaluator: named('evaluator') };
}

/** Whether `models` are the workers heard lately (a deployment's), not fixed names. */
export const isDirectory = (models: Record<Role, string> | WorkerDirectory): models is WorkerDirectory =>
  typeof (models as WorkerDirectory).unpriced === 'function';

/**
 * A run of a submission: its settings, the coordinator's options with the submission's overrides,
 * and `acting` when this process holds the workers.
 */
export function runSpecOf(
  runId: string,
  submission: RunSubmission & { task: string },
  options: CoordinatorSettings,
  models: Record<Role, string> | WorkerDirectory,
  acting?: RunActing,
): RunSpec {
  return {
    runId,
    task: submission.task,
    logPath: join(options.workingDirectory ?? '', logFileOf(runId)),
    settings: runSettingsOf(
      { ...options, ...submission.options },
      { models: modelNames(models), ...(acting === undefined ? {} : { acting }) },
    ),
    continues: submission.continues,
    job: submission.job,
    startedBy: submission.by,
  };
}

/** A running coordinator service. */
export interface CoordinatorService {
  /** Runs in progress. */
  readonly active: ReadonlyMap<string, { interrupt(reason?: string): void; done: Promise<unknown> }>;
  /**
   * Stops taking submissions. `finish` waits for the runs in progress; `interrupt` ends them as
   * interrupted (their logs stay consistent), then waits for their closing events; `leave` stops
   * taking their results and leaves them (the embedded API's `close`, whose workers are gone).
   */
  stop(mode?: 'finish' | 'interrupt' | 'leave'): Promise<void>;
  /**
   * Starts a run whose spec this process built (the embedded API: its log path, plan, job), claimed
   * and tracked as a submitted run is. Throws `runIdTaken` for an id used before.
   */
  startRun(spec: RunSpec): Promise<RunHandle>;
  /** Continues a recorded run in this process (`resume` of a log), tracked as a taken-over run is. */
  resumeRun(recorded: RecordedRun, options: ResumeOptions): RunHandle;
  /**
   * Takes over a run whose owner died (`ownership` required): rebuilds it from its stored events,
   * applies a result already stored for the request in flight, records `run.resumed` with this
   * coordinator as its owner, and drives it on. False when another coordinator won the run, or it
   * had already ended.
   */
  takeOver(runId: string): Promise<boolean>;
  /** Lets a run go that another coordinator took over (this one's claim was lost). */
  lose(runId: string, owner: string): void;
}

/** How long one try of a submission waits for its answer before it is sent again (same run id). */
const SUBMIT_TRY_MS = 10_000;
/** Pauses between tries of a submission. */
const SUBMIT_RETRY: Backoff = { firstMs: 250, maxMs: 2_000 };

/**
 * Sends `submission` (its run id chosen) until a coordinator answers it, for up to `withinMs`: a try
 * that no coordinator answers, or that one answers with a `BusError` (JetStream electing a leader,
 * a server lost), is sent again with growing pauses; a coordinator that finds the run started by
 * an earlier try answers with it, so the run starts once. A refusal is final at once.
 */
async function submitUntilAnswered(
  bus: Bus,
  submission: RunSubmission & { runId: string },
  tryMs: number,
  withinMs: number,
): Promise<void> {
  const { runId } = submission;
  const deadline = performance.now() + withinMs;
  const submit = async (tries: number) => {
    const timeoutMs = Math.max(1, Math.min(tryMs, Math.ceil(deadline - performance.now())));
    const request = bus.request(subjects.submit, submission, { timeoutMs });
    // Across a secured server's accounts no coordinator is silence, not "no responders": as it first
    // submits, the client pings too, and no answer to either within COORDINATOR_PING_MS is final.
    const reply = RunSubmissionReply.parse(await (tries === 1 ? unlessNoCoordinator(bus, request) : request));
    if ('error' in reply) throw errorFromInfo(reply.error);
  };
  await retry(submit, {
    ...SUBMIT_RETRY,
    // Only the transport's failures are asked again: a refusal (a taken id, a bad task) stays one.
    retryable: (failure) => failure instanceof BusError && !(failure instanceof NoCoordinatorError),
    // The last try starts a first pause before the bound, to have that long to be answered: one cut
    // to a millisecond would end in a timeout that hides why the tries before it failed.
    deadline: deadline - SUBMIT_RETRY.firstMs,
    giveUp: (failure, tries) => {
      if (failure instanceof NoCoordinatorError)
        return new UnansweredRequestError(
          `no coordinator answered the submission of run ${runId}: is one running? (pge worker --role coordinator; ${failure.message})`,
          { cause: failure },
        );
      return failure instanceof BusError ? gaveUp(runId, tries, withinMs, failure) : failure;
    },
  });
}

/** The error of a submission that no try got answered within `withinMs`. */
function gaveUp(runId: string, tries: number, withinMs: number, last: BusError): BusError {
  const asked = `${tries} ${tries === 1 ? 'try' : 'tries'} in ${seconds(withinMs)}`;
  if (last instanceof UnansweredRequestError)
    return new UnansweredRequestError(
      `no coordinator answered the submission of run ${runId}: is one running? (pge worker --role coordinator; ${asked}, the last: ${last.message})`,
      { cause: last },
    );
  return new BusError(`run ${runId} could not be submitted (${asked}, the last: ${last.message})`, {
    cause: last,
  });
}

/**
 * Submits a run and follows it (`followRun`): the run id is chosen here, so that the run's events
 * are read from its first whatever the timing, and resolves once the run is submitted, with the run
 * id and the closing event to come. `onEvent` sees every event once, in `seq` order; with
 * `idleTimeoutMs`, `closing` rejects with a `BusError` when the run makes no progress for that long.
 * A try that no coordinator answers within `timeoutMs` (default 10 s), or that fails on the transport
 * (a server lost, JetStream electing a leader), is sent again under the same run id for up to
 * `submitTimeoutMs` (default `OPTION_DEFAULTS.submitTimeoutMs`), then rejects with a `BusError`.
 */
export async function submitAndFollow(
  bus: Bus,
  submission: Omit<RunSubmission, 'runId'>,
  onEvent: (event: RunEvent) => void = () => {},
  options: { timeoutMs?: number; runId?: string; idleTimeoutMs?: number; submitTimeoutMs?: number } = {},
): Promise<{ runId: string; closing: Promise<ClosingEvent>; stop: () => void }> {
  const runId = options.runId ?? newRunId();
  // Followed before it is submitted: on a bus that does not store events, nothing is missed either.
  const follower = followRun(bus, runId, {
    onEvent,
    ...(options.idleTimeoutMs === undefined ? {} : { idleTimeoutMs: options.idleTimeoutMs }),
  });
  // A stall while the submission is still under way is told through `closing` all the same.
  follower.closing.catch(() => undefined);
  try {
    await submitUntilAnswered(
      bus,
      { ...submission, runId },
      options.timeoutMs ?? SUBMIT_TRY_MS,
      options.submitTimeoutMs ?? OPTION_DEFAULTS.submitTimeoutMs,
    );
    return { runId, closing: follower.closing, stop: follower.stop };
  } catch (error) {
    follower.stop();
    throw error;
  }
}
