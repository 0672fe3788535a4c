import { assign, createActor, fromPromise, setup, toPromise } from 'xstate';
import type {
  ContractProposal,
  ContractReview,
  Evaluation,
  Plan,
  PlanStep,
  ResolvedCriterion,
  Work,
} from '../src/schemas/index.js';
import { benchPlan, callsPerRun, evaluationFor, proposalFor, reviewFor, workFor } from './instant-model.js';
import { type LoopFigures, loopFigures, pool, timed } from './measure.js';

/**
 * Section 2: the baseline. A bare XState v5 loop of the same shape as a pge run: plan, then per
 * step propose → review → work → evaluate → judge, retrying work and evaluation until the step
 * passes, with the same instant answers and the same fail-once-then-pass pattern. No bus, no
 * validation, no events, no log: what is left is XState and the promises of the actors.
 */

interface BareContext {
  steps: number;
  plan: Plan | null;
  index: number;
  attempt: number;
  proposal: ContractProposal | null;
  review: ContractReview | null;
  work: Work | null;
  evaluation: Evaluation | null;
}

interface StepCall {
  step: PlanStep;
  attempt: number;
  criteria: ResolvedCriterion[];
}

const stepCall = (context: BareContext): StepCall => ({
  step: context.plan!.steps[context.index]!,
  attempt: context.attempt,
  criteria: context.plan!.criteria as ResolvedCriterion[],
});

const bareMachine = setup({
  types: { context: {} as BareContext, input: {} as { steps: number } },
  actors: {
    plan: fromPromise<Plan, { steps: number }>(async () => {
      throw new Error('provided below');
    }),
    propose: fromPromise<ContractProposal, StepCall>(async () => {
      throw new Error('provided below');
    }),
    review: fromPromise<ContractReview, StepCall>(async () => {
      throw new Error('provided below');
    }),
    work: fromPromise<Work, StepCall>(async () => {
      throw new Error('provided below');
    }),
    evaluate: fromPromise<Evaluation, StepCall>(async () => {
      throw new Error('provided below');
    }),
  },
  guards: {
    attemptPassed: ({ context }) =>
      context.evaluation!.scores.every(
        (s) => s.score >= (context.plan!.criteria.find((c) => c.name === s.criterion)?.threshold ?? 6),
      ),
    lastStep: ({ context }) => context.index + 1 >= context.plan!.steps.length,
  },
}).createMachine({
  id: 'bare',
  context: ({ input }) => ({
    steps: input.steps,
    plan: null,
    index: 0,
    attempt: 1,
    proposal: null,
    review: null,
    work: null,
    evaluation: null,
  }),
  initial: 'planning',
  states: {
    planning: {
      invoke: {
        src: 'plan',
        input: ({ context }) => ({ steps: context.steps }),
        onDone: { target: 'proposing', actions: assign({ plan: ({ event }) => event.output }) },
      },
    },
    proposing: {
      invoke: {
        src: 'propose',
        input: ({ context }) => stepCall(context),
        onDone: { target: 'reviewing', actions: assign({ proposal: ({ event }) => event.output }) },
      },
    },
    reviewing: {
      invoke: {
        src: 'review',
        input: ({ context }) => stepCall(context),
        onDone: { target: 'working', actions: assign({ review: ({ event }) => event.output }) },
      },
    },
    working: {
      invoke: {
        src: 'work',
        input: ({ context }) => stepCall(context),
        onDone: { target: 'evaluating', actions: assign({ work: ({ event }) => event.output }) },
      },
    },
    evaluating: {
      invoke: {
        src: 'evaluate',
        input: ({ context }) => stepCall(context),
        onDone: { target: 'judging', actions: assign({ evaluation: ({ event }) => event.output }) },
      },
    },
    judging: {
      always: [
        { guard: 'attemptPassed', target: 'nextStep' },
        { target: 'working', actions: assign({ attempt: ({ context }) => context.attempt + 1 }) },
      ],
    },
    nextStep: {
      always: [
        { guard: 'lastStep', target: 'done' },
        {
          target: 'proposing',
          actions: assign({ index: ({ context }) => context.index + 1, attempt: 1 }),
        },
      ],
    },
    done: { type: 'final' },
  },
});

/** The bare loop, with `batch`, which times `runs` runs of it, `concurrency` at a time. */
export function bareLoop(steps: number): {
  batch: (runs: number, concurrency: number) => Promise<LoopFigures>;
} {
  let calls = 0;
  let modelMs = 0;
  /** The same metering as `MeteredModel`: the answer is built synchronously, and that time is the model's. */
  const answer = <I, O>(build: (input: I) => O) =>
    fromPromise<O, I>(async ({ input }) => {
      calls++;
      const started = performance.now();
      const output = build(input);
      modelMs += performance.now() - started;
      return output;
    });
  const machine = bareMachine.provide({
    actors: {
      plan: answer((input: { steps: number }) => benchPlan(input.steps)),
      propose: answer((input: StepCall) => proposalFor(input)),
      review: answer((_: StepCall) => reviewFor()),
      work: answer((input: StepCall) => workFor(input)),
      evaluate: answer((input: StepCall) => evaluationFor(input)),
    },
  });

  const batch = async (runs: number, concurrency: number): Promise<LoopFigures> => {
    calls = 0;
    modelMs = 0;
    const time = await timed(() =>
      pool(runs, concurrency, async () => {
        const actor = createActor(machine, { input: { steps } });
        actor.start();
        await toPromise(actor);
      }),
    );
    const expected = runs * callsPerRun(steps);
    if (calls !== expected) throw new Error(`bare loop: ${calls} calls, expected ${expected}`);
    return loopFigures({ runs, concurrency, calls, modelMs }, time);
  };

  return { batch };
}
