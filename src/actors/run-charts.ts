import type { ActorSystem } from 'xstate';
import { fromPromise } from 'xstate';
import { PgeError, RunClosedError } from '../errors.js';
import type { CallName, Calls } from '../machines/calls.js';
import { runMachine } from '../machines/run-machine.js';
import { sessionMachine } from '../machines/session-machine.js';
import { stepMachine } from '../machines/step-machine.js';
import type { ApprovalInput, ApprovalOutput, CallReport, RecordParams } from '../machines/types.js';
import type {
  ApprovalDecision,
  ErrorInfo,
  RoleRequest,
  RoleResult,
  RoleSuccess,
  RunEventDraft,
  RunEventOf,
} from '../schemas/index.js';
import { truncatePlan } from '../schemas/index.js';

/**
 * The run and step charts with their call actors (`calls.ts`) and `record` action provided: each
 * call becomes a request through its run's scope, and its result the actor's output and the
 * run's events. Provided once per coordinator, not per run (each run's actors find their run
 * through the actor system they belong to).
 */

// biome-ignore lint/suspicious/noExplicitAny: xstate's own AnyActorSystem, which it does not export
export type AnyActorSystem = ActorSystem<any>;

/** What one run's actors and `record` action work with; the coordinator makes one per run. */
export interface RunScope {
  /** Stamps (at `at`, else now) and publishes an event of the run. */
  record<T extends RunEventDraft>(draft: T, at?: number): RunEventOf<T['type']>;
  /** Records an event the chart asked for (`record` action), completed with what the coordinator knows. */
  recordChart(draft: RecordParams): void;
  /**
   * Sends a request for the call actor `caller` and waits for its result; records the calls it
   * cost. When the actor's `signal` aborts (it was stopped), the request is cancelled and the
   * promise rejects.
   */
  ask(draft: RequestDraft, caller: Caller): Promise<RoleReply>;
  /**
   * Records `approval.requested` and waits for a person's decision, which it records as
   * `approval.decided`; rejects when `signal` aborts (the run left the gate: interrupted).
   */
  awaitDecision(input: ApprovalInput, signal: AbortSignal): Promise<ApprovalOutput>;
  /** The charts' `timeOutCall`: cancels the request of call actor `caller` and fails it with a timeout. */
  timeOutCall(caller: object): void;
  /** The session's `settleDecision`: the gate of `requestId` takes `decision`. */
  settleDecision(requestId: string, decision: ApprovalDecision): void;
  /** The session's `letGo`: nothing more of the run is recorded or sent; `owner` has it. */
  letGo(owner: string, error: Error): void;
}

/**
 * A role failure re-thrown into the chart, keeping the worker's name and retryability, and what
 * the failed call cost (`reportOfError`), which the chart counts.
 */
class RoleError extends PgeError {
  readonly retryable: boolean;
  readonly report: CallReport | undefined;
  constructor(info: ErrorInfo, report?: CallReport) {
    super(info.message);
    this.name = info.name;
    this.retryable = info.retryable;
    this.report = report;
  }
}

type Success<P extends RoleSuccess['phase']> = Extract<RoleSuccess, { phase: P }>['output'];

/** The draft of a request event: its type and payload. */
export type RequestDraft = RoleRequest extends infer R
  ? R extends RoleRequest
    ? Pick<R, 'type' | 'payload'>
    : never
  : never;

/** The call actor a request is made for, and its signal (aborted when the actor is stopped). */
export interface Caller {
  self: object;
  signal: AbortSignal;
}

/** A request, the result its worker sent back, and what the call cost. */
export interface RoleReply {
  request: RoleRequest;
  result: RoleResult['result'];
  report: CallReport;
  /** Epoch milliseconds when the result arrived: the time of the answer event recorded for it. */
  receivedAt: number;
}

/** The output of a successful reply of `phase`; records `role.failed` and throws for a failed one. */
function ok<P extends RoleSuccess['phase']>(
  run: RunScope,
  reply: RoleReply,
  phase: P,
  role: RoleResult['role'],
): Success<P> {
  const { result } = reply;
  if (result.status === 'error') {
    run.record(
      {
        type: 'role.failed',
        payload: {
          requestId: reply.request.id,
          role,
          phase: result.phase,
          error: result.error,
          raw: result.raw,
        },
        // Stamped when the failure arrived, as a replay reads its time back (a result without calls).
      },
      reply.receivedAt,
    );
    throw new RoleError(result.error, reply.report);
  }
  if (result.phase !== phase)
    throw new RoleError({ name: 'ProtocolError', message: `expected a ${phase} result`, retryable: false });
  return result.output as Success<P>;
}

/** The attempt an input is for, as the attempt's events name it. */
function attemptRef(input: { step: { id: string }; stepNumber: number; attempt: number }) {
  return { stepId: input.step.id, stepNumber: input.stepNumber, attempt: input.attempt };
}

/**
 * For work or an evaluation whose answer never validated (the harness fails closed): records
 * `type` and returns the problem, which the chart judges as a failed attempt; null otherwise.
 */
function invalidAnswer(
  run: RunScope,
  reply: RoleReply,
  type: 'step.work.invalid' | 'step.evaluation.invalid',
  ref: ReturnType<typeof attemptRef>,
): string | null {
  const { result } = reply;
  if (result.status !== 'error' || result.error.name !== 'InvalidOutputError') return null;
  run.record({ type, payload: { ...ref, problem: result.error.message, raw: result.raw } });
  return result.error.message;
}

/** How a call actor of `C` answers: from its input, the run's scope and the actor that calls. */
type Answer<C extends CallName> = (
  input: Calls[C]['input'],
  run: RunScope,
  caller: Caller,
) => Promise<Calls[C]['output']>;

