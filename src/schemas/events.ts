import { z } from 'zod';
import {
  Contract,
  ContractProposal,
  ContractReview,
  CriterionWeight,
  Evaluation,
  Phase,
  Plan,
  ResolvedCriterion,
  Role,
  SafeId,
  Score,
  TraceParent,
  Usage,
  ValidatorRun,
  Work,
} from './domain.js';
import {
  ContractInput,
  ContractReviewInput,
  EvaluationInput,
  PlanInput,
  RetrySignal,
  WorkInput,
} from './inputs.js';
import { RunSettings } from './run-settings.js';
import { PHASES } from './setting-values.js';
import { ApprovalGate, ExhaustionPolicy } from './settings.js';

/**
 * Every event of a run, one discriminated union on `type`. The coordinator is the only writer of
 * a run's events and numbers them with `seq`, so the stream, the log and a resumed run agree on
 * one order. Names are `<entity>.<aspect>.<past-tense verb>`.
 */

/** The envelope every event shares. */
const envelope = {
  id: z.string().min(1),
  runId: SafeId,
  seq: z.number().int().min(1),
  ts: z.iso.datetime(),
};

function event<T extends string, P extends z.ZodType>(type: T, payload: P) {
  return z.strictObject({ ...envelope, type: z.literal(type), payload });
}

const StepRef = { stepId: SafeId, stepNumber: z.number().int().min(1) };
const AttemptRef = { ...StepRef, attempt: z.number().int().min(1) };

/** A named error as it travels in events and results. */
export const ErrorInfo = z.strictObject({
  name: z.string(),
  message: z.string(),
  retryable: z.boolean(),
});
export type ErrorInfo = z.infer<typeof ErrorInfo>;

/** One model call, repairs included, as reported by the role that made it. */
export const ModelCall = z.strictObject({
  role: Role,
  phase: Phase,
  model: z.string(),
  promptTokens: z.number().int().min(0),
  completionTokens: z.number().int().min(0),
  costUsd: z.number().min(0),
  /**
   * `false` when the model client knew no price for the model, so that its `costUsd` of 0 is
   * unknown rather than free; absent (or `true`) when the call was priced or the model reports
   * its own cost.
   */
  priced: z.boolean().optional(),
  latencyMs: z.number().min(0),
  repair: z.number().int().min(0),
  /** `tools`: the model asked for tools rather than answering; their calls are in `toolCalls`. */
  outcome: z.enum(['valid', 'invalid', 'tools']),
  problem: z.string().nullable(),
  /** The tools this round of the call asked for, in order, each as it ran (bounded excerpts). */
  toolCalls: z
    .array(
      z.strictObject({
        name: z.string(),
        arguments: z.string(),
        excerpt: z.string(),
        ok: z.boolean(),
        durationMs: z.number().min(0),
      }),
    )
    .optional(),
});
export type ModelCall = z.infer<typeof ModelCall>;

/** One criterion's verdict in a judged attempt; `score` is null when the evaluation was invalid. */
export const JudgedScore = z.strictObject({
  criterion: z.string(),
  weight: CriterionWeight,
  score: Score.nullable(),
  threshold: Score,
  passed: z.boolean(),
});
export type JudgedScore = z.infer<typeof JudgedScore>;

/** Why an attempt passed or failed: a failed attempt is never an unexamined one. */
export const AttemptReason = z.enum([
  'all_criteria_pass',
  'below_threshold',
  'invalid_evaluation',
  'invalid_work',
  'failed_validation',
  'rejected',
]);
export type AttemptReason = z.infer<typeof AttemptReason>;

/** Stop reasons of a run that did not complete. */
export const RunStopReason = z.enum(['aborted', 'budget', 'error', 'interrupted', 'cancelled']);
export type RunStopReason = z.infer<typeof RunStopReason>;

/** Calls, tokens, cost and model time of one phase, for the summary's per-phase table. */
export const PhaseTotals = z.strictObject({
  phase: Phase,
  calls: z.number().int().min(0),
  promptTokens: z.number().int().min(0),
  completionTokens: z.number().int().min(0),
  costUsd: z.number().min(0),
  latencyMs: z.number().min(0),
});
export type PhaseTotals = z.infer<typeof PhaseTotals>;

