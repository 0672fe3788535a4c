import { writeFile } from 'node:fs/promises';
import { ReplayDivergence } from '../conductor/replay.js';
import { ConfigurationError, ResumeError } from '../errors.js';
import { readLogFile } from '../persistence/log-reader.js';
import { renderLog } from '../persistence/markdown-log.js';
import {
  ForkSettings,
  forkedSettings,
  isClosingEvent,
  type Role,
  type RunActing,
  RunEvent,
  type RunEventOf,
} from '../schemas/index.js';
import type { RunFork } from '../schemas/submission.js';
import { copyWorkspace } from './continue-run.js';
import { replayEvents } from './replay-log.js';

/**
 * `pge fork`: the events a fork starts from. A fork is a new run that takes a recorded run's
 * events before the start of one of its steps (the plan, the contracts, the work and the verdicts
 * of the steps before) and goes on live from there. Its record starts as those events, under the
 * fork's run id, with a `run.started` that names the parent; resuming them replays them (no model
 * is asked for what they answer) and calls models from the step on. `forkEvents` makes them, the
 * same for a fork of a log (`forkLog`, embedded) and of a run in a deployment's events stream (the
 * coordinator that takes a fork submitted on NATS).
 */

export { ForkSettings };

/** The names of `ForkSettings`, as options and flags name them. */
export const FORK_SETTINGS = ForkSettings.keyof().options;

/** What `forkEvents` needs besides the parent's events. */
export interface ForkOptions {
  /** What the parent is in messages: its log's path, or its run in the stream. */
  source: string;
  /** The parent's log as the fork's `parent` names it: the file read (`forkLog`), else the one its `run.started` names. */
  parentLogPath?: string;
  fromStep: number;
  /** The fork's run id and log, as its `run.started` names it. */
  runId: string;
  logPath: string;
  /** The fork's models, recorded in its `run.started`. */
  models: Record<Role, string>;
  /**
   * The fork's tools, validators and workspace, recorded in its `run.started` (the parent's may
   * differ); absent when its workers are elsewhere (a deployment's), and the parent's is dropped.
   */
  acting?: RunActing;
  settings: ForkSettings;
  /** Who forks the run, by name, for the fork's `run.started`; absent: nobody named (the parent's is not kept). */
  startedBy?: string;
}

/** Whether `event` is where a fork from step `fromStep` goes on live: that step's start. What comes before it the fork takes from its parent. */
export function isForkPoint(event: RunEvent, fromStep: number): boolean {
  return event.type === 'step.started' && event.payload.stepNumber === fromStep;
}

/**
 * The events a fork of the run of `events` starts with: those before the start of step
 * `fromStep`, as the fork's, its `run.started` naming the parent and carrying `settings` in place of
 * the parent's. Pure. Throws `ResumeError` when `events` are no run's, `ConfigurationError` when
 * the run started no step `fromStep` or a setting is out of its range.
 */
export function forkEvents(events: readonly RunEvent[], options: ForkOptions): RunEvent[] {
  const { source, fromStep, runId, logPath } = options;
  const started = events[0];
  if (started?.type !== 'run.started') throw new ResumeError(`cannot fork ${source}: it is not a pge log`);
  const at = events.findIndex((e) => isForkPoint(e, fromStep));
  if (at < 0) {
    const steps = events.flatMap((e) => (e.type === 'step.started' ? [e.payload.stepNumber] : []));
    throw new ConfigurationError(
      `cannot fork ${source} from step ${fromStep}: its run started ${steps.length === 0 ? 'no step' : `steps ${[...new Set(steps)].join(', ')}`}`,
    );
  }
  const parentId = started.runId;
  // Every id of the parent's events (its own, its requests') is made of its run id: they become the fork's.
  const prefix = JSON.parse(JSON.stringify(events.slice(0, at)).replaceAll(parentId, runId)) as RunEvent[];
  const first = prefix[0] as RunEventOf<'run.started'>;
  // A fork is a run of its own: its trace is its own too (its parent's is named in `parent`).
  const { traceparent: _parentTrace, startedBy: _parentStarter, ...payload } = first.payload;
  prefix[0] = {
    ...first,
    payload: {
      ...payload,
      logPath,
      settings: forkedSettings(first.payload.settings, options.settings, options),
      parent: { runId: parentId, logPath: options.parentLogPath ?? started.payload.logPath, fromStep },
      ...(options.startedBy === undefined ? {} : { startedBy: options.startedBy }),
    },
  };
  // Checked as any log's events are: a setting out of its range is refused here, not at the replay.
  const checked = RunEvent.array().safeParse(prefix);
  if (!checked.success)
    throw new ConfigurationError(`cannot fork ${source}: ${checked.error.issues[0]?.message}`);
  return checked.data;
}

