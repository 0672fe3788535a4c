import { mkdirSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { createActor, fromPromise, toPromise } from 'xstate';
import { createPersistenceActor } from '../src/actors/persistence-actor.js';
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
import type { RunEvent } from '../src/schemas/index.js';
import { runInput } from '../tests/support/chart-fixtures.js';
import { benchPlan, callsPerRun, evaluationFor, proposalFor, reviewFor, workFor } from './instant-model.js';
import { type LoopFigures, loopFigures, timed } from './measure.js';

/**
 * Section 2b: two parts of pge that its design requires, each timed alone beside the bare loop, to
 * say how much of pge's cost per call they take before anything else is done.
 * - **charts**: pge's own run and step charts (`src/machines`), with instant call actors provided
 *   the way the bare loop provides its own: no bus, no worker, no prompt, no event published.
 * - **record**: the events of one real 5-step pge run, published again under a fresh run id on the
 *   in-process bus (each validated and frozen) to the persistence actor, which renders them into
 *   a new markdown log on disk: what recording a run costs, per model call of the run.
 */

const usage = { promptTokens: 100, completionTokens: 50, costUsd: 0, calls: 1 };

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
      plan: answer((): Omit<PlanOutput, 'usage' | 'finishedAt'> => ({ plan: benchPlan(steps) })),
      runStep: stepMachine.provide({
        actions: { record },
        actors: {
          proposeContract: answer(
            (input: ContractInput): Omit<ProposalOutput, 'usage' | 'finishedAt'> => ({
              proposal: proposalFor(input),
            }),
          ),
          reviewContract: answer((): Omit<ReviewOutput, 'usage' | 'finishedAt'> => ({ review: reviewFor() })),
          doWork: answer(
            (input: WorkInput): Omit<WorkOutput, 'usage' | 'finishedAt'> => ({
              work: workFor(input),
              problem: null,
              validation: null,
            }),
          ),
          evaluateWork: answer(
            (input: EvaluationInput): Omit<EvaluateOutput, 'usage' | 'finishedAt'> => ({
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
 * Copies are made before the clock starts; a batch ends when every log is on disk and closed.
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
  /** The run's events under a fresh run id, logged in `dir`. */
  const copy = (): RunEvent[] => {
    const runId = `${original}-r${(next++).toString(36)}`;
    const renamed = JSON.parse(source.replaceAll(original, runId)) as RunEvent[];
    const opening = renamed[0]!;
    if (opening.type !== 'run.started') throw new Error(`the record starts with ${opening.type}`);
    opening.payload.logPath = join(dir, `pge_shared_state_${runId}.md`);
    return renamed;
  };

  const batch = async (runs: number): Promise<LoopFigures> => {
    const copies = Array.from({ length: runs }, copy);
    const time = await timed(async () => {
      for (const run of copies) {
        await Promise.all(run.map((event) => publishEvent(bus, event)));
        await bus.flush();
        await persistence.flushed(run[0]!.runId);
      }
    });
    if (failure) throw failure;
    const last = copies.at(-1)![0]!;
    const written = readLog(readFileSync(join(dir, `pge_shared_state_${last.runId}.md`), 'utf8'));
    if (written.length !== events.length)
      throw new Error(`record alone: ${written.length} events in the log, expected ${events.length}`);
    return loopFigures({ runs, concurrency: 1, calls: runs * calls, modelMs: 0 }, time);
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
