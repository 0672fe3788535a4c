import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { BusSubscription } from '../bus/bus.js';
import { answerable, publishEvent, subscribeApprovals, subscribeControl } from '../bus/channels.js';
import { subjects } from '../bus/subjects.js';
import { type Coordinator, createCoordinator, runIdTaken } from '../conductor/coordinator.js';
import { readRecordedRun } from '../conductor/replay.js';
import type { RunHandle } from '../conductor/run-session.js';
import { type RunSpec, resumedSpec } from '../conductor/run-spec.js';
import { BusError, ConfigurationError, describeError, PgeError, RunTakenOverError } from '../errors.js';
import type { Role, RunEvent, RunEventOf } from '../schemas/index.js';
import { isClosingEvent } from '../schemas/index.js';
import { WORKSPACES_DIR } from '../schemas/setting-values.js';
import type {
  RunCancelReply,
  RunCancelRequest,
  RunFork,
  RunResumeReply,
  RunResumeRequest,
  RunSubmission,
} from '../schemas/submission.js';
import { copyWorkspace } from './continue-run.js';
import { answerPings } from './coordinator-ping.js';
import { newRunId } from './run-id.js';
import {
  COORDINATOR_QUEUE,
  type CoordinatorService,
  type CoordinatorServiceOptions,
  isDirectory,
  logFileOf,
  modelNames,
  type RunOwnership,
  runSpecOf,
} from './services.js';
import { checkTask } from './task.js';
import type { WorkerDirectory } from './worker-presence.js';

/**
 * The coordinator service: the one place a run is started, resumed, forked, continued, cancelled
 * and decided, answering on the run subjects (`pge.runs.submit`, `pge.runs.cancel`,
 * `pge.runs.resume`, a run's control and approval subjects) whichever bus carries them: NATS, in
 * `pge worker --role coordinator`, or the in-process bus of the embedded host. It drives each run's
 * statechart (`createCoordinator`) and keeps its runs in a store (`RunOwnership`: the streams and KV
 * on NATS, the markdown logs embedded).
 */

/** What the parts of one running service share. */
interface Service {
  readonly options: CoordinatorServiceOptions;
  readonly coordinator: Coordinator;
  /** The runs this coordinator drives, by id, each with its end (its claim released or let go). */
  readonly active: Map<string, RunHandle & { settled: Promise<unknown> }>;
  /** Where the generators keep runs' workspaces, when this process knows it. */
  readonly workspaces: string | undefined;
}

/** A run a submission started, and its task (a fork's is its parent's). */
interface Started {
  handle: RunHandle;
  task: string;
}

/**
 * Takes runs submitted on `pge.runs.submit` (as one member of the coordinators' queue group),
 * replies with the run id, and drives each run's statechart on the bus. A submission with a run
 * id used before, a task `checkTask` refuses, or a fork `forkOfStoredRun` refuses, is answered with
 * the error and starts nothing.
 */
export function startCoordinatorService(options: CoordinatorServiceOptions): CoordinatorService {
  const { bus, ownership } = options;
  const service: Service = {
    options,
    coordinator: createCoordinator({
      bus,
      ...(options.tracing ? { tracing: options.tracing } : {}),
      ...(options.inspect ? { inspect: options.inspect } : {}),
      ...(options.clock ? { clock: options.clock } : {}),
      ...(ownership === undefined
        ? {}
        : { storedResult: (runId, requestId) => ownership.storedResult(runId, requestId) }),
      ...(options.resultCheckMs === undefined ? {} : { resultCheckMs: options.resultCheckMs }),
      ...(options.lostWork === undefined ? {} : { lostWork: options.lostWork }),
    }),
    active: new Map(),
    workspaces:
      options.workspaces ??
      (options.options.workingDirectory === undefined
        ? undefined
        : join(options.options.workingDirectory, WORKSPACES_DIR)),
  };
  const { active } = service;
  const subscriptions: BusSubscription[] = [
    // Commands for runs: this coordinator acts on its own runs and ignores the others'.
    subscribeControl(bus, (command) => active.get(command.runId)?.interrupt(command.reason)),
    subscribeApprovals(bus, (approval) =>
      active
        .get(approval.runId)
        ?.decide(
          approval.gate,
          { decision: approval.action, reason: approval.reason, by: approval.by },
          approval.requestId,
        ),
    ),
    answerSubmissions(service),
    answerCancels(service),
    answerPings(bus, ownership?.owner ?? COORDINATOR_QUEUE, COORDINATOR_QUEUE),
    answerResumes(service),
  ];
  return {
    active,
    async stop(mode = 'finish') {
      for (const subscription of subscriptions) subscription.unsubscribe();
      if (mode === 'interrupt') for (const run of active.values()) run.interrupt();
      if (mode !== 'leave') await Promise.all([...active.values()].map((r) => r.settled));
      service.coordinator.close();
    },
    async startRun(spec) {
      if (ownership !== undefined && !(await ownership.claim(spec.runId))) throw runIdTaken(spec.runId);
      let handle: RunHandle;
      try {
        handle = service.coordinator.startRun(spec);
      } catch (error) {
        await ownership?.release(spec.runId);
        throw error;
      }
      track(service, handle, true);
      return handle;
    },
    resumeRun(recorded, resume) {
      const handle = service.coordinator.resumeRun(recorded, resume);
      track(service, handle, true);
      return handle;
    },
    async takeOver(runId) {
      if (ownership === undefined) throw new ConfigurationError('taking runs over needs run ownership');
      if (active.has(runId) || !(await ownership.takeOver(runId))) return false;
      return (await driveTaken(service, ownership, runId)) === null;
    },
    lose(runId, owner) {
      active.get(runId)?.abandon(owner);
    },
  };
}

