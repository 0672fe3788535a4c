import { mkdirSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { createActor, fromPromise, toPromise } from 'xstate';
import { publishEvent } from '../src/bus/channels.js';
import { InProcessBus } from '../src/bus/in-process-bus.js';
import { runMachine } from '../src/machines/run-machine.js';
import { stepMachine } from '../src/machines/step-machine.js';
import type {
  ContractInput,
  EvaluateOutput,
  EvaluationInput,
  PlanOutput,
  ProposalOutput,
  ReviewOutput,
  WorkInput,
  WorkOutput,
} from '../src/machines/types.js';
import { readLog } from '../src/persistence/log-reader.js';
import { createPersistenceActor } from '../src/persistence/persistence-actor.js';
import type { RunEvent } from '../src/schemas/index.js';
import { runInput } from '../tests/support/chart-fixtures.js';
import { benchPlan, callsPerRun, evaluationFor, proposalFor, reviewFor, workFor } from './instant-model.js';
import { type LoopFigures, loopFigures, timed } from './measure.js';

/**
 * Section 2b: two parts of pge that its design requires, each timed alone beside the bare loop, to
 * say how much of pge's cost per call they take before anything else is done.
 * - **charts**: pge's own run and step charts (`src/machines`), with instant call actors provided
 *   the way the bare loop provides its own: no bus, no worker, no prompt, no event published.
 * - **record**: the events of one real pge run, published again under a fresh run id on the
 *   in-process bus (each validated and frozen) to the persistence actor, which renders them into
 *   a new markdown log on disk: what recording a run costs, per model call of the run.
 */

const usage = { promptTokens: 100, completionTokens: 50, costUsd: 0, calls: 1 };

/** What a call actor answers, before the usage and the time it finished are added. */
type Answer<Output> = Omit<Output, 'usage' | 'finishedAt'>;

/** pge's run chart, with its step chart, and instant call actors metered like the bare loop's. */
export function chartsLoop(steps: number, task: string): { batch: (runs: number) => Promise<LoopFigures> } {
  let calls = 0;
  let modelMs = 0;
  const answer = <I, O>(build: (input: I) => O) =>
    fromPromise<O & { usage: typeof usage; finishedAt: number }, I>(async ({ input }) => {
      calls++;
      const started = performance.now();
      const output = build(input);
      modelMs += performance.now() - started;
      return { ...output, usage, finishedAt: Date.now() };
    });
  const record = () => {};
  const charts = runMachine.provide({
    actions: { record },
    actors: {
      plan: answer((): Answer<PlanOutput> => ({ plan: benchPlan(steps) })),
      runStep: stepMachine.provide({
        actions: { record },
        actors: {
          proposeContract: answer(
            (input: ContractInput): Answer<ProposalOutput> => ({
              proposal: proposalFor(input),
            }),
          ),
          reviewContract: answer((): Answer<ReviewOutput> => ({ review: reviewFor() })),
          doWork: answer(
            (input: WorkInput): Answer<WorkOutput> => ({
              work: workFor(input),
              problem: null,
              validation: null,
            }),
          ),
          evaluateWork: answer(
            (input: EvaluationInput): Answer<EvaluateOutput> => ({
              evaluation: evaluationFor(input),
              problem: null,
            }),
          ),
        },
      }),
    },
  });
  // The settings of a default run, as the chart tests run it.
  const input = runInput({ task, maxSteps: steps, logPath: '/nonexistent/charts-alone.md' });

  const batch = async (runs: number): Promise<LoopFigures> => {
    calls = 0;
    modelMs = 0;
    let passed = 0;
    const time = await timed(async () => {
      for (let i = 0; i < runs; i++) {
        const actor = createActor(charts, { input: { ...input, startedAt: Date.now() } });
        actor.start();
        const outcome = await toPromise(actor);
        if (outcome.status === 'completed' && outcome.outcomes.every((s) => s.status === 'passed')) passed++;
      }
    });
    const expected = runs * callsPerRun(steps);
    if (calls !== expected || passed !== runs)
      throw new Error(
        `charts alone: ${calls} calls (expected ${expected}), ${passed} of ${runs} runs passed`,
      );
    return loopFigures({ runs, concurrency: 1, calls, modelMs }, time);
  };
  return { batch };
}

/**
 * The record of a run: `events` (one run's, read from its log) published again, run after run,
 * each time under a new run id and log path in `dir`, to a persistence actor on an in-process bus.
 * Each run's copy is made just before it is published, so that a batch holds one run's events at a
 * time as pge does; its time is taken out like the model's. A run ends when its log is on disk and
 * closed, as `run()` does; every log of the batch is then read back and checked.
 */
export function recordLoop(
  events: readonly RunEvent[],
  dir: string,
  calls: number,
): { batch: (runs: number) => Promise<LoopFigures>; close: () => Promise<void> } {
  mkdirSync(dir, { recursive: true });
  const bus = new InProcessBus();
  let failure: Error | null = null;
  const persistence = createPersistenceActor({ bus, onError: (_, error) => (failure ??= error) });
  const original = events[0]!.runId;
  const source = JSON.stringify(events);
  let next = 0;
  const logOf = (runId: string) => join(dir, `pge_shared_state_${runId}.md`);
  /** The run's events under a fresh run id, logged in `dir`. */
  const copy = (): RunEvent[] => {
    const runId = `${original}-r${(next++).toString(36)}`;
    const renamed: RunEvent[] = JSON.parse(source.replaceAll(original, runId));
    const opening = renamed[0]!;
    if (opening.type !== 'run.started') throw new Error(`the record starts with ${opening.type}`);
    opening.payload.logPath = logOf(runId);
    return renamed;
  };

  const batch = async (runs: number): Promise<LoopFigures> => {
    const runIds: string[] = [];
    let copyMs = 0;
    const time = await timed(async () => {
      for (let i = 0; i < runs; i++) {
        const started = performance.now();
        const run = copy();
        copyMs += performance.now() - started;
        const { runId } = run[0]!;
        runIds.push(runId);
        await Promise.all(run.map((event) => publishEvent(bus, event)));
        await bus.flush();
        await persistence.flushed(runId);
      }
    });
    if (failure) throw failure;
    for (const runId of runIds) {
      const written = readLog(readFileSync(logOf(runId), 'utf8')).length;
      if (written !== events.length)
        throw new Error(`record alone: ${written} events in the log of ${runId}, expected ${events.length}`);
    }
    return loopFigures({ runs, concurrency: 1, calls: runs * calls, modelMs: copyMs }, time);
  };
  const close = async () => {
    await persistence.close();
    await bus.close();
  };
  return { batch, close };
}

/** The events of the one run whose log is in `dir`. */
export function eventsOfTheRunIn(dir: string): RunEvent[] {
  const logs = readdirSync(dir).filter((f) => f.startsWith('pge_shared_state_') && f.endsWith('.md'));
  if (logs.length !== 1) throw new Error(`expected one log in ${dir}, found ${logs.length}`);
  return readLog(readFileSync(join(dir, logs[0]!), 'utf8'));
}
