import { z } from 'zod';
import { SafeId } from './domain.js';
import { ErrorInfo, Operator, RunContinuation, RunJob } from './events.js';
import { ForkSettings, RunSettingOptions } from './run-settings.js';

/**
 * Run submission by request/reply on `pge.runs.submit`: a client sends a task and the run settings
 * it wants to override; the coordinator that takes it replies with the new run's id, and the run's
 * events follow on `pge.run.<runId>.evt.>`. Model names, keys and paths are the coordinator's
 * business, not the submitter's, so only run settings travel here. A submission the coordinator
 * refuses (a run id used before, a task too long, a fork of a run that has not ended) is answered
 * with the reason instead.
 */

/**
 * Run settings a submitter may set: any of the run settings the options of the same name set
 * (`RunSettingOptions`); an omitted one takes the coordinator's value. Unknown names are an error.
 */
export const RunSubmissionOptions = RunSettingOptions.partial();
export type RunSubmissionOptions = z.infer<typeof RunSubmissionOptions>;

/**
 * A fork asked of the deployment (`pge fork --nats`, the dashboard's Fork on NATS): a new run that
 * takes the ended run `runId`'s events before step `fromStep` from the events stream (replayed,
 * never asked of a model again) and goes on live from there, with `settings` in place of the
 * parent's (`ForkSettings`, as `pge fork` takes them). Its task and plan are the parent's.
 */
export const RunFork = z.strictObject({
  runId: SafeId,
  fromStep: z.number().int().min(1),
  settings: ForkSettings.optional(),
});
export type RunFork = z.infer<typeof RunFork>;

/** A request to start a run, sent on `pge.runs.submit`: of a task, or a fork of an ended run. */
export const RunSubmission = z
  .strictObject({
    /** The run's task; absent for a fork, whose task is its parent's. */
    task: z.string().min(1).optional(),
    /**
     * The run id to use, so that a submitter can follow the run's events before submitting it. It
     * must be new: a run id is never reused.
     */
    runId: SafeId.optional(),
    options: RunSubmissionOptions.optional(),
    /** The run this one carries on (`pge continue --nats`), and the steps it keeps from it; its plan is `options.plan`. */
    continues: RunContinuation.optional(),
    /** The job the run belongs to, with `continues`: the earlier run's job, one run further. */
    job: RunJob.optional(),
    /** Who submits the run, by name, for its `run.started` (`startedBy`): the dashboard's operator. */
    by: Operator.optional(),
    /** The run is a fork of an ended run (`RunFork`): it has no task, options, plan or job of its own. */
    fork: RunFork.optional(),
  })
  .refine(
    (s) =>
      s.fork === undefined
        ? s.task !== undefined
        : s.task === undefined && s.options === undefined && s.continues === undefined && s.job === undefined,
    {
      error:
        "a submission has a task, or a fork (whose task, plan and settings are its parent's, but those of fork.settings)",
    },
  );
export type RunSubmission = z.infer<typeof RunSubmission>;

/**
 * The reply to a submission: the id of the run that was started, or the error that refused it
 * (`ConfigurationError` for a run id used before, a task that is empty, too long or holds a NUL, or
 * a fork of a run that is unknown, has not ended or did not start the step).
 */
export const RunSubmissionReply = z.union([
  z.strictObject({ runId: SafeId }),
  z.strictObject({ error: ErrorInfo }),
]);
export type RunSubmissionReply = z.infer<typeof RunSubmissionReply>;

/**
 * A request to take a run over now, sent on `pge.runs.resume` (`pge resume --nats <url> <runId>`):
 * a run whose coordinator died and whose lease nobody took (all coordinators were down, or the
 * lease was lost) is taken over by the coordinator that gets the request.
 */
export const RunResumeRequest = z.strictObject({ runId: SafeId });
export type RunResumeRequest = z.infer<typeof RunResumeRequest>;

/**
 * The reply to a resume request: the coordinator that owns the run now (the one that took it over,
 * or the live owner that still drives it), or why it cannot be resumed (it ended, or was never started).
 */
export const RunResumeReply = z.union([
  z.strictObject({ runId: SafeId, owner: z.string(), takenOver: z.boolean() }),
  z.strictObject({ error: ErrorInfo }),
]);
export type RunResumeReply = z.infer<typeof RunResumeReply>;

/**
 * A person's request to cancel a run, sent on `pge.runs.cancel` (`pge cancel <runId>`): every
 * coordinator hears it, and the one that drives the run cancels it and answers; the others stay
 * silent. `by` and `reason` go into the run's closing event.
 */
export const RunCancelRequest = z.strictObject({
  runId: SafeId,
  by: z.string().min(1).max(200),
  reason: z.string().min(1).max(4000).nullable(),
  ts: z.iso.datetime(),
});
export type RunCancelRequest = z.infer<typeof RunCancelRequest>;

/** The reply to a cancel request: the coordinator that cancelled the run. */
export const RunCancelReply = z.strictObject({ runId: SafeId, owner: z.string() });
export type RunCancelReply = z.infer<typeof RunCancelReply>;

/**
 * A client's question on `pge.coordinators.ping`: does any coordinator run? Answered at once with
 * `CoordinatorPong` by one coordinator of the queue group.
 */
export const CoordinatorPing = z.strictObject({});
export type CoordinatorPing = z.infer<typeof CoordinatorPing>;
/** A coordinator's answer to `CoordinatorPing`: its name. */
export const CoordinatorPong = z.strictObject({ coordinator: z.string() });
export type CoordinatorPong = z.infer<typeof CoordinatorPong>;