/** What `forkLog` needs. */
export interface ForkLogOptions extends Omit<ForkOptions, 'source' | 'parentLogPath' | 'acting'> {
  parentPath: string;
  /** The fork's log (which must not exist). */
  logPath: string;
  acting: RunActing;
  /** Where runs' workspaces are: the parent's, if its log does not say where it is. */
  workspaces: string;
}

/** Writes the fork's log (the parent's events before step `fromStep`, as the fork's) and copies the parent's workspace. */
export async function forkLog(options: ForkLogOptions): Promise<void> {
  const { parentPath, workspaces, ...fork } = options;
  const events = await readLogFile(parentPath).catch((error: Error) => {
    throw new ResumeError(`cannot fork ${parentPath}: ${error.message}`, { cause: error });
  });
  const prefix = forkEvents(events, { ...fork, source: parentPath, parentLogPath: parentPath });
  await writeFile(options.logPath, renderLog(prefix), { flag: 'wx' });
  await copyWorkspace(events[0] as RunEventOf<'run.started'>, workspaces, options.acting.workspace);
}

/**
 * The refusal of a fork whose settings would change what happened before step `fromStep`: the
 * replay of the events it takes parted from them (`error`) before any model was called.
 */
export function forkDivergence(source: string, fromStep: number, error: ReplayDivergence): ResumeError {
  return new ResumeError(
    `cannot fork ${source} from step ${fromStep} with these settings: the events before it would not be the same (at seq ${error.seq}: ${error.problem}). ` +
      'Change only what applies from that step on, or fork from an earlier step',
    { cause: error },
  );
}

/**
 * The events a fork of the ended run whose stored events are `parent` starts with, as the
 * coordinator that takes a fork submitted on NATS records them: refused with a `ConfigurationError`
 * when the run is unknown (no event stored), has not ended, or started no step `fork.fromStep`,
 * and with `forkDivergence` when the fork's settings would change the events it takes (their
 * replay, which asks no model, is run here, before anything is recorded).
 */
export async function forkOfStoredRun(
  parent: readonly RunEvent[],
  fork: RunFork,
  options: Omit<ForkOptions, 'source' | 'fromStep' | 'settings' | 'parentLogPath'>,
): Promise<RunEvent[]> {
  const { runId, fromStep } = fork;
  const source = `run ${runId}`;
  const last = parent.at(-1);
  if (last === undefined) throw new ConfigurationError(`no run ${runId} in the deployment's events stream`);
  if (!isClosingEvent(last))
    throw new ConfigurationError(
      `run ${runId} has not ended (its last event is ${last.type}): fork it once it has ended`,
    );
  const events = forkEvents(parent, { ...options, source, fromStep, settings: fork.settings ?? {} });
  try {
    await replayEvents(events, `the fork of ${source}`, { ended: false });
  } catch (error) {
    // Every event it takes was produced again, and the charts went on: the fork goes on live there.
    if (error instanceof ReplayDivergence && error.beyondLog) return events;
    if (error instanceof ReplayDivergence) throw forkDivergence(source, fromStep, error);
    throw error;
  }
  return events;
}