/** Calls, tokens, cost and model time per phase, in phase order, over `calls`. */
export function phaseTotals(calls: readonly ModelCall[]): PhaseTotals[] {
  return PHASES.map((phase) => {
    const of = calls.filter((c) => c.phase === phase);
    return {
      phase,
      calls: of.length,
      promptTokens: of.reduce((n, c) => n + c.promptTokens, 0),
      completionTokens: of.reduce((n, c) => n + c.completionTokens, 0),
      costUsd: of.reduce((n, c) => n + c.costUsd, 0),
      latencyMs: of.reduce((n, c) => n + c.latencyMs, 0),
    };
  });
}

/** The run's closing figures, as the run chart computes them. */
export const RunTotals = z.strictObject({
  passed: z.boolean(),
  stepsPassed: z.number().int().min(0),
  stepsTotal: z.number().int().min(0),
  totalRetries: z.number().int().min(0),
  usage: Usage,
  durationMs: z.number().min(0),
  summary: z.string(),
});
export type RunTotals = z.infer<typeof RunTotals>;

/** The closing figures of `run.completed` and `run.failed`: the chart's, with the per-phase table. */
const ClosingTotals = { ...RunTotals.shape, byPhase: z.array(PhaseTotals) };

/**
 * A step a continued run keeps from an earlier run of its job (`pge continue`): it passed there,
 * its plan entry is unchanged and nothing it depends on runs again. Its kept attempt (the work and
 * its evaluation) stands for it: its dependents receive that artifact, and no model is asked.
 */
export const CarriedStep = z.strictObject({
  stepId: SafeId,
  title: z.string(),
  /** The run it passed in. */
  runId: SafeId,
  contract: Contract.nullable(),
  attempt: z.lazy(() => AttemptRecord),
});
export type CarriedStep = z.infer<typeof CarriedStep>;

/** The job a run belongs to: the runs of one plan, carried on by `pge continue`, numbered from 1. */
export const RunJob = z.strictObject({ id: SafeId, run: z.number().int().min(1) });
export type RunJob = z.infer<typeof RunJob>;

/** The job a run belongs to, from its `run.started`: its own, run 1, when it continues none. */
export function jobOf(started: { runId: string; payload: { job?: RunJob | undefined } }): RunJob {
  return started.payload.job ?? { id: started.runId, run: 1 };
}

/** A person's name as the log records who acted (`by`, `startedBy`). */
export const Operator = z.string().min(1).max(200);

/** The run a continued run carries on (`pge continue`): its id, its log, and the steps kept from it. */
export const RunContinuation = z.strictObject({
  runId: SafeId,
  logPath: z.string(),
  carried: z.array(CarriedStep),
});
export type RunContinuation = z.infer<typeof RunContinuation>;

export const RunStarted = event(
  'run.started',
  z.strictObject({
    task: z.string().min(1),
    logPath: z.string(),
    settings: RunSettings,
    /**
     * Who started the run, when a person did it by name: the operator of `pge dashboard --control`
     * (a start or a fork from the page), a submission's `by`. Absent otherwise, and in logs written
     * before it was recorded.
     */
    startedBy: Operator.optional(),
    /** A fork's parent: the run whose events before step `fromStep` this one took (`pge fork`). */
    parent: z
      .strictObject({ runId: SafeId, logPath: z.string(), fromStep: z.number().int().min(1) })
      .optional(),
    /** The job the run belongs to, when it carries one on (`pge continue`); absent: a job of its own, this its first run. */
    job: RunJob.optional(),
    /** The run this one carries on (`pge continue`), and the steps it keeps from it. */
    continues: RunContinuation.optional(),
    /**
     * The trace context of the run's span, when its coordinator traces (OpenTelemetry): a process
     * that resumes the run continues that trace. Absent when tracing was off.
     */
    traceparent: TraceParent.optional(),
  }),
);
/**
 * A run continued by a new owner after its process died: the charts were rebuilt from events
 * 1..`fromSeq` without asking any model again, and the run goes on from here. `repeated` names
 * the requests that were in flight at the crash and are asked again (their answers were lost);
 * `pausedMs` is the time from the last recorded event to the resume, which the run's duration
 * (and its `maxDurationMs` budget) does not count; `discardedBytes` is the torn end of a write that
 * the crash cut short, removed from the log before it was continued (0 almost always).
 */
