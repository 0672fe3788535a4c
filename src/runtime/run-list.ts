import type { StoredMessages } from '../bus/bus.js';
import { subjects } from '../bus/subjects.js';
import type { RunEvent, RunEventOf, RunJob } from '../schemas/index.js';
import { isClosingEvent, jobOf } from '../schemas/index.js';
import { type RunListStatus, stoppedStatus } from '../schemas/run-status.js';
import { undecidedRequests } from './approvals.js';

/**
 * The runs of a distributed deployment, from outside it (`pge runs`; a dashboard or an API can
 * list them the same way), read from the events stream. Reading every event of every run would
 * cost one lookup per event (a client reads by lookups: `NatsBus.stored`), so it reads the
 * run-level events of all runs (`run.started`, `run.resumed`, `run.completed`, `run.failed`: two or
 * three a run), whose closing event carries a finished run's figures; only for a run still open
 * does it read more, and only the events that hold what the list shows.
 */

/** What `listRuns` keeps. */
export interface RunListFilter {
  /** Only runs in one of these statuses (any string: an unknown one matches none); all when absent. */
  statuses?: readonly string[];
  /** Only runs started at this time (ms since the epoch) or later. */
  since?: number;
  /**
   * Only the runs of this job (`RunSummary.job.id`: its first run's id), that run included; a run
   * whose start the stream no longer holds has no known job, so it is left out.
   */
  job?: string;
}

/** One run, as `pge runs` lists it. */
export interface RunSummary {
  runId: string;
  /**
   * The job the run belongs to, and its place in it (`pge continue`): a run that continues none is
   * run 1 of its own job. Null when the stream no longer holds its start. Its steps passed of its
   * plan are the job's progress, since the steps it kept count as passed.
   */
  job: RunJob | null;
  /** The task's first line, cut to `TASK_CHARS`; null when the stream no longer holds its start. */
  task: string | null;
  status: RunListStatus;
  /** Steps of the current plan whose latest outcome passed. */
  stepsPassed: number;
  /** Steps of the current plan; null for a run that has (or had) none. */
  stepsTotal: number | null;
  /** What the run's model calls cost so far (0 for models without a price). */
  costUsd: number;
  /** When the run started (ISO 8601). */
  startedAt: string;
  /** When its latest event was recorded (ISO 8601), and the event's type. */
  lastEventAt: string;
  lastEvent: string;
}

/** How long a task may be in a summary: a list shows one short line (`pge follow` shows it all). */
export const TASK_CHARS = 80;

/** `pge.run.<runId>.evt.<tail>`: the events of one run (`'*'`: of every run) whose type `tail` matches. */
const eventsOf = (runId: string, tail: string): string => `${subjects.events(runId).slice(0, -1)}${tail}`;

/** A task's first line, at most `TASK_CHARS` long (cut with `…`). */
export function taskLine(task: string): string {
  const line = task.trim().split('\n', 1)[0]!.trim();
  return line.length <= TASK_CHARS ? line : `${line.slice(0, TASK_CHARS - 1)}…`;
}

/**
 * The run-level events (`run.started`, `run.resumed`, the closing event) of one run, or of every run
 * (`'*'`), in the order the stream holds them: a few lookups, however long the runs. Rejects as
 * `bus.stored` does.
 */
export async function runLevelEvents(bus: StoredMessages, runId: string): Promise<RunEvent[]> {
  return (await bus.stored(eventsOf(runId, 'run.>'))) as RunEvent[];
}

/**
 * The runs whose events `bus` holds, oldest start first (newest last, nearest the prompt), those
 * `filter` keeps. A run's start is its `run.started`, or its first run event when the stream no
 * longer holds that (its limits removed it). Rejects as `bus.stored` does.
 */
