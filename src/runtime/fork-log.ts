import { writeFile } from 'node:fs/promises';
import { ConfigurationError, ResumeError } from '../errors.js';
import { readLogFile } from '../persistence/log-reader.js';
import { renderLog } from '../persistence/markdown-log.js';
import { type Role, type RunActing, RunEvent, type RunEventOf } from '../schemas/index.js';
import { copyWorkspace } from './continue-run.js';

/**
 * `pge fork`: the log a fork starts from. A fork is a new run that takes a recorded run's events
 * before the start of one of its steps (the plan, the contracts, the work and the verdicts of the
 * steps before) and goes on live from there. Its log starts as those events, under the fork's run
 * id, with a `run.started` that names the parent; resuming that log replays them (no model is
 * asked for what they answer) and calls models from the step on.
 */

type RecordedSettings = RunEventOf<'run.started'>['payload']['settings'];

/** The settings a fork may change from its parent's: the bounds, the thresholds, the budgets and the call deadline. */
export type ForkSettings = Partial<
  Pick<
    RecordedSettings,
    | 'maxRetriesPerStep'
    | 'maxContractRounds'
    | 'onStepExhausted'
    | 'maxReplans'
    | 'defaultThresholds'
    | 'fallbackThreshold'
    | 'callTimeoutMs'
  > &
    RecordedSettings['budgets']
>;

/** The names of `ForkSettings`, as options and flags name them. */
export const FORK_SETTINGS = [
  'maxRetriesPerStep',
  'maxContractRounds',
  'onStepExhausted',
  'maxReplans',
  'defaultThresholds',
  'fallbackThreshold',
  'callTimeoutMs',
  'maxCostUsd',
  'maxTokens',
  'maxDurationMs',
] as const satisfies readonly (keyof ForkSettings)[];

/** What `forkLog` needs. */
export interface ForkLogOptions {
  parentPath: string;
  fromStep: number;
  /** The fork's run id and log (which must not exist). */
  runId: string;
  logPath: string;
  /** The fork's models, recorded in its `run.started`. */
  models: Record<Role, string>;
  /** The fork's tools, validators and workspace, recorded in its `run.started` (the parent's may differ); the parent's workspace is copied into it. */
  acting: RunActing;
  settings: ForkSettings;
  /** Where runs' workspaces are: the parent's, if its log does not say where it is. */
  workspaces: string;
  /** Who forks the run, by name, for the fork's `run.started`; absent: nobody named (the parent's is not kept). */
  startedBy?: string;
}

/** Writes the fork's log (the parent's events before step `fromStep`, as the fork's) and copies the parent's workspace. */
export async function forkLog(options: ForkLogOptions): Promise<void> {
  const { parentPath, fromStep, runId, logPath } = options;
  const events = await readLogFile(parentPath).catch((error: Error) => {
    throw new ResumeError(`cannot fork ${parentPath}: ${error.message}`, { cause: error });
  });
  const started = events[0];
  if (started?.type !== 'run.started')
    throw new ResumeError(`cannot fork ${parentPath}: it is not a pge log`);
  const at = events.findIndex((e) => e.type === 'step.started' && e.payload.stepNumber === fromStep);
  if (at < 0) {
    const steps = events.flatMap((e) => (e.type === 'step.started' ? [e.payload.stepNumber] : []));
    throw new ConfigurationError(
      `cannot fork ${parentPath} from step ${fromStep}: its run started ${steps.length === 0 ? 'no step' : `steps ${[...new Set(steps)].join(', ')}`}`,
    );
  }
  const parentId = started.runId;
  // Every id of the parent's events (its own, its requests') is made of its run id: they become the fork's.
  const prefix = JSON.parse(JSON.stringify(events.slice(0, at)).replaceAll(parentId, runId)) as RunEvent[];
  const first = prefix[0] as RunEventOf<'run.started'>;
  const { budgets, ...recorded } = first.payload.settings;
  const given = Object.fromEntries(Object.entries(options.settings).filter(([, v]) => v !== undefined));
  const { maxCostUsd, maxTokens, maxDurationMs, ...bounds } = given as ForkSettings;
  const changedBudgets = Object.fromEntries(
    Object.entries({ maxCostUsd, maxTokens, maxDurationMs }).filter(([, v]) => v !== undefined),
  );
  // A fork is a run of its own: its trace is its own too (its parent's is named in `parent`).
  const { traceparent: _parentTrace, startedBy: _parentStarter, ...payload } = first.payload;
  prefix[0] = {
    ...first,
    payload: {
      ...payload,
      logPath,
      settings: {
        ...recorded,
        ...bounds,
        budgets: { ...budgets, ...changedBudgets },
        models: options.models,
        acting: options.acting,
      },
      parent: { runId: parentId, logPath: parentPath, fromStep },
      ...(options.startedBy === undefined ? {} : { startedBy: options.startedBy }),
    },
  };
  // Checked as any log's events are: a setting out of its range is refused here, not at the replay.
  const checked = RunEvent.array().safeParse(prefix);
  if (!checked.success)
    throw new ConfigurationError(`cannot fork ${parentPath}: ${checked.error.issues[0]?.message}`);
  await writeFile(logPath, renderLog(checked.data), { flag: 'wx' });
  await copyWorkspace(started, options.workspaces, options.acting.workspace);
}
