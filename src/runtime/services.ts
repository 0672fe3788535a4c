import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Bus, BusSubscription } from '../bus/bus.js';
import { answerable, publishEvent, subscribeApprovals, subscribeControl } from '../bus/channels.js';
import { subjects } from '../bus/subjects.js';
import {
  createCoordinator,
  type RunHandle,
  type RunSpec,
  resumedSpec,
  runIdTaken,
} from '../conductor/coordinator.js';
import { readRecordedRun } from '../conductor/replay.js';
import type { LostWork } from '../conductor/run-calls.js';
import {
  BusError,
  ConfigurationError,
  describeError,
  errorFromInfo,
  PgeError,
  RunTakenOverError,
  UnansweredRequestError,
} from '../errors.js';
import type { Role, RoleResult, RunEvent, RunEventOf, RunSettingOptions } from '../schemas/index.js';
import { isClosingEvent, runSettingsOf } from '../schemas/index.js';
import { OPTION_DEFAULTS, WORKSPACES_DIR } from '../schemas/setting-values.js';
import {
  type RunCancelReply,
  type RunCancelRequest,
  type RunFork,
  type RunResumeReply,
  type RunResumeRequest,
  type RunSubmission,
  RunSubmissionReply,
} from '../schemas/submission.js';
import type { RunTracing } from '../telemetry/run-tracing.js';
import { copyWorkspace } from './continue-run.js';
import { answerPings, NoCoordinatorError, unlessNoCoordinator } from './coordinator-ping.js';
import { type ClosingEvent, followRun, seconds } from './follow-run.js';
import { newRunId } from './run-id.js';
import { checkTask } from './task.js';
import type { WorkerDirectory } from './worker-presence.js';

export type { ClosingEvent } from './follow-run.js';

/**
 * The distributed deployment's services, written against the `Bus` interface so that they run on
 * NATS in separate processes (`pge worker --role coordinator`) and, in tests, on the in-process
 * bus: a coordinator that takes runs submitted on `pge.runs.submit`, and the client side that
 * submits a run and follows its events.
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
  /**
   * The directory the generator workers keep runs' workspaces in, one per run id (their
   * `<working-dir>/workspaces`): a continued run's workspace is copied there from the earlier
   * run's before it starts. Default `<options.workingDirectory>/workspaces` when this process
   * knows that directory; without either, nothing is copied and the new run's workspace starts empty.
   */
  workspaces?: string;
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

const isDirectory = (models: Record<Role, string> | WorkerDirectory): models is WorkerDirectory =>
  typeof (models as WorkerDirectory).unpriced === 'function';

/**
 * Refuses a run with a cost budget while a worker heard lately has no price for its model: its calls
 * would count as free, so the budget could never stop the run (`resolveOptions` refuses an embedded
 * run's for the same reason). A worker not heard yet is not known, so not checked.
 */
function checkCostCanBeKept(spec: RunSpec, models: Record<Role, string> | WorkerDirectory): void {
  if (spec.settings.budgets.maxCostUsd === null || !isDirectory(models)) return;
  const unpriced = models.unpriced();
  const first = unpriced[0];
  if (first === undefined) return;
  const named = unpriced.map((p) => `${p.model} (${p.role} worker ${p.worker})`).join(', ');
  throw new ConfigurationError(
    `maxCostUsd cannot be kept: no price is known for ${named}, whose calls would count as free; ` +
      `give the workers a price (pge worker --price ${first.model}=<input>,<output>, or prices in their config file)`,
  );
}

/** A run of a submission: its settings, the coordinator's options with the submission's overrides. */
export function runSpecOf(
  runId: string,
  submission: RunSubmission & { task: string },
  options: CoordinatorSettings,
  models: Record<Role, string> | WorkerDirectory,
): RunSpec {
  return {
    runId,
    task: submission.task,
    logPath: join(options.workingDirectory ?? '', logFileOf(runId)),
    settings: runSettingsOf({ ...options, ...submission.options }, { models: modelNames(models) }),
    continues: submission.continues,
    job: submission.job,
    startedBy: submission.by,
  };
}