export const RunResumed = event(
  'run.resumed',
  z.strictObject({
    /** Who continues the run: `<host>:<pid>` of an embedded process, a coordinator's id on NATS. */
    owner: z.string().min(1),
    fromSeq: z.number().int().min(1),
    logPath: z.string(),
    repeated: z.array(z.string()),
    pausedMs: z.number().min(0),
    discardedBytes: z.number().int().min(0),
  }),
);
export const PlanRequested = event(
  'plan.requested',
  z.strictObject({ phase: z.literal('plan'), input: PlanInput }),
);
export const PlanCreated = event(
  'plan.created',
  z.strictObject({
    plan: Plan,
    criteria: z.array(ResolvedCriterion),
    replan: z.number().int().min(0),
    /** Present when the plan was given, not planned: the file it came from (null: through the API). */
    given: z.strictObject({ file: z.string().nullable() }).optional(),
  }),
);
export const PlanTruncated = event(
  'plan.truncated',
  z.strictObject({ from: z.number().int(), to: z.number().int(), droppedStepIds: z.array(SafeId) }),
);
export const StepStarted = event('step.started', z.strictObject({ ...StepRef, title: z.string() }));
/** A step kept from the run this one continues (`CarriedStep`): it counts as passed, and is not run. */
export const StepCarried = event(
  'step.carried',
  z.strictObject({ ...StepRef, title: z.string(), fromRunId: SafeId }),
);
export const ContractRequested = event(
  'step.contract.requested',
  z.strictObject({ phase: z.literal('contract'), input: ContractInput }),
);
export const ContractProposed = event(
  'step.contract.proposed',
  z.strictObject({ ...StepRef, round: z.number().int().min(1), proposal: ContractProposal }),
);
export const ReviewRequested = event(
  'step.review.requested',
  z.strictObject({ phase: z.literal('contract_review'), input: ContractReviewInput }),
);
export const ContractReviewed = event(
  'step.contract.reviewed',
  z.strictObject({ ...StepRef, round: z.number().int().min(1), review: ContractReview }),
);
export const ContractAgreed = event(
  'step.contract.agreed',
  z.strictObject({ ...StepRef, contract: Contract }),
);
export const ContractImposed = event(
  'step.contract.imposed',
  z.strictObject({ ...StepRef, contract: Contract, outstandingAmendments: z.array(z.string()) }),
);
export const WorkRequested = event(
  'step.work.requested',
  z.strictObject({ phase: z.literal('work'), input: WorkInput }),
);
/**
 * The generator's work, and what the validators its worker runs made of it (in their order; absent
 * when the worker has none). The evaluator is called only when every one passed.
 */
export const WorkCompleted = event(
  'step.work.completed',
  z.strictObject({ ...AttemptRef, work: Work, validation: z.array(ValidatorRun).optional() }),
);
export const WorkInvalid = event(
  'step.work.invalid',
  z.strictObject({ ...AttemptRef, problem: z.string(), raw: z.string().nullable() }),
);
export const EvaluationRequested = event(
  'step.evaluation.requested',
  z.strictObject({ phase: z.literal('evaluation'), input: EvaluationInput }),
);
export const EvaluationCompleted = event(
  'step.evaluation.completed',
  z.strictObject({ ...AttemptRef, evaluation: Evaluation }),
);
export const EvaluationInvalid = event(
  'step.evaluation.invalid',
  z.strictObject({ ...AttemptRef, problem: z.string(), raw: z.string().nullable() }),
);
/** The chart's verdict on an attempt. */
export const Verdict = z.enum(['pass', 'fail']);
export type Verdict = z.infer<typeof Verdict>;

/** The verdict on an attempt: the scores against the thresholds, and the chart's decision. */
const Judgement = {
  verdict: Verdict,
  reason: AttemptReason,
  scores: z.array(JudgedScore),
  weightedMean: z.number().nullable(),
};

/** One attempt at a step, as the step keeps it: its signal, work, evaluation and verdict. */
export const AttemptRecord = z.strictObject({
  attempt: z.number().int().min(1),
  /** `initial` for the first attempt, else the signal the generator was given. */
  signal: z.enum(['initial', ...RetrySignal.options]),
  work: Work.nullable(),
  evaluation: Evaluation.nullable(),
  /** Why the work or the evaluation was invalid, when it was. */
  problem: z.string().nullable(),
  ...Judgement,
});
export type AttemptRecord = z.infer<typeof AttemptRecord>;

