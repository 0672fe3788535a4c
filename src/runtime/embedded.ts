import type { Bus } from '../bus/bus.js';
import type { LogWriteError } from '../errors.js';
import { createPersistenceActor } from '../persistence/persistence-actor.js';
import type { Model } from '../roles/model.js';
import { createRoleWorker, type RoleWorker, type RoleWorkerOptions } from '../roles/role-worker.js';
import type { Role } from '../schemas/index.js';
import type { WorkTracing } from '../telemetry/work-tracing.js';
import type { McpServers } from '../tools/mcp.js';

/**
 * The workers of an embedded composition: one per role and the persistence actor, in one process
 * on one bus. The embedded host (`embedded-host.ts`) puts them beside the coordinator service on
 * its in-process bus; a deployment runs the same pieces on NATS, one process each.
 */

/** Options of `startEmbeddedWorkers`. */
export interface EmbeddedWorkersOptions {
  models: Record<Role, Model>;
  maxRepairs: number;
  /** A run's log could not be written: that run must stop. */
  onLogError: (runId: string, error: LogWriteError) => void;
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
  /** Tracing of the requests the workers serve (`traceWork`), passed to each worker. */
  workTracing?: WorkTracing;
}

/**
 * Starts the persistence actor and one worker per role on `bus`: the part of the embedded host
 * that does the work and keeps the logs.
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
