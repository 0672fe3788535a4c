import type { ActorSystem, AnyActorRef } from 'xstate';
import type {
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
 * How the charts call the roles. A state that needs a model call names the call as its entry
 * action (`plan`, `proposeContract`, `reviewContract`, `doWork`, `evaluateWork`, with the role's
 * typed input as params) and waits for the answer as an event: `answer.<phase>` with the output,
 * or `answer.failed` with the error. The chart stays free of I/O: the actions are provided at the
 * composition root, built with `answering`.
 *
 * Answers are events rather than invoked promise actors for two reasons. An invoked actor costs
 * XState about 17 µs per call on a small VM (an actor is created, registered, started, observed
 * and stopped), against about 1 µs for an event: that difference was a fifth of the harness's
 * overhead per model call. And an answer that is an event can come from anywhere the coordinator
 * gets one, such as a log being resumed or a run being replayed, without calling a model again.
 *
 * An answer carries no identity of its call: a calling state is left only by its own answer (or
 * by the run's `interrupt`, which stops the chart), and the coordinator takes one result per
 * request, so an answer always meets the call it answers. A source that could deliver an answer
 * twice or late (a replay, a call deadline) must first add the call's identity to the event.
 */

/** The calls, by the name of their entry action: the input each takes and the output it answers with. */
export interface Calls {
  plan: { phase: 'plan'; input: PlanInput; output: PlanOutput };
  proposeContract: { phase: 'contract'; input: ContractInput; output: ProposalOutput };
  reviewContract: { phase: 'contract_review'; input: ContractReviewInput; output: ReviewOutput };
  doWork: { phase: 'work'; input: WorkInput; output: WorkOutput };
  evaluateWork: { phase: 'evaluation'; input: EvaluationInput; output: EvaluateOutput };
}

export type CallName = keyof Calls;

/** The phase of each call: the suffix of its answer event. */
export const PHASE_OF_CALL: { readonly [C in CallName]: Calls[C]['phase'] } = {
  plan: 'plan',
  proposeContract: 'contract',
  reviewContract: 'contract_review',
  doWork: 'work',
  evaluateWork: 'evaluation',
};

/** The event that answers call `C`. */
export type AnswerOf<C extends CallName> = {
  type: `answer.${Calls[C]['phase']}`;
  output: Calls[C]['output'];
};

/** A call that failed: the role could not answer, or the answer broke the protocol. */
export interface CallFailed {
  type: 'answer.failed';
  error: unknown;
}

/** The events of the step chart's calls. */
export type StepAnswer =
  | AnswerOf<'proposeContract'>
  | AnswerOf<'reviewContract'>
  | AnswerOf<'doWork'>
  | AnswerOf<'evaluateWork'>
  | CallFailed;

// biome-ignore lint/suspicious/noExplicitAny: xstate's own AnyActorSystem, which it does not export
export type AnyActorSystem = ActorSystem<any>;

/** What a call action gets from XState: the asking actor and its system. */
export interface CallArgs {
  self: AnyActorRef;
  system: AnyActorSystem;
}

/**
 * The action of call `name`, from a function that answers it. The answer, or the failure, is sent
 * back to the asking actor as its event, unless the actor stopped meanwhile (an interrupted run,
 * whose call answers into the void, as a stopped invoked actor's did).
 */
export function answering<C extends CallName>(
  name: C,
  answer: (input: Calls[C]['input'], system: AnyActorSystem) => Promise<Calls[C]['output']>,
): (args: CallArgs, input: Calls[C]['input']) => void {
  const type = `answer.${PHASE_OF_CALL[name]}` as const;
  return ({ self, system }, input) => {
    let answered: Promise<Calls[C]['output']>;
    try {
      answered = answer(input, system);
    } catch (error) {
      answered = Promise.reject(error);
    }
    const reply = (event: AnswerOf<C> | CallFailed): void => {
      if (self.getSnapshot().status === 'active') self.send(event);
    };
    answered.then(
      (output) => reply({ type, output } as AnswerOf<C>),
      (error: unknown) => reply({ type: 'answer.failed', error }),
    );
  };
}

/**
 * The default of a call action: a chart run without its calls provided fails at the first one,
 * through `answer.failed` like any failed call (the chart ends in `failed`, with its closing event).
 */
export function notProvided<C extends CallName>(name: C): (args: CallArgs, input: Calls[C]['input']) => void {
  return answering(name, () => {
    throw new Error(`the call action "${name}" must be provided at the composition root`);
  });
}
