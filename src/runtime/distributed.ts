import { basename, join } from 'node:path';
import type { Tracer } from '@opentelemetry/api';
import { answerAbandonedWork } from '../bus/abandoned-work.js';
import { publishControl } from '../bus/channels.js';
import type { NatsBus } from '../bus/nats-bus.js';
import { RunLeases, readRunLeases } from '../bus/run-leases.js';
import { subjects } from '../bus/subjects.js';
import { RESULT_CHECK_MS } from '../conductor/coordinator.js';
import type { Model } from '../roles/model.js';
import { createRoleWorker, type RoleWorkerOptions } from '../roles/role-worker.js';
import type { Role } from '../schemas/index.js';
import type { McpServers } from '../tools/mcp.js';
import { startCoordinatorService } from './coordinator-service.js';
import { natsLostWork, natsRunOwnership } from './nats-ownership.js';
import { startNatsPersistence } from './nats-persistence.js';
import type { CoordinatorService, CoordinatorSettings } from './services.js';
import { announcePresence, hearWorkers, PRESENCE_TTL_MS } from './worker-presence.js';

/**
 * The distributed composition root: what one process of a NATS deployment runs, by role. The
 * embedded host (`embedded-host.ts`) wires the same pieces to the in-process bus in one process; here
 * each role is a process of its own (`pge worker --role <role>`), which the CLI connects, starts
 * with these functions and drains on a signal. Role workers share their role's work queue and serve
 * only runs that hold a lease; the persistence worker writes every run's log; coordinators take
 * submitted runs and share them through leases, taking over a run whose owner died.
 */

/** Stops what a role started; `hurry` aborts what is under way instead of finishing it. */
export type StopRole = (hurry: boolean) => Promise<void>;

/** What every role's process has: its bus, its name, and where its messages for a person go. */
export interface RoleProcessBase {
  bus: NatsBus;
  /** The worker's id (`--worker-id`), its name in results and leases. */
  id: string;
  /** A line for the operator (stderr in the CLI). */
  log: (line: string) => void;
  /** Spans over OTLP (`otlpTracer`), when the environment asks for them. */
  otlp?: { tracer: Tracer; shutdown(): Promise<void> } | null;
}

/** Options of `startRoleWorkerProcess`: the role's model and what its worker is given. */
export interface RoleWorkerProcessOptions extends RoleProcessBase {
  role: Role;
  model: Model;
  concurrency: number;
  maxRepairs: number;
  /** The bus's publish retry: how long a lease read may be retried. */
  publishRetryMs: number;
  workspaces?: { root: string; images: boolean };
  mcpServers?: McpServers;
  systemPrompt?: string;
  validation?: RoleWorkerOptions['validation'];
}

/** Starts a role worker (planner, generator or evaluator) on the role's work queue. */
export async function startRoleWorkerProcess(o: RoleWorkerProcessOptions): Promise<StopRole> {
  const worker = createRoleWorker({
    bus: o.bus,
    role: o.role,
    model: o.model,
    concurrency: o.concurrency,
    workerId: o.id,
    maxRepairs: o.maxRepairs,
    // Work items of a run no coordinator holds a lease for are refused before any model call.
    isLiveRun: await readRunLeases(o.bus.connection, o.publishRetryMs),
    ...(o.workspaces === undefined ? {} : { workspaces: o.workspaces }),
    ...(o.mcpServers === undefined ? {} : { mcpServers: o.mcpServers }),
    ...(o.systemPrompt === undefined ? {} : { systemPrompt: o.systemPrompt }),
    ...(o.validation === undefined ? {} : { validation: o.validation }),
    ...(o.otlp ? { tracing: (await import('../telemetry/work-tracing.js')).traceWork(o.otlp.tracer) } : {}),
  });
  // Coordinators name the model of each role from what its workers say, and check its price.
  const silence = announcePresence(
    o.bus,
    { role: o.role, worker: o.id, model: o.model.name, priced: o.model.priced !== false },
    (error) => o.log(`pge worker ${o.role} (${o.id}): cannot say it is there: ${String(error)}`),
    // And which requests it holds: a coordinator sends again a work item no worker holds.
    () => worker.holding(),
  );
  return async (hurry) => {
    // It says what it holds until the requests it finishes are done: else they would be sent again.
    await worker.stop(hurry ? 'abort' : 'finish');
    silence();
    await o.otlp?.shutdown();
  };
}