export async function listRuns(bus: StoredMessages, filter: RunListFilter = {}): Promise<RunSummary[]> {
  const runEvents = await runLevelEvents(bus, '*');
  const byRun = new Map<string, RunEvent[]>();
  for (const event of runEvents) {
    const events = byRun.get(event.runId);
    if (events === undefined) byRun.set(event.runId, [event]);
    else events.push(event);
  }
  const wanted = (status: string) =>
    filter.statuses === undefined || filter.statuses.length === 0 || filter.statuses.includes(status);
  const summaries = await Promise.all(
    [...byRun.values()].map(async (events): Promise<RunSummary | null> => {
      const first = events[0]!;
      const started = events.find((e): e is RunEventOf<'run.started'> => e.type === 'run.started');
      const startedAt = started?.ts ?? first.ts;
      if (filter.since !== undefined && Date.parse(startedAt) < filter.since) return null;
      const job = started ? jobOf(started) : null;
      if (filter.job !== undefined && job?.id !== filter.job) return null;
      const opening = {
        runId: first.runId,
        job,
        task: started ? taskLine(started.payload.task) : null,
        startedAt,
      };
      const closing = events.findLast(isClosingEvent);
      if (closing !== undefined) {
        const summary = closedRun(opening, closing);
        return wanted(summary.status) ? summary : null;
      }
      if (!wanted('running') && !wanted('waiting')) return null;
      const summary = await openRun(bus, opening, events);
      return wanted(summary.status) ? summary : null;
    }),
  );
  return summaries
    .filter((s): s is RunSummary => s !== null)
    .sort((a, b) => Date.parse(a.startedAt) - Date.parse(b.startedAt) || a.runId.localeCompare(b.runId));
}

type Opening = Pick<RunSummary, 'runId' | 'job' | 'task' | 'startedAt'>;

/** A run that ended: its closing event holds its figures, and nothing of the run follows it. */
function closedRun(opening: Opening, closing: RunEventOf<'run.completed' | 'run.failed'>): RunSummary {
  const { payload } = closing;
  const status =
    closing.type === 'run.failed'
      ? stoppedStatus(closing.payload.reason)
      : payload.passed
        ? 'passed'
        : 'completed';
  return {
    ...opening,
    status,
    stepsPassed: payload.stepsPassed,
    // A plan has a step at least: none counted is no plan (a run that failed before it).
    stepsTotal: payload.stepsTotal === 0 ? null : payload.stepsTotal,
    costUsd: payload.usage.costUsd,
    lastEventAt: closing.ts,
    lastEvent: closing.type,
  };
}

/**
 * A run still open, from the few events that say where it stands, read side by side: its gates
 * (waiting at one not decided), its latest plan (the step total), how its steps ended (the
 * latest outcome of each step counts, as the run chart counts it), its model calls (the cost),
 * and its latest event of any type (one lookup).
 */
async function openRun(
  bus: StoredMessages,
  opening: Opening,
  runEvents: readonly RunEvent[],
): Promise<RunSummary> {
  const { runId } = opening;
  const read = async (tail: string) => (await bus.stored(eventsOf(runId, tail))) as RunEvent[];
  const [approvals, plans, carried, passed, failed, rejected, calls, latest] = await Promise.all([
    read('approval.>'),
    read('plan.created'),
    read('step.carried'),
    read('step.passed'),
    read('step.failed'),
    read('step.plan.rejected'),
    read('model.call.completed'),
    bus.lastStored(subjects.events(runId)) as Promise<RunEvent | null>,
  ]);
  const plan = plans.findLast((e): e is RunEventOf<'plan.created'> => e.type === 'plan.created');
  const outcome = new Map<string, { seq: number; passed: boolean }>();
  // A step kept from the run this one continues counts as passed, as the run chart counts it.
  for (const end of [...carried, ...passed, ...failed, ...rejected]) {
    if (
      end.type !== 'step.carried' &&
      end.type !== 'step.passed' &&
      end.type !== 'step.failed' &&
      end.type !== 'step.plan.rejected'
    )
      continue;
    const known = outcome.get(end.payload.stepId);
    if (known === undefined || known.seq < end.seq)
      outcome.set(end.payload.stepId, {
        seq: end.seq,
        passed: end.type === 'step.passed' || end.type === 'step.carried',
      });
  }
  const steps = plan?.payload.plan.steps ?? [];
  // Without the latest event (one this version cannot read), the latest of those read stands in.
  const last =
    latest ??
    [...runEvents, ...approvals, ...plans, ...carried, ...passed, ...failed, ...rejected, ...calls].reduce(
      (a, b) => (b.seq > a.seq ? b : a),
    );
  return {
    ...opening,
    status: undecidedRequests(approvals).length > 0 ? 'waiting' : 'running',
    stepsPassed: steps.filter((s) => outcome.get(s.id)?.passed === true).length,
    stepsTotal: plan === undefined ? null : steps.length,
    costUsd: calls.reduce((sum, e) => sum + (e.type === 'model.call.completed' ? e.payload.costUsd : 0), 0),
    lastEventAt: last.ts,
    lastEvent: last.type,
  };
}
