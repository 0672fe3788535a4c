import { existsSync } from 'node:fs';
import { isAbsolute } from 'node:path';
import type { PgeOptions } from '../api/options.js';
import { PlannerGeneratorEvaluator } from '../api/planner-generator-evaluator.js';
import { ConfigurationError } from '../errors.js';
import { isClosingEvent, type RunEvent } from '../schemas/index.js';
import { followLog, type LogFollower } from './log-follower.js';
import { decidedMessage, forkedMessage, type RunControl, startSettingsOf } from './run-control.js';
import type { RunStore } from './run-store.js';

/**
 * The dashboard's own runs (`pge dashboard --control` without `--nats`): each run started or
 * forked from the page is a `PlannerGeneratorEvaluator` of this process, with its own log. A
 * started run's events reach the store as they happen (the API's `onEvent`); a fork's log is
 * followed instead, because a fork's first events are taken from its parent's log, not published
 * again. Approve and cancel act through the instance that drives the run, so only runs started
 * here can be decided or cancelled; any run whose log is readable here can be forked.
 */

/** Options of `embeddedControl`. */
export interface EmbeddedControlOptions {
  store: RunStore;
  /**
   * The options of every run started or forked: its models (agents, or a model name, key and
   * server), its working directory. The page's settings override the run settings.
   */
  options: PgeOptions;
  /** What the page says answers a run when the form names no model. */
  modelLabel: string;
  /** Whether the form may name the model (false with the demo model, which answers every role). */
  namedModels: boolean;
  /** Milliseconds between reads of a fork's log (default 250). */
  followIntervalMs?: number;
}

/** The instances of the runs going on, by run id, and what to stop on close. */
interface Live {
  pge: PlannerGeneratorEvaluator;
  done: Promise<void>;
}

/** A `RunControl` that runs everything in this process. */
export function embeddedControl(o: EmbeddedControlOptions): RunControl {
  const { store } = o;
  const driving = new Map<string, PlannerGeneratorEvaluator>();
  const live = new Set<Live>();
  const followers = new Set<LogFollower>();

  /**
   * Starts `go` on a new instance with `options`; resolves with the run's id at its first event
   * (`run.started`, or a fork's `run.resumed`), or rejects with the error that refused it before.
   * `follow`: the store reads the run's log rather than its events as they are published.
   */
  function launch(
    options: PgeOptions,
    follow: boolean,
    go: (pge: PlannerGeneratorEvaluator) => Promise<unknown>,
  ): Promise<string> {
    return new Promise((resolve, reject) => {
      let runId: string | null = null;
      const first = (event: RunEvent) => {
        runId = event.runId;
        driving.set(runId, pge);
        if (follow && (event.type === 'run.started' || event.type === 'run.resumed'))
          followers.add(followLog(event.payload.logPath, store, { intervalMs: o.followIntervalMs ?? 250 }));
        resolve(runId);
      };
      const pge: PlannerGeneratorEvaluator = new PlannerGeneratorEvaluator({
        ...options,
        onEvent: (event) => {
          if (runId === null) first(event);
          if (!follow) store.add(event);
        },
      });
      const entry: Live = {
        pge,
        done: go(pge)
          .then(
            () => undefined,
            (error: unknown) => {
              // A run that ends failed resolves; an error here is one the run could not record.
              if (runId === null) reject(error);
              else store.problem(`run ${runId}: ${String(error)}`);
            },
          )
          .finally(async () => {
            if (runId !== null) driving.delete(runId);
            await pge.close();
            live.delete(entry);
          }),
      };
      live.add(entry);
    });
  }

  /** The instance that drives run `runId`, or a refusal that says why there is none. */
  function driver(runId: string): PlannerGeneratorEvaluator {
    const pge = driving.get(runId);
    if (pge) return pge;
    throw new ConfigurationError(
      `run ${runId} is not going on in this dashboard: only the runs it started or forked can be decided or cancelled here`,
    );
  }

  /** The log of run `runId` as its first event names it, when that is a file this process can read. */
  function readableLog(runId: string): string | null {
    const first = store.events(runId)[0];
    if (first?.type !== 'run.started' && first?.type !== 'run.resumed') return null;
    const path = first.payload.logPath;
    return isAbsolute(path) && existsSync(path) ? path : null;
  }

  return {
    abilities: { fork: true, model: o.modelLabel, where: 'embedded' },
    abilitiesFor(view) {
      return {
        act: view.status === 'running' && driving.has(view.runId),
        fork: view.status !== 'running' && readableLog(view.runId) !== null,
      };
    },
    async decide(action, by: string) {
      const { runId, gate, decision, reason, requestId } = action;
      const applied = driver(runId).approve(runId, gate, {
        decision,
        ...(reason === null ? {} : { reason }),
        by,
        requestId,
      });
      if (!applied)
        throw new ConfigurationError(`run ${runId} does not wait at that ${gate} gate (any more)`);
      return { runId, message: decidedMessage(action, by) };
    },
    async cancel(action, by: string) {
      const { runId, reason } = action;
      const pge = driver(runId);
      // Its instance lets the run go a moment after its closing event: by then there is nothing to cancel.
      if (store.events(runId).some(isClosingEvent) || !pge.cancel(runId, by, reason ?? undefined))
        throw new ConfigurationError(`run ${runId} has ended: there is nothing to cancel`);
      return { runId, message: `run ${runId}: cancelled by ${by}` };
    },
    async start(action, by: string) {
      if (action.model !== undefined && !o.namedModels)
        throw new ConfigurationError(`this dashboard runs ${o.modelLabel}: a run cannot name a model`);
      const options = {
        ...o.options,
        ...startSettingsOf(action),
        ...(action.model === undefined ? {} : { modelName: action.model }),
      };
      const runId = await launch(options, false, (pge) => pge.run(action.task, { startedBy: by }));
      return { runId, message: `run ${runId} started by ${by}` };
    },
    async fork(action, by: string) {
      const parent = readableLog(action.runId);
      if (parent === null)
        throw new ConfigurationError(
          `run ${action.runId} has no log this dashboard can read: it cannot be forked here`,
        );
      if (store.view(action.runId)?.status === 'running')
        throw new ConfigurationError(`run ${action.runId} is going on: fork it once it has ended`);
      const runId = await launch(o.options, true, (pge) =>
        pge.fork(parent, { fromStep: action.fromStep, settings: action.settings ?? {}, startedBy: by }),
      );
      return { runId, message: forkedMessage(action, runId, by) };
    },
    async close() {
      for (const { pge } of live) pge.interrupt('the dashboard stopped');
      await Promise.all([...live].map((l) => l.done));
      await Promise.all([...followers].map((f) => f.close()));
    },
  };
}
