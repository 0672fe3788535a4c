import { describe, expect, it } from 'vitest';
import { assign, createActor, setup, toPromise } from 'xstate';
import { answering, type CallFailed, notProvided, type StepAnswer } from '../../src/machines/calls.js';
import { runMachine } from '../../src/machines/run-machine.js';
import type { WorkInput, WorkOutput } from '../../src/machines/types.js';
import { CALL_USAGE, runInput } from '../support/chart-fixtures.js';

/** A chart with one call, to see how `answering` delivers answers and failures. */
interface Answered {
  output: WorkOutput | null;
  error: unknown;
}

const oneCall = setup({
  types: { context: {} as Answered, events: {} as StepAnswer, output: {} as Answered },
  actions: { doWork: notProvided('doWork') as (_: unknown, input: WorkInput) => void },
}).createMachine({
  context: { output: null, error: null },
  initial: 'working',
  output: ({ context }) => context,
  states: {
    working: {
      entry: { type: 'doWork', params: () => ({ attempt: 1 }) as WorkInput },
      on: {
        'answer.work': { target: 'done', actions: assign({ output: ({ event }) => event.output }) },
        'answer.failed': {
          target: 'done',
          actions: assign({ error: ({ event }) => (event as CallFailed).error }),
        },
      },
    },
    done: { type: 'final' },
  },
});

const WORK: WorkOutput = { work: null, problem: 'never valid', usage: CALL_USAGE, finishedAt: 1 };

describe('model calls as actions answered by events', () => {
  it('sends the answer back as answer.<phase>, with the input the state gave', async () => {
    const inputs: WorkInput[] = [];
    const machine = oneCall.provide({
      actions: {
        doWork: answering('doWork', async (input) => {
          inputs.push(input);
          return WORK;
        }),
      },
    });
    const outcome = await toPromise(createActor(machine).start());
    expect(outcome.output).toEqual(WORK);
    expect(inputs).toEqual([{ attempt: 1 }]);
  });

  it('sends a failure, thrown at once or rejected later, as answer.failed', async () => {
    const thrown = new Error('no worker');
    for (const answer of [
      () => {
        throw thrown;
      },
      async () => {
        throw thrown;
      },
    ]) {
      const machine = oneCall.provide({ actions: { doWork: answering('doWork', answer) } });
      const outcome = await toPromise(createActor(machine).start());
      expect(outcome.error).toBe(thrown);
    }
  });

  it('drops an answer that arrives after the asking actor stopped', async () => {
    let answer!: (output: WorkOutput) => void;
    const machine = oneCall.provide({
      actions: {
        doWork: answering('doWork', () => new Promise<WorkOutput>((resolve) => (answer = resolve))),
      },
    });
    const actor = createActor(machine).start();
    const errors: unknown[] = [];
    actor.subscribe({ error: (error) => errors.push(error) });
    actor.stop();
    answer(WORK);
    await new Promise((resolve) => setTimeout(resolve, 0));
    expect(actor.getSnapshot().status).toBe('stopped');
    expect(actor.getSnapshot().context.output).toBeNull();
    expect(errors).toEqual([]);
  });

  it('fails a chart whose calls were not provided through answer.failed, naming the call', async () => {
    const outcome = await toPromise(createActor(oneCall).start());
    expect(String(outcome.error)).toContain('the call action "doWork" must be provided');
  });

  it('ends a run without its planner provided as failed, with its closing event', () => {
    const recorded: string[] = [];
    const machine = runMachine.provide({
      actions: {
        record: (_, p: { type: string }) => {
          recorded.push(p.type);
        },
      },
    });
    const actor = createActor(machine, { input: runInput() }).start();
    return toPromise(actor).then((outcome) => {
      expect(outcome.status).toBe('failed');
      expect(outcome.error?.message).toContain('the call action "plan" must be provided');
      expect(recorded).toEqual(['run.failed']);
    });
  });
});