export const AttemptJudged = event('step.attempt.judged', z.strictObject({ ...AttemptRef, ...Judgement }));
export const RetryScheduled = event(
  'step.retry.scheduled',
  z.strictObject({
    ...StepRef,
    nextAttempt: z.number().int().min(2),
    signal: RetrySignal,
    previousMean: z.number().nullable(),
    lastMean: z.number().nullable(),
  }),
);
export const StepPassed = event(
  'step.passed',
  z.strictObject({ ...AttemptRef, bestAttempt: z.number().int().min(1) }),
);
/** A person's decision at a gate; `reason` says why a rejection was made (the planner, the generator hear it). */
export const ApprovalDecision = z.strictObject({
  decision: z.enum(['approve', 'reject']),
  reason: z.string().max(4000).nullable(),
  /** Who decided: a user's name, `terminal`, or the deadline's policy (`deadline`). */
  by: Operator,
});
export type ApprovalDecision = z.infer<typeof ApprovalDecision>;

/**
 * The run waits at a gate for a person's decision (`--approve`): its plan, a step's contract, or a
 * step's result that passed its evaluation. `summary` says what is to be approved; the event's id
 * is the request's, which `approval.decided` names.
 */
export const ApprovalRequested = event(
  'approval.requested',
  z.strictObject({
    gate: ApprovalGate,
    stepId: SafeId.nullable(),
    stepNumber: z.number().int().min(1).nullable(),
    attempt: z.number().int().min(1).nullable(),
    summary: z.string(),
  }),
);
/** The decision at a gate: the run goes on (approve) or goes back with the reason (reject). */
export const ApprovalDecided = event(
  'approval.decided',
  z.strictObject({ requestId: z.string(), gate: ApprovalGate, ...ApprovalDecision.shape }),
);

/**
 * The evaluator judged the attempt's failure to be the plan's (`failureKind: 'plan'`) and a
 * replan is left: the step ends here and the planner revises the plan with the evaluation.
 */
export const StepPlanRejected = event('step.plan.rejected', z.strictObject({ ...AttemptRef }));
export const StepFailed = event(
  'step.failed',
  z.strictObject({
    ...StepRef,
    attempts: z.number().int().min(0),
    bestAttempt: z.number().int().min(1).nullable(),
    policy: ExhaustionPolicy,
  }),
);
export const ModelCallCompleted = event(
  'model.call.completed',
  ModelCall.extend({ requestId: z.string(), worker: z.string() }).strict(),
);
export const RoleFailed = event(
  'role.failed',
  z.strictObject({
    requestId: z.string(),
    role: Role,
    phase: Phase,
    error: ErrorInfo,
    raw: z.string().nullable(),
  }),
);
/**
 * A request the run stopped waiting for: the chart left the state that asked (the run was
 * interrupted, say), so its call actor was stopped and the workers were told to cancel it.
 */
export const RequestCancelled = event(
  'request.cancelled',
  z.strictObject({ requestId: z.string(), phase: Phase, reason: z.string() }),
);
/**
 * Why an answer was not applied: no call of the run was waiting for it (`duplicate`: answered
 * already; `late`: cancelled, or its run ended; `unknown`: never asked), or the call it names
 * waits but the answer is not its own (`wrong-run`: it names another run; `wrong-role`: it comes
 * from a role that does not serve the request).
 */
export const ResultRejectionReason = z.enum(['duplicate', 'late', 'unknown', 'wrong-run', 'wrong-role']);
export type ResultRejectionReason = z.infer<typeof ResultRejectionReason>;
/**
 * A worker's result that no pending call of the run was waiting for: a second answer to a request
 * already answered (a redelivery), an answer to a cancelled request, or an answer to a request
 * this run never made; or one that names a waiting call of the run but another run, or comes
 * from a role that does not serve the request. It is reported and never applied.
 */
export const ResultRejected = event(
  'result.rejected',
  z.strictObject({ requestId: z.string(), worker: z.string(), reason: ResultRejectionReason }),
);
export const RunCompleted = event('run.completed', z.strictObject(ClosingTotals));
/**
 * A step that was running when its run stopped: the state its step chart was in (`evaluating`,
 * `negotiating.proposing`, `executing.refining`…) and its attempt (1 from its contract to its
 * first verdict).
 */