/** `pge.runs.submit`: starts the run, or the fork, a submission asks for, and answers with its id or the refusal. */
function answerSubmissions(service: Service): BusSubscription {
  const { bus } = service.options;
  return bus.subscribe(
    subjects.submit,
    async (message) => {
      if (!answerable(bus, message)) return;
      const submission = message.data as RunSubmission;
      const runId = submission.runId ?? newRunId();
      let started: Started | null;
      try {
        started =
          submission.fork === undefined
            ? await startSubmitted(service, runId, submission as RunSubmission & { task: string })
            : await startFork(service, runId, submission as RunSubmission & { fork: RunFork });
      } catch (error) {
        await message.respond({ error: describeError(refusal(runId, error)) });
        return;
      }
      // Null: an earlier try of this very submission started it (its answer was lost, or late).
      if (started !== null) {
        track(service, started.handle);
        service.options.onRun?.(runId, started.task);
      }
      await message.respond({ runId });
    },
    { queue: COORDINATOR_QUEUE },
  );
}

/** `pge.runs.cancel`: every coordinator hears each one, and only the one driving the run acts and answers. */
function answerCancels(service: Service): BusSubscription {
  const { bus, ownership } = service.options;
  return bus.subscribe(subjects.cancelRun, async (message) => {
    const { runId, by, reason } = message.data as RunCancelRequest;
    const run = service.active.get(runId);
    if (run === undefined || !answerable(bus, message)) return;
    run.cancel(by, reason ?? undefined);
    await message.respond({ runId, owner: ownership?.owner ?? 'coordinator' } satisfies RunCancelReply);
  });
}

/** `pge.runs.resume`: takes a run over now (`resumeNow`), or answers why not. */
function answerResumes(service: Service): BusSubscription {
  const { bus } = service.options;
  return bus.subscribe(
    subjects.resume,
    async (message) => {
      if (!answerable(bus, message)) return;
      const { runId } = message.data as RunResumeRequest;
      let reply: RunResumeReply;
      try {
        reply = await resumeNow(service, runId);
      } catch (error) {
        reply = { error: describeError(error) };
      }
      await message.respond(reply);
    },
    { queue: COORDINATOR_QUEUE },
  );
}

/**
 * Follows a run this coordinator drives until it ends here, then releases its claim. A run that
 * fails to complete is reported, unless `caller` awaits it (a run started in this process, whose
 * caller gets the error from `done`).
 */
function track(service: Service, handle: RunHandle, caller = false): void {
  const { runId } = handle;
  const { ownership } = service.options;
  const settled = handle.done.then(
    () => ownership?.release(runId),
    (error: unknown) => {
      // Its new owner holds the claim now. Or this coordinator holds it still, and another
      // recorded events of the run meanwhile (it still sent them): its claim is left to expire,
      // and the run is taken over from what the stream holds.
      if (error instanceof RunTakenOverError) return ownership?.letExpire(runId);
      if (!caller) console.error(`pge coordinator: run ${runId} failed to complete:`, error);
      return ownership?.release(runId);
    },
  );
  service.active.set(runId, { ...handle, settled });
  void settled.finally(() => service.active.delete(runId));
}