/**
 * A continued run's workspace starts as a copy of the earlier run's, in the directory where the
 * generators keep workspaces (`workspaces`, shared with them: one machine, or a shared volume);
 * with none known, or no earlier workspace there, the new run's workspace starts empty, and the
 * kept steps' artifacts still reach their dependents through the run's events.
 */
async function carryWorkspace(workspaces: string | undefined, from: string, to: string): Promise<void> {
  if (workspaces === undefined) return;
  const target = join(workspaces, to);
  if (existsSync(target)) return;
  await copyWorkspace(from, workspaces, target);
}

/** A run a submission started, and its task (a fork's is its parent's). */
interface Started {
  handle: RunHandle;
  task: string;
}

/** A running coordinator service. */
export interface CoordinatorService {
  /** Runs in progress. */
  readonly active: ReadonlyMap<string, { interrupt(reason?: string): void; done: Promise<unknown> }>;
  /**
   * Stops taking submissions. `finish` waits for the runs in progress; `interrupt` ends them as
   * interrupted (their logs stay consistent), then waits for their closing events.
   */
  stop(mode?: 'finish' | 'interrupt'): Promise<void>;
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

/**
 * Takes runs submitted on `pge.runs.submit` (as one member of the coordinators' queue group),
 * replies with the run id, and drives each run's statechart on the bus. A submission with a run
 * id used before, a task `checkTask` refuses, or a fork `forkOfStoredRun` refuses, is answered with
 * the error and starts nothing.
 */
export function startCoordinatorService(service: CoordinatorServiceOptions): CoordinatorService {
  const { bus, options, models } = service;
  const { ownership } = service;
  const workspaces =
    service.workspaces ??
    (options.workingDirectory === undefined ? undefined : join(options.workingDirectory, WORKSPACES_DIR));
  const coordinator = createCoordinator({
    bus,
    ...(service.tracing ? { tracing: service.tracing } : {}),
    ...(ownership === undefined
      ? {}
      : { storedResult: (runId, requestId) => ownership.storedResult(runId, requestId) }),
    ...(service.resultCheckMs === undefined ? {} : { resultCheckMs: service.resultCheckMs }),
    ...(service.lostWork === undefined ? {} : { lostWork: service.lostWork }),
  });
  const active = new Map<string, RunHandle & { settled: Promise<unknown> }>();
  /** Why a run with these stored events cannot be resumed (none stored, or it has ended), or null. */
  const notResumable = (runId: string, events: readonly RunEvent[]): string | null => {
    const last = events.at(-1);
    if (last === undefined) return `no run ${runId}: the stream holds none of its events`;
    return isClosingEvent(last) ? `run ${runId} has ended (${last.type}): nothing to resume` : null;
  };

  /**
   * Drives on a run whose claim this coordinator just took, from its stored events. A run that
   * ended (its owner died after its closing event) or never started has nothing to drive: its
   * claim is released, and the reason returned. So is the claim of a run whose stored events are
   * no run's record (no takeover would do better), with the error thrown.
   */
  const driveTaken = async (own: RunOwnership, runId: string): Promise<string | null> => {
    let events: readonly RunEvent[];
    try {
      events = await own.events(runId);
    } catch (error) {
      // Unread (a cluster electing the stream's leader, say), the run would stay claimed by a
      // coordinator that does not drive it: its claim is left to expire, for another takeover.
      own.letExpire(runId);
      throw error;
    }
    const problem = notResumable(runId, events);
    if (problem !== null) {
      await own.release(runId);
      return problem;
    }
    let handle: RunHandle;
    try {
      handle = coordinator.resumeRun(readRecordedRun(events, `run ${runId} in the stream`), {
        owner: own.owner,
        storedResult: (requestId) => own.storedResult(runId, requestId),
      });
    } catch (error) {
      await own.release(runId);
      throw error;
    }
    track(handle);
    return null;
  };

  /**
   * `pge.runs.resume`: takes a run over now, unless a live coordinator drives it; replies with its
   * owner, or why it cannot be resumed.
   */
  const resumeNow = async (runId: string): Promise<RunResumeReply> => {
    if (ownership === undefined) throw new ConfigurationError('this coordinator does not share runs');
    if (active.has(runId)) {
      // Its closing event may be stored a moment before this coordinator lets the run go.
      const ended = notResumable(runId, await ownership.events(runId));
      if (ended !== null) throw new ConfigurationError(ended);
      return { runId, owner: ownership.owner, takenOver: false };
    }
    const { owner, taken } = await ownership.takeOverNow(runId);
    if (!taken) return { runId, owner, takenOver: false };
    const problem = await driveTaken(ownership, runId);
    if (problem !== null) throw new ConfigurationError(problem);
    return { runId, owner, takenOver: true };
  };

  /** Follows a run this coordinator drives until it ends here, then releases its claim. */
  const track = (handle: RunHandle): void => {
    const { runId } = handle;
    const settled = handle.done.then(
      () => ownership?.release(runId),
      (error: unknown) => {
        // Its new owner holds the claim now. Or this coordinator holds it still, and another
        // recorded events of the run meanwhile (it still sent them): its claim is left to expire,
        // and the run is taken over from what the stream holds.
        if (error instanceof RunTakenOverError) return ownership?.letExpire(runId);
        console.error(`pge coordinator: run ${runId} failed to complete:`, error);
        return ownership?.release(runId);
      },
    );
    active.set(runId, { ...handle, settled });
    void settled.finally(() => active.delete(runId));
  };
  // Commands for runs: this coordinator acts on its own runs and ignores the others'.
  const control = subscribeControl(bus, (command) => active.get(command.runId)?.interrupt(command.reason));
  const approvals = subscribeApprovals(bus, (approval) =>
    active
      .get(approval.runId)
      ?.decide(
        approval.gate,
        { decision: approval.action, reason: approval.reason, by: approval.by },
        approval.requestId,
      ),
  );
  /** Starts the run a submission of a task asks for; null when an earlier try of it started it. */
  const startSubmitted = async (
    runId: string,
    submission: RunSubmission & { task: string },
  ): Promise<Started | null> => {
    checkTask(submission.task, options.maxTaskBytes);
    const spec = runSpecOf(runId, submission, options, models);
    checkCostCanBeKept(spec, models);
    if ((await admit(runId, submission, service)) === 'started') return null;
    if (submission.continues !== undefined)
      await carryWorkspace(workspaces, submission.continues.runId, runId);
    return { handle: coordinator.startRun(spec), task: submission.task };
  };

  /**
   * Starts the fork a submission asks for (`RunFork`): its events are made from its parent's stored
   * ones (`forkOfStoredRun`, which refuses a parent unknown, not ended or without the step, and
   * settings that would change what the fork takes), its workspace starts as a copy of the
   * parent's (`carryWorkspace`), they are recorded under its run id, and the fork is driven on from
   * them as a resumed run is, live from the step. Null when an earlier try of it started it.
   */
  const startFork = async (
    runId: string,
    submission: RunSubmission & { fork: RunFork },
  ): Promise<Started | null> => {
    const { fork, by } = submission;
    if (ownership === undefined)
      throw new ConfigurationError(
        `this coordinator does not share runs: it cannot read run ${fork.runId}'s events to fork it`,
      );
    const { forkOfStoredRun } = await import('./fork-log.js');
    const events = await forkOfStoredRun(await ownership.events(fork.runId), fork, {
      runId,
      logPath: join(options.workingDirectory ?? '', logFileOf(runId)),
      models: modelNames(models),
      ...(by === undefined ? {} : { startedBy: by }),
    });
    const recorded = readRecordedRun(events, `the fork ${runId}`);
    checkCostCanBeKept(resumedSpec(recorded, { owner: ownership.owner }), models);
    // The submission as it came: with the run id its submitter chose, which an earlier try may have started.
    if ((await admit(runId, submission, service)) === 'started') return null;
    try {
      await carryWorkspace(workspaces, fork.runId, runId);
      // In seq order, each once the one before it is stored (`NatsBus.storeEvent`); no work item is
      // queued: every request among them is answered among them, or asked again once the fork is live.
      await Promise.all(events.map((event) => publishEvent(bus, event)));
    } catch (error) {
      // Its events partly stored, the fork is taken over from them once its claim expires (by this
      // coordinator or another), and a try of the submission again is answered with its id.
      ownership.letExpire(runId);
      throw error;
    }
    try {
      const handle = coordinator.resumeRun(recorded, { owner: ownership.owner });
      return { handle, task: recorded.started.payload.task };
    } catch (error) {
      await ownership.release(runId);
      throw error;
    }
  };

  const subscription: BusSubscription = bus.subscribe(
    subjects.submit,
    async (message) => {
      if (!answerable(bus, message)) return;
      const submission = message.data as RunSubmission;
      const runId = submission.runId ?? newRunId();
      let started: Started | null;
      try {
        started =
          submission.fork === undefined
            ? await startSubmitted(runId, submission as RunSubmission & { task: string })
            : await startFork(runId, submission as RunSubmission & { fork: RunFork });
      } catch (error) {
        await message.respond({ error: describeError(refusal(runId, error)) });
        return;
      }
      // Null: an earlier try of this very submission started it (its answer was lost, or late).
      if (started !== null) {
        track(started.handle);
        service.onRun?.(runId, started.task);
      }
      await message.respond({ runId });
    },
    { queue: COORDINATOR_QUEUE },
  );
  // Cancels: every coordinator hears each one, and only the one driving the run acts and answers.
  const cancels = bus.subscribe(subjects.cancelRun, async (message) => {
    const { runId, by, reason } = message.data as RunCancelRequest;
    const run = active.get(runId);
    if (run === undefined || !answerable(bus, message)) return;
    run.cancel(by, reason ?? undefined);
    await message.respond({ runId, owner: ownership?.owner ?? 'coordinator' } satisfies RunCancelReply);
  });
  const pings = answerPings(bus, ownership?.owner ?? COORDINATOR_QUEUE, COORDINATOR_QUEUE);
  const resumes = bus.subscribe(
    subjects.resume,
    async (message) => {
      if (!answerable(bus, message)) return;
      const { runId } = message.data as RunResumeRequest;
      let reply: RunResumeReply;
      try {
        reply = await resumeNow(runId);
      } catch (error) {
        reply = { error: describeError(error) };
      }
      await message.respond(reply);
    },
    { queue: COORDINATOR_QUEUE },
  );
  return {
    active,
    async stop(mode = 'finish') {
      subscription.unsubscribe();
      resumes.unsubscribe();
      cancels.unsubscribe();
      pings.unsubscribe();
      control.unsubscribe();
      approvals.unsubscribe();
      if (mode === 'interrupt') for (const run of active.values()) run.interrupt();
      await Promise.all([...active.values()].map((r) => r.settled));
      coordinator.close();
    },
    async takeOver(runId) {
      if (ownership === undefined) throw new ConfigurationError('taking runs over needs run ownership');
      if (active.has(runId) || !(await ownership.takeOver(runId))) return false;
      return (await driveTaken(ownership, runId)) === null;
    },
    lose(runId, owner) {
      active.get(runId)?.abandon(owner);
    },
  };
}

/**
 * Whether a submission starts a run here (`'start'`, its id claimed when runs are shared), or was
 * started already by an earlier try of the same submission (`'started'`): the same run id and the
 * same task (or fork), sent again by a submitter whose answer was lost. Throws `runIdTaken` for an
 * id whose run started otherwise (or whose start the stream no longer holds), and a retryable
 * `BusError` while nothing of its run can be read yet: the id claimed by a try that has not stored
 * its start, or a run the lookup found whose events a read does not give back yet (an earlier try
 * may be starting it: asked again, it is answered).
 */
async function admit(
  runId: string,
  submission: RunSubmission,
  service: Pick<CoordinatorServiceOptions, 'runExists' | 'ownership'>,
): Promise<'start' | 'started'> {
  const { ownership } = service;
  /** 'started' when the run of this id is this submission's, by the start it stored. */
  const startedBefore = async (found: 'stored' | 'claimed'): Promise<'started'> => {
    // Without shared runs the stream is not read here: only this coordinator's own runs are known.
    if (ownership === undefined || submission.runId === undefined) throw runIdTaken(runId);
    // A run's events are stored one after another, from its start: the first read is its start.
    const first = (await ownership.events(runId))[0];
    if (first === undefined)
      throw new BusError(
        found === 'stored'
          ? `run ${runId} is stored but its start is not read yet: ask again`
          : `run ${runId} is claimed but not started yet: ask again`,
      );
    if (first.type === 'run.started' && isStartOf(first, submission)) return 'started';
    throw runIdTaken(runId);
  };
  // Only an id the submitter chose can be old. `startRun` refuses an id of this coordinator's own
  // runs, checked after the lookup's await, so two submissions of one id cannot both pass.
  if (submission.runId !== undefined && (await service.runExists?.(runId))) return startedBefore('stored');
  // The claim is atomic across coordinators: of two submissions of one id, one is refused.
  if (ownership === undefined || (await ownership.claim(runId))) return 'start';
  return startedBefore('claimed');
}

/** Whether `started` is what `submission` starts: a run of its task, or its fork of the same run and step. */
function isStartOf(started: RunEventOf<'run.started'>, { task, fork }: RunSubmission): boolean {
  if (fork === undefined) return started.payload.task === task;
  const { parent } = started.payload;
  return parent?.runId === fork.runId && parent.fromStep === fork.fromStep;
}

/**
 * The error a submission is answered with: pge's own as it is (a refusal, or a `BusError` that says
 * to ask again), anything else as a retryable `BusError`, since admitting a run only validates and
 * asks the transport (a lookup or a claim that JetStream did not answer during an election).
 */
function refusal(runId: string, error: unknown): PgeError {
  if (error instanceof PgeError) return error;
  return new BusError(`cannot admit run ${runId} now: ${describeError(error).message}`, { cause: error });
}

/** How long one try of a submission waits for its answer before it is sent again (same run id). */
const SUBMIT_TRY_MS = 10_000;
const MIN_SUBMIT_PAUSE_MS = 250;
const MAX_SUBMIT_PAUSE_MS = 2_000;

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
  for (
    let tries = 1, pause = MIN_SUBMIT_PAUSE_MS;
    ;
    tries++, pause = Math.min(pause * 2, MAX_SUBMIT_PAUSE_MS)
  ) {
    let failure: unknown;
    try {
      const timeoutMs = Math.max(1, Math.min(tryMs, Math.ceil(deadline - performance.now())));
      const request = bus.request(subjects.submit, submission, { timeoutMs });
      // Across a secured server's accounts no coordinator is silence, not "no responders": as it first
      // submits, the client pings too, and no answer to either within COORDINATOR_PING_MS is final.
      const reply = RunSubmissionReply.parse(
        await (tries === 1 ? unlessNoCoordinator(bus, request) : request),
      );
      if (!('error' in reply)) return;
      failure = errorFromInfo(reply.error);
    } catch (error) {
      failure = error;
    }
    if (failure instanceof NoCoordinatorError)
      throw new UnansweredRequestError(
        `no coordinator answered the submission of run ${runId}: is one running? (pge worker --role coordinator; ${failure.message})`,
        { cause: failure },
      );
    // Only the transport's failures are asked again: a refusal (a taken id, a bad task) stays one.
    if (!(failure instanceof BusError)) throw failure;
    if (performance.now() + pause >= deadline) throw gaveUp(runId, tries, withinMs, failure);
    await sleep(pause);
  }
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
