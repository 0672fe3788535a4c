import { cp, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { ConfigurationError, ResumeError } from '../errors.js';
import { type RubricSettings, rubricOf } from '../machines/guards.js';
import { latest } from '../machines/run-context.js';
import {
  type CarriedStep,
  documentOfPlan,
  type GivenPlan,
  isClosingEvent,
  jobOf,
  type PlanDocument,
  type PlanDocumentStep,
  planOfDocument,
  type ResolvedCriterion,
  type RunContinuation,
  type RunEvent,
  type RunEventOf,
  type RunJob,
} from '../schemas/index.js';
import { replayEvents } from './replay-log.js';

/**
 * `pge continue`: a new run of an ended run's plan, in a job that spans runs. Steps that passed
 * are kept with their artifacts (and the workspace's files); a step that failed or was exhausted
 * runs again, and so does every step that depends on one that runs. With an edited plan, a step
 * it adds runs, a step it drops is gone, and a step it changes runs again, with its dependents.
 */

/** What a continued run starts from. */
export interface Continuation {
  task: string;
  /** The plan the new run is given: the edited one, else the earlier run's latest, thresholds as enforced. */
  plan: GivenPlan;
  /** The earlier run, and the steps kept from it. */
  continues: RunContinuation;
  job: RunJob;
  /** The ids of the steps the new run runs, in plan order. */
  runs: string[];
}

/**
 * The rubric a run with `settings` judges a plan document by, as its chart resolves it
 * (`takePlan`): the fixed rubric, else the document's, thresholds filled in by the settings.
 */
export function rubricBy(settings: RubricSettings): (document: PlanDocument) => ResolvedCriterion[] {
  return (document) => rubricOf(settings, planOfDocument(document).criteria);
}

const sameStep = (a: PlanDocumentStep, b: PlanDocumentStep): boolean =>
  a.title === b.title &&
  a.description === b.description &&
  a.expectedOutput === b.expectedOutput &&
  a.dependsOn.length === b.dependsOn.length &&
  a.dependsOn.every((d, i) => d === b.dependsOn[i]);

const criterionKey = ({ name, weight, description, threshold }: ResolvedCriterion): string =>
  JSON.stringify([name, weight, description, threshold]);

/** The rubric the steps were judged by is the one they will be: same criteria, weights, thresholds. */
function sameRubric(a: readonly ResolvedCriterion[], b: readonly ResolvedCriterion[]): boolean {
  const keys = new Set(a.map(criterionKey));
  return a.length === b.length && b.every((c) => keys.has(criterionKey(c)));
}

/**
 * What continuing the ended run of `events` (its log at `logPath`) starts from, with `edited` as
 * its plan if given. The events are replayed (no model is asked) to know how each step ended.
 * `rubricOf` is the rubric the new run will judge by (its thresholds resolved by its settings): when
 * it is not the one the steps were judged by, every step runs again.
 * Throws `ResumeError` when they are no ended run (`notEnded` says so of a run that did not end),
 * `ConfigurationError` when the run made no plan or the job has nothing left to do.
 */
export async function continuationOf(
  events: readonly RunEvent[],
  logPath: string,
  edited: GivenPlan | null,
  rubricOf: (document: PlanDocument) => readonly ResolvedCriterion[],
): Promise<Continuation> {
  const last = events.at(-1);
  if (last !== undefined && events[0]?.type === 'run.started' && !isClosingEvent(last))
    throw notEnded(last, logPath);
  const { runId, outcome } = await replayEvents(events, logPath);
  const started = events[0] as RunEventOf<'run.started'>;
  if (outcome.plan === null)
    throw new ConfigurationError(
      `cannot continue ${logPath}: run ${runId} ended before it had a plan; run the task again`,
    );
  const recorded = documentOfPlan(outcome.plan, { criteria: outcome.criteria, task: started.payload.task });
  const document: PlanDocument = edited?.document ?? recorded;
  const rubricKept = sameRubric(outcome.criteria, rubricOf(document));
  const before = new Map(recorded.steps.map((s) => [s.id, s]));
  const carried: CarriedStep[] = [];
  const kept = new Set<string>();
  for (const step of document.steps) {
    const was = before.get(step.id);
    const ended = latest(outcome, step.id);
    const keep =
      rubricKept &&
      was !== undefined &&
      sameStep(was, step) &&
      ended?.status === 'passed' &&
      ended.best >= 0 &&
      step.dependsOn.every((d) => kept.has(d));
    if (!keep) continue;
    kept.add(step.id);
    carried.push({
      stepId: step.id,
      title: step.title,
      runId: ended.carriedFrom ?? runId,
      contract: ended.contract,
      attempt: ended.attempts[ended.best]!,
    });
  }
  const runs = document.steps.filter((s) => !kept.has(s.id)).map((s) => s.id);
  const job = jobOf(started);
  if (runs.length === 0)
    throw new ConfigurationError(
      `job ${job.id} has nothing left to do: every step of its plan passed (run ${runId}, ${logPath}); give an edited plan with --plan to add or change steps`,
    );
  return {
    task: document.task ?? started.payload.task,
    plan: edited ?? { document, file: null },
    continues: { runId, logPath, carried },
    job: { id: job.id, run: job.run + 1 },
    runs,
  };
}

/**
 * Why a run whose last event is `last` cannot be continued: it did not end (its process died, or
 * it is still going), so it is resumed, from its log, not continued.
 */
export function notEnded(last: RunEvent, logPath: string): ResumeError {
  return new ResumeError(
    `cannot continue ${logPath}: run ${last.runId} did not end (its last event is ${last.type}, seq ${last.seq}); resume it with pge resume ${logPath}`,
  );
}

/**
 * Copies an earlier run's workspace (its `run.started`, or only its id) into a new run's: where its log says it is, unless it is gone
 * from there (moved with its working directory) or the log does not say, then under `workspaces`.
 * Links are copied as they are: one made absolute would lead into the earlier run's workspace.
 * Nothing is copied when neither is a directory.
 */
export async function copyWorkspace(
  started: RunEventOf<'run.started'> | string,
  workspaces: string,
  target: string,
): Promise<void> {
  const recorded = typeof started === 'string' ? undefined : started.payload.settings.acting?.workspace;
  const runId = typeof started === 'string' ? started : started.runId;
  for (const workspace of [recorded, join(workspaces, runId)]) {
    if (workspace === undefined || !(await isDirectory(workspace))) continue;
    await cp(workspace, target, { recursive: true, verbatimSymlinks: true });
    return;
  }
}

function isDirectory(path: string): Promise<boolean> {
  return stat(path).then(
    (s) => s.isDirectory(),
    () => false,
  );
}