/** Why a run with these stored events cannot be resumed (none stored, or it has ended), or null. */
function notResumable(runId: string, events: readonly RunEvent[]): string | null {
  const last = events.at(-1);
  if (last === undefined) return `no run ${runId}: the stream holds none of its events`;
  return isClosingEvent(last) ? `run ${runId} has ended (${last.type}): nothing to resume` : null;
}

/**
 * Drives on a run whose claim this coordinator just took, from its stored events. A run that
 * ended (its owner died after its closing event) or never started has nothing to drive: its
 * claim is released, and the reason returned. So is the claim of a run whose stored events are
 * no run's record (no takeover would do better), with the error thrown.
 */
async function driveTaken(service: Service, own: RunOwnership, runId: string): Promise<string | null> {
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
    handle = service.coordinator.resumeRun(readRecordedRun(events, `run ${runId} in the stream`), {
      owner: own.owner,
      storedResult: (requestId) => own.storedResult(runId, requestId),
    });
  } catch (error) {
    await own.release(runId);
    throw error;
  }
  track(service, handle);
  return null;
}

/**
 * `pge.runs.resume`: takes a run over now, unless a live coordinator drives it; replies with its
 * owner, or why it cannot be resumed.
 */
async function resumeNow(service: Service, runId: string): Promise<RunResumeReply> {
  const { ownership } = service.options;
  if (ownership === undefined) throw new ConfigurationError('this coordinator does not share runs');
  if (service.active.has(runId)) {
    // Its closing event may be stored a moment before this coordinator lets the run go.
    const ended = notResumable(runId, await ownership.events(runId));
    if (ended !== null) throw new ConfigurationError(ended);
    return { runId, owner: ownership.owner, takenOver: false };
  }
  const { owner, taken } = await ownership.takeOverNow(runId);
  if (!taken) return { runId, owner, takenOver: false };
  const problem = await driveTaken(service, ownership, runId);
  if (problem !== null) throw new ConfigurationError(problem);
  return { runId, owner, takenOver: true };
}

/** Starts the run a submission of a task asks for; null when an earlier try of it started it. */
async function startSubmitted(
  service: Service,
  runId: string,
  submission: RunSubmission & { task: string },
): Promise<Started | null> {
  const { options, models, acting } = service.options;
  checkTask(submission.task, options.maxTaskBytes);
  const spec = runSpecOf(runId, submission, options, models, acting?.(runId));
  checkCostCanBeKept(spec, models);
  if ((await admit(runId, submission, service.options)) === 'started') return null;
  if (submission.continues !== undefined)
    await carryWorkspace(service.workspaces, submission.continues.runId, runId);
  return { handle: service.coordinator.startRun(spec), task: submission.task };
}

/**
 * Starts the fork a submission asks for (`RunFork`): its events are made from its parent's stored
 * ones (`forkOfStoredRun`, which refuses a parent unknown, not ended or without the step, and
 * settings that would change what the fork takes), its workspace starts as a copy of the
 * parent's (`carryWorkspace`), they are recorded under its run id, and the fork is driven on from
 * them as a resumed run is, live from the step. Null when an earlier try of it started it.
 */
async function startFork(
  service: Service,
  runId: string,
  submission: RunSubmission & { fork: RunFork },
): Promise<Started | null> {
  const { fork, by } = submission;
  const { bus, ownership, options, models, acting } = service.options;
  if (ownership === undefined)
    throw new ConfigurationError(
      `this coordinator does not share runs: it cannot read run ${fork.runId}'s events to fork it`,
    );
  const { forkOfStoredRun } = await import('./fork-log.js');
  const events = await forkOfStoredRun(await ownership.events(fork.runId), fork, {
    runId,
    logPath: join(options.workingDirectory ?? '', logFileOf(runId)),
    models: modelNames(models),
    ...(acting === undefined ? {} : { acting: acting(runId) }),
    ...(by === undefined ? {} : { startedBy: by }),
  });
  const recorded = readRecordedRun(events, `the fork ${runId}`);
  checkCostCanBeKept(resumedSpec(recorded, { owner: ownership.owner }), models);
  // The submission as it came: with the run id its submitter chose, which an earlier try may have started.
  if ((await admit(runId, submission, service.options)) === 'started') return null;
  try {
    await carryWorkspace(service.workspaces, fork.runId, runId);
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
    const handle = service.coordinator.resumeRun(recorded, { owner: ownership.owner });
    return { handle, task: recorded.started.payload.task };
  } catch (error) {
    await ownership.release(runId);
    throw error;
  }
}

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