export const StepInFlight = z.strictObject({ ...AttemptRef, state: z.string().min(1).max(200) });
export type StepInFlight = z.infer<typeof StepInFlight>;
/** Who cancelled a run (`pge cancel`, `RunHandle.cancel`), and why, if they said. */
export const RunCancellation = z.strictObject({
  by: Operator,
  reason: z.string().min(1).max(4000).nullable(),
});
export type RunCancellation = z.infer<typeof RunCancellation>;
/**
 * A run that stopped before completing: `reason` says how, `message` why, in words. Every step still
 * running when it stopped is in `inFlight` (steps run side by side, #34), its calls cancelled
 * (`request.cancelled` before this event); the field is absent in logs written before it. An interrupted
 * run carries the reason its interrupt gave in `interruptReason` (null for none), which a replay
 * gives the run again; the field is absent for every other reason, and in logs written before it
 * existed (a replay reads those through `withLegacyInterruptReason`). A cancelled run (reason
 * `cancelled`) says who cancelled it, and why, in `cancelled`. An earlier pge reads this
 * payload as a closed object and refuses it when either field is there: readers are upgraded
 * before coordinators (docs/distributed.md).
 */
export const RunFailed = event(
  'run.failed',
  z
    .strictObject({
      ...ClosingTotals,
      reason: RunStopReason,
      message: z.string(),
      interruptReason: z.string().min(1).nullable().optional(),
      inFlight: z.array(StepInFlight).optional(),
      cancelled: RunCancellation.optional(),
    })
    .refine((p) => p.interruptReason === undefined || p.reason === 'interrupted', {
      message: 'interruptReason is given only when the run was interrupted',
      path: ['interruptReason'],
    })
    .refine((p) => (p.cancelled !== undefined) === (p.reason === 'cancelled'), {
      message: 'cancelled is given exactly when the run was cancelled',
      path: ['cancelled'],
    }),
);

/** Every event of a run. */
export const RunEvent = z.discriminatedUnion('type', [
  RunStarted,
  PlanRequested,
  PlanCreated,
  PlanTruncated,
  StepStarted,
  StepCarried,
  ContractRequested,
  ContractProposed,
  ReviewRequested,
  ContractReviewed,
  ContractAgreed,
  ContractImposed,
  WorkRequested,
  WorkCompleted,
  WorkInvalid,
  EvaluationRequested,
  EvaluationCompleted,
  EvaluationInvalid,
  AttemptJudged,
  RetryScheduled,
  StepPassed,
  StepPlanRejected,
  StepFailed,
  ApprovalRequested,
  ApprovalDecided,
  ModelCallCompleted,
  RoleFailed,
  RequestCancelled,
  ResultRejected,
  RunResumed,
  RunCompleted,
  RunFailed,
]);
export type RunEvent = z.infer<typeof RunEvent>;
/** The `type` of any run event. */
export type RunEventType = RunEvent['type'];
/** The event of a given type. */
export type RunEventOf<T extends RunEventType> = Extract<RunEvent, { type: T }>;
/** True for the event that closes a run (`run.completed`, `run.failed`): nothing of the run follows it. */
export function isClosingEvent(event: RunEvent): event is RunEventOf<'run.completed' | 'run.failed'> {
  return event.type === 'run.completed' || event.type === 'run.failed';
}
/** The event that opens a run's log: its start, or its resume by a process that did not start it. */
export type RunOpening = RunEventOf<'run.started'> | RunEventOf<'run.resumed'>;
/** An event before the coordinator stamps it with its envelope. */
export type RunEventDraft = {
  [T in RunEventType]: { type: T; payload: RunEventOf<T>['payload'] };
}[RunEventType];

/** Request events, each of which is also a work item for one role. */
export const RoleRequest = z.discriminatedUnion('type', [
  PlanRequested,
  ContractRequested,
  ReviewRequested,
  WorkRequested,
  EvaluationRequested,
]);
export type RoleRequest = z.infer<typeof RoleRequest>;

/** The role that serves each request type. */
export const ROLE_OF_REQUEST = {
  'plan.requested': 'planner',
  'step.contract.requested': 'generator',
  'step.review.requested': 'evaluator',
  'step.work.requested': 'generator',
  'step.evaluation.requested': 'evaluator',
} as const satisfies Record<RoleRequest['type'], Role>;

/** Whether `event` asks a role for something (a request on its role's work queue). */
export function isRoleRequest(event: { type: string }): event is RoleRequest {
  return Object.hasOwn(ROLE_OF_REQUEST, event.type);
}
