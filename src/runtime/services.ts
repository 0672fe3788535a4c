import { join } from 'node:path';
import {
  createCoordinator,
  type RunSettingsSource,
  type RunSpec,
  runSettingsOf,
} from '../actors/coordinator.js';
import type { Bus, BusSubscription } from '../bus/bus.js';
import { subscribeControl } from '../bus/channels.js';
import { subjects } from '../bus/subjects.js';
import { BusError } from '../errors.js';
import type { Role, RunEvent } from '../schemas/index.js';
import { type RunSubmission, RunSubmissionReply } from '../schemas/submission.js';
import { type ClosingEvent, followRun } from './follow-run.js';
import { newRunId } from './run-id.js';

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
 * override, and the directory its logs are said to go to. The API's resolved options are one; the
 * runtime names only what it reads, so that it does not depend on the API that is built on it.
 */
export type CoordinatorSettings = RunSettingsSource & { workingDirectory: string };

/** Options of `startCoordinatorService`. */
export interface CoordinatorServiceOptions {
  bus: Bus;
  /** Run settings that a submission may override, and where logs are said to go. */
  options: CoordinatorSettings;
  /** The model names reported in `run.started` (the workers own the models). */
  models: Record<Role, string>;
  /** Called with every run started, for logging. */
  onRun?: (runId: string, task: string) => void;
}

/** Builds a run's settings from the coordinator's options and a submission's overrides. */
export function runSpecOf(
  runId: string,
  submission: RunSubmission,
  options: CoordinatorSettings,
  models: Record<Role, string>,
): RunSpec {
  return {
    runId,
    task: submission.task,
    logPath: join(options.workingDirectory, `pge_shared_state_${runId}.md`),
    ...runSettingsOf({ ...options, ...submission.options }),
    models,
  };
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
}

/**
 * Takes runs submitted on `pge.runs.submit` (as one member of the coordinators' queue group),
 * replies with the run id, and drives each run's statechart on the bus.
 */
export function startCoordinatorService(service: CoordinatorServiceOptions): CoordinatorService {
  const { bus, options, models } = service;
  const coordinator = createCoordinator({ bus });
  const active = new Map<string, { interrupt(reason?: string): void; done: Promise<unknown> }>();
  // Commands for runs: this coordinator acts on its own runs and ignores the others'.
  const control = subscribeControl(bus, (command) => active.get(command.runId)?.interrupt(command.reason));
  const subscription: BusSubscription = bus.subscribe(
    subjects.submit,
    async (message) => {
      const submission = message.data as RunSubmission;
      const runId = submission.runId ?? newRunId();
      if (active.has(runId)) throw new BusError(`run ${runId} is already running`);
      const handle = coordinator.startRun(runSpecOf(runId, submission, options, models));
      const done = handle.done.catch((error: unknown) => {
        console.error(`pge coordinator: run ${runId} failed to complete:`, error);
      });
      active.set(runId, { interrupt: handle.interrupt, done });
      void done.finally(() => active.delete(runId));
      service.onRun?.(runId, submission.task);
      await message.respond({ runId });
    },
    { queue: COORDINATOR_QUEUE },
  );
  return {
    active,
    async stop(mode = 'finish') {
      subscription.unsubscribe();
      control.unsubscribe();
      if (mode === 'interrupt') for (const run of active.values()) run.interrupt();
      await Promise.all([...active.values()].map((r) => r.done));
      coordinator.close();
    },
  };
}

/**
 * Submits a run and follows it (`followRun`): the run id is chosen here, so that the run's events
 * are read from its first whatever the timing, and resolves once the run is submitted, with the run
 * id and the closing event to come. `onEvent` sees every event once, in `seq` order; with
 * `idleTimeoutMs`, `closing` rejects with a `BusError` when the run makes no progress for that long.
 */
export async function submitAndFollow(
  bus: Bus,
  submission: Omit<RunSubmission, 'runId'>,
  onEvent: (event: RunEvent) => void = () => {},
  options: { timeoutMs?: number; runId?: string; idleTimeoutMs?: number } = {},
): Promise<{ runId: string; closing: Promise<ClosingEvent> }> {
  const runId = options.runId ?? newRunId();
  // Followed before it is submitted: on a bus that does not store events, nothing is missed either.
  const follower = followRun(bus, runId, {
    onEvent,
    ...(options.idleTimeoutMs === undefined ? {} : { idleTimeoutMs: options.idleTimeoutMs }),
  });
  // A stall while the submission is still under way is told through `closing` all the same.
  follower.closing.catch(() => undefined);
  try {
    const reply = RunSubmissionReply.parse(
      await bus.request(
        subjects.submit,
        { ...submission, runId },
        { timeoutMs: options.timeoutMs ?? 10_000 },
      ),
    );
    return { runId: reply.runId, closing: follower.closing };
  } catch (error) {
    follower.stop();
    throw error;
  }
}