/** Starts the persistence worker: every run's log, under `workingDirectory`. */
export function startPersistenceProcess(o: RoleProcessBase & { workingDirectory: string }): StopRole {
  const { bus, log } = o;
  const persistence = startNatsPersistence({
    bus,
    // Logs go to this process's working directory, under the name the coordinator chose.
    resolvePath: (event) => join(o.workingDirectory, basename(event.payload.logPath)),
    onRejected: (rejection, unpublished) =>
      log(
        `pge persistence: rejected ${rejection.subject}: ${rejection.problem}${
          unpublished === undefined ? '' : ` (not reported on the bus: ${String(unpublished)})`
        }`,
      ),
    onError: (runId, error) => {
      log(`pge persistence: the log of run ${runId} failed: ${error.message}`);
      // The log is not best-effort: the run's coordinator stops the run.
      const reason = `its log could not be written: ${error.message}`;
      publishControl(bus, { runId, action: 'interrupt', reason, ts: new Date().toISOString() }).catch(
        (e: unknown) => log(`pge persistence: could not ask to stop run ${runId}: ${String(e)}`),
      );
    },
  });
  return () => persistence.close();
}

/** Options of `startCoordinatorProcess`. */
export interface CoordinatorProcessOptions extends RoleProcessBase {
  settings: CoordinatorSettings;
  /** The replicas of the lease bucket (`--replicas`), if not the server's default. */
  replicas?: number;
  /**
   * The generators' workspaces directory (`--workspaces`), where a continued run's workspace is
   * copied from the earlier run's (`CoordinatorServiceOptions.workspaces`).
   */
  workspaces?: string;
}

/** Starts a coordinator: it takes submitted runs, shares them through leases and takes over orphans. */
export async function startCoordinatorProcess(o: CoordinatorProcessOptions): Promise<StopRole> {
  const { bus, log } = o;
  // Runs are shared through leases: a run whose coordinator dies is taken over by another.
  let service: CoordinatorService | null = null;
  const leases = await RunLeases.open(bus.connection, {
    owner: o.id,
    ...(o.replicas === undefined ? {} : { replicas: o.replicas }),
    onExpired: (runId, owner) => {
      service?.takeOver(runId).then(
        (taken) => {
          if (taken) log(`pge coordinator: took over run ${runId} from ${owner}`);
        },
        (error: unknown) => log(`pge coordinator: cannot take over run ${runId}: ${String(error)}`),
      );
    },
    onLost: (runId, owner) => {
      log(`pge coordinator: run ${runId} was taken over by ${owner}`);
      service?.lose(runId, owner);
    },
    onError: (error) => log(`pge coordinator: run leases: ${String(error)}`),
  });
  const runTracing = o.otlp && (await import('../telemetry/run-tracing.js')).traceRuns(o.otlp.tracer);
  // The workers own the models: each says which serves its role, and run.started names those.
  const workers = hearWorkers(bus);
  const running = startCoordinatorService({
    bus,
    ...(runTracing ? { tracing: runTracing } : {}),
    // Its persistence worker writes the logs in its own directory: `run.started` names the file alone.
    options: { ...o.settings, workingDirectory: undefined },
    ...(o.workspaces === undefined ? {} : { workspaces: o.workspaces }),
    models: workers,
    onRun: (runId, task) => log(`pge coordinator: run ${runId} started: ${task.slice(0, 80)}`),
    runExists: (runId) => bus.hasStored(subjects.events(runId)),
    ownership: natsRunOwnership(bus, leases),
    // Judged only when the looks are further apart than an item takes to be redelivered (the ack
    // wait) and its new worker to say it holds it (the presence TTL).
    ...(RESULT_CHECK_MS > bus.ackWaitMs + PRESENCE_TTL_MS
      ? { lostWork: natsLostWork(bus, workers, (_request, why) => log(`pge coordinator: ${why}`)) }
      : {}),
  });
  service = running;
  // A request every worker died or failed holding is answered as failed, not left to its deadline.
  const abandoned = answerAbandonedWork(bus, (error, subject) =>
    log(`pge coordinator: cannot answer abandoned work (${subject}): ${String(error)}`),
  );
  return async (hurry) => {
    await running.stop(hurry ? 'interrupt' : 'finish');
    workers.stop();
    abandoned.stop();
    leases.stop();
    await o.otlp?.shutdown();
  };
}
