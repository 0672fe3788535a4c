import { fromPromise, type PromiseActorLogic } from 'xstate';
import type {
  ApprovalInput,
  ApprovalOutput,
  ContractInput,
  ContractReviewInput,
  EvaluateOutput,
  EvaluationInput,
  PlanInput,
  PlanOutput,
  ProposalOutput,
  ReviewOutput,
  WorkInput,
  WorkOutput,
} from './types.js';

/**
 * How the charts call the roles. A state that needs a model call invokes a promise actor named
 * after the call (`plan`, `proposeContract`, `reviewContract`, `doWork`, `evaluateWork`) with the
 * role's typed input; its output arrives as the invoke's `onDone`, a failure as its `onError`.
 * The machines stay free of I/O: the real actors are provided at the composition root
 * (`src/actors/run-charts.ts`), test fakes the same way.
 *
 * Because each call is an actor, leaving the state stops it: XState aborts the actor's `signal`,
 * and the provided actor cancels the call end to end (the request to the worker, the worker's
 * HTTP request to the model). An answer that arrives after that has no actor to go to.
 */

/** The calls, by the name of the actor that makes them: the input each takes and the output it answers with. */
export interface Calls {
  /** Not a model's: a person's decision at a gate (`--approve`), which may take any time. */
  awaitApproval: { input: ApprovalInput; output: ApprovalOutput };
  plan: { input: PlanInput; output: PlanOutput };
  proposeContract: { input: ContractInput; output: ProposalOutput };
  reviewContract: { input: ContractReviewInput; output: ReviewOutput };
  doWork: { input: WorkInput; output: WorkOutput };
  evaluateWork: { input: EvaluationInput; output: EvaluateOutput };
}

export type CallName = keyof Calls;

/** The actor logic of call `C`. */
export type CallLogic<C extends CallName> = PromiseActorLogic<Calls[C]['output'], Calls[C]['input']>;

/**
 * The default of a call actor: a chart run without its calls provided fails at the first one,
 * through the invoke's `onError` like any failed call (so the run still ends with its closing event).
 */
export function notProvided<C extends CallName>(name: C): CallLogic<C> {
  return fromPromise<Calls[C]['output'], Calls[C]['input']>(async () => {
    throw new Error(`the call actor "${name}" must be provided at the composition root`);
  });
}

/**
 * The deadline of a state that makes a model call (`after: callDeadline(name)`): when the call has
 * had no answer within the run's `callTimeoutMs`, `timeOutCall` cancels its request and fails it
 * with a `CallTimeoutError`, as if its worker had given up; the invoke's `onError` then goes on as
 * after any failed call. The state invokes the call with `id: name`, so the action finds it among
 * the actor's children. Leaving the state first cancels the deadline.
 */
export function callDeadline<C extends Exclude<CallName, 'awaitApproval'>>(name: C) {
  return { callDeadline: { actions: { type: 'timeOutCall', params: { call: name } } } } as const;
}
