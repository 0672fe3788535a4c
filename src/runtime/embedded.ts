import type { InspectionEvent } from 'xstate';
import type { Bus } from '../bus/bus.js';
import { InProcessBus } from '../bus/in-process-bus.js';
import { createCoordinator } from '../conductor/coordinator.js';
import { type LogWriteError, WorkerStoppedError } from '../errors.js';
import { createPersistenceActor } from '../persistence/persistence-actor.js';
import type { Model } from '../roles/model.js';
import { createRoleWorker, type RoleWorker, type RoleWorkerOptions } from '../roles/role-worker.js';
import type { Role } from '../schemas/index.js';
import type { RunTracing } from '../telemetry/run-tracing.js';
import type { WorkTracing } from '../telemetry/work-tracing.js';
import type { McpServers } from '../tools/mcp.js';
import type { RecordedRun, ResumeOptions, RunHandle, RunSpec } from './runs.js';

/**
 * The embedded composition root: the coordinator, one worker per role, and the persistence actor,
 * all in one process on the in-process bus. The distributed deployment wires the same pieces to
 * the NATS bus, one process each.
 */

/** Options of `createEmbeddedRuntime`. */
export interface EmbeddedRuntimeOptions {
  models: Record<Role, Model>;
  maxRepairs: number;
  /** A run's log could not be written: that run must stop. */
  onLogError: (runId: string, error: LogWriteError) => void;
  clock?: () => number;
  /**
   * Where runs' workspaces are (`<root>/<runId>`), and whether the evaluator sees their images;
   * without it, no workspace tools.
   */
  workspaces?: { root: string; images: boolean };
  /** MCP servers whose tools the acting roles get (see `RoleWorkerOptions.mcpServers`). */
  mcpServers?: McpServers;
  /** Each role's system prompt, where it replaces pge's own. */
  systemPrompts?: Partial<Record<Role, string>>;
  /** The generator's validators (see `RoleWorkerOptions.validation`). */
  validation?: RoleWorkerOptions['validation'];
  /** XState inspection of every run's actors (e.g. `@statelyai/inspect`), passed to the coordinator. */
  inspect?: (event: InspectionEvent) => void;
  /** Tracing of the runs (`traceRuns`), passed to the coordinator. */
  tracing?: RunTracing;
  /** Tracing of the requests the workers serve (`traceWork`), passed to each worker. */
  workTracing?: WorkTracing;
}

/** What `startEmbeddedWorkers` needs: the workers' half of `EmbeddedRuntimeOptions`. */
export type EmbeddedWorkersOptions = Omit<EmbeddedRuntimeOptions, 'clock' | 'inspect' | 'tracing'>;

/**
 * Starts the persistence actor and one worker per role on `bus`: the part of every embedded
 * composition (the runtime below, the embedded host) that does the work and keeps the logs.
 */
export function startEmbeddedWorkers(bus: Bus, options: EmbeddedWorkersOptions) {
  const persistence = createPersistenceActor({ bus, onError: options.onLogError });
  const workers: RoleWorker[] = (['planner', 'generator', 'evaluator'] as const).map((role) =>
    createRoleWorker({
      bus,
      role,
      model: options.models[role],
      maxRepairs: options.maxRepairs,
      workerId: `${role}-embedded`,
      ...(options.workspaces === undefined ? {} : { workspaces: options.workspaces }),
      ...(options.mcpServers === undefined ? {} : { mcpServers: options.mcpServers }),
      ...(options.systemPrompts?.[role] === undefined ? {} : { systemPrompt: options.systemPrompts[role] }),
      ...(role === 'generator' && options.validation !== undefined ? { validation: options.validation } : {}),
      ...(options.workTracing ? { tracing: options.workTracing } : {}),
    }),
  );
  return {
    persistence,
    /**
     * Stops the workers. Calls still in flight belong to interrupted runs (a finished run has
     * none), so they are aborted rather than awaited.
     */
    async stop(): Promise<void> {
      await Promise.all(workers.map((w) => w.stop('abort')));
    },
    /** Lets the bus deliver what is on its way, then closes every log. */
    async closeLogs(): Promise<void> {
      await bus.flush();
      await persistence.close();
    },
  };
}

/** Starts the embedded runtime. */
export function createEmbeddedRuntime(options: EmbeddedRuntimeOptions) {
  const bus = new InProcessBus({
    onHandlerError: (error, subject) => {
      // Requests abandoned by `close()` belong to runs that were interrupted: nothing to report.
      if (!(error instanceof WorkerStoppedError))
        console.error(`pge: a handler on ${subject} failed:`, error);
    },
  });
  const workers = startEmbeddedWorkers(bus, options);
  const coordinator = createCoordinator({
    bus,
    ...(options.clock ? { clock: options.clock } : {}),
    ...(options.inspect ? { inspect: options.inspect } : {}),
    ...(options.tracing ? { tracing: options.tracing } : {}),
  });
  return {
    bus,
    coordinator,
    persistence: workers.persistence,
    /** Starts a run (`Coordinator.startRun`). */
    startRun: (spec: RunSpec): RunHandle => coordinator.startRun(spec),
    /** Continues a recorded run from its events (`Coordinator.resumeRun`). */
    resumeRun: (recorded: RecordedRun, resume: ResumeOptions): RunHandle =>
      coordinator.resumeRun(recorded, resume),
    /** Stops the workers and the coordinator, drains the bus and closes every log. */
    async close(): Promise<void> {
      await workers.stop();
      coordinator.close();
      await workers.closeLogs();
      await bus.close();
    },
  };
}

/** The runtime as `createEmbeddedRuntime` returns it. */
export type EmbeddedRuntime = ReturnType<typeof createEmbeddedRuntime>;