/** The plan, cut here too: a planner written in another language may not (DESIGN 1 is the harness's). */
const plan: Answer<'plan'> = async (input, run, caller) => {
  const reply = await run.ask({ type: 'plan.requested', payload: { phase: 'plan', input } }, caller);
  const answered = ok(run, reply, 'plan', 'planner');
  const cut = answered.truncation ? answered : truncatePlan(answered.plan, input.maxSteps);
  const { truncation } = cut;
  if (truncation)
    run.record({ type: 'plan.truncated', payload: { ...truncation, to: cut.plan.steps.length } });
  return { plan: cut.plan, ...reply.report };
};

const proposeContract: Answer<'proposeContract'> = async (input, run, caller) => {
  const reply = await run.ask(
    { type: 'step.contract.requested', payload: { phase: 'contract', input } },
    caller,
  );
  const proposal = ok(run, reply, 'contract', 'generator');
  run.record({
    type: 'step.contract.proposed',
    payload: { stepId: input.step.id, stepNumber: input.stepNumber, round: input.round, proposal },
  });
  return { proposal, ...reply.report };
};

const reviewContract: Answer<'reviewContract'> = async (input, run, caller) => {
  const reply = await run.ask(
    { type: 'step.review.requested', payload: { phase: 'contract_review', input } },
    caller,
  );
  const review = ok(run, reply, 'contract_review', 'evaluator');
  run.record({
    type: 'step.contract.reviewed',
    payload: { stepId: input.step.id, stepNumber: input.stepNumber, round: input.round, review },
  });
  return { review, ...reply.report };
};

/** The work of an attempt, with the runs of the generator's validators when it has them. */
const doWork: Answer<'doWork'> = async (input, run, caller) => {
  const reply = await run.ask({ type: 'step.work.requested', payload: { phase: 'work', input } }, caller);
  const ref = attemptRef(input);
  const problem = invalidAnswer(run, reply, 'step.work.invalid', ref);
  if (problem !== null) return { work: null, problem, validation: null, ...reply.report };
  const work = ok(run, reply, 'work', 'generator');
  const validation =
    reply.result.status === 'ok' && reply.result.phase === 'work' ? reply.result.validation : undefined;
  run.record({
    type: 'step.work.completed',
    payload: { ...ref, work, ...(validation === undefined ? {} : { validation }) },
  });
  return { work, problem: null, validation: validation ?? null, ...reply.report };
};

const evaluateWork: Answer<'evaluateWork'> = async (input, run, caller) => {
  const reply = await run.ask(
    { type: 'step.evaluation.requested', payload: { phase: 'evaluation', input } },
    caller,
  );
  const ref = attemptRef(input);
  const problem = invalidAnswer(run, reply, 'step.evaluation.invalid', ref);
  if (problem !== null) return { evaluation: null, problem, ...reply.report };
  const evaluation = ok(run, reply, 'evaluation', 'evaluator');
  run.record({ type: 'step.evaluation.completed', payload: { ...ref, evaluation } });
  return { evaluation, problem: null, ...reply.report };
};

const awaitApproval: Answer<'awaitApproval'> = (input, run, { signal }) => run.awaitDecision(input, signal);

/** The run machine with its calls and `record` action provided; `scope` finds an actor's run. */
function provideCharts(scope: (system: AnyActorSystem) => RunScope): typeof runMachine {
  const recordAction = ({ system }: { system: AnyActorSystem }, draft: RecordParams): void =>
    scope(system).recordChart(draft);
  /** The promise actor of call `C`. */
  const call = <C extends CallName>(answer: Answer<C>) =>
    fromPromise<Calls[C]['output'], Calls[C]['input']>(({ input, system, signal, self }) =>
      answer(input, scope(system), { self, signal }),
    );
  /** The charts' `timeOutCall`: the call the state invoked as `call`, among the actor's children. */
  const timeOutCall = (
    {
      self,
      system,
    }: { self: { getSnapshot(): { children: Record<string, unknown> } }; system: AnyActorSystem },
    { call: name }: { call: CallName },
  ): void => {
    const caller = self.getSnapshot().children[name];
    if (caller !== undefined) scope(system).timeOutCall(caller as object);
  };
  const actions = { record: recordAction, timeOutCall };
  const approval = call(awaitApproval);
  const steps = stepMachine.provide({
    actions,
    actors: {
      awaitApproval: approval,
      proposeContract: call(proposeContract),
      reviewContract: call(reviewContract),
      doWork: call(doWork),
      evaluateWork: call(evaluateWork),
    },
  });
  return runMachine.provide({
    actions,
    actors: { runStep: steps, awaitApproval: approval, plan: call(plan) },
  });
}

/**
 * The session machine with all its I/O provided, at this one place: its actions
 * (`settleDecision`, `letGo`) and its `run` actor, the run chart with its calls.
 * `scopeOf` finds the scope of the run an actor belongs to (undefined once the run has ended).
 */
export function provideSession(
  scopeOf: (system: AnyActorSystem) => RunScope | undefined,
): typeof sessionMachine {
  const scope = (system: AnyActorSystem): RunScope => {
    const found = scopeOf(system);
    if (found === undefined) throw new RunClosedError('an actor of a run that has ended');
    return found;
  };
  return sessionMachine.provide({
    actions: {
      settleDecision: ({ system }, { requestId, decision }) =>
        scope(system).settleDecision(requestId, decision),
      letGo: ({ system }, { owner, error }) => scope(system).letGo(owner, error),
    },
    actors: { run: provideCharts(scope) },
  });
}
