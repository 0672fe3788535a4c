import type { InspectionEvent } from 'xstate';
import {
  type BusHandler,
  type BusMessage,
  type BusSubscription,
  NO_HEADERS,
  type OrderedOptions,
  type StoredMessages,
  type StoredReadOptions,
} from '../bus/bus.js';
import { InProcessBus } from '../bus/in-process-bus.js';
import { subjects } from '../bus/subjects.js';
import { BusError, describeError, type LogWriteError, WorkerStoppedError } from '../errors.js';
import type { PersistenceActor } from '../persistence/persistence-actor.js';
import type { RunActing, RunEvent } from '../schemas/index.js';
import type { RunTracing } from '../telemetry/run-tracing.js';
import { startCoordinatorService } from './coordinator-service.js';
import { type EmbeddedWorkersOptions, startEmbeddedWorkers } from './embedded.js';
import { type LogRunStore, logRunStore } from './log-store.js';
import type { CoordinatorService, CoordinatorSettings } from './services.js';

/**
 * The embedded host: the deployment's coordinator service, role workers and persistence on the
 * in-process bus, with the runs' markdown logs as its store (`logRunStore`) where NATS has its
 * streams and KV. Its clients act on its runs as they act on a deployment's: they submit, fork,
 * decide and cancel through the same subjects (`submitAndFollow`, `decide`, `cancelRun`), and read
 * what is recorded through the bus's `StoredMessages`, which reads the logs.
 */

/**
 * The in-process bus of an embedded host: what it stores is what its runs' logs hold, and an
 * ordered reading of a run's events (`followRun`, `readEvents`) reads them from the log first, then
 * live, as a reading of `PGE_EVENTS` does on NATS, so a client that follows a run late misses none.
 */
export class HostBus extends InProcessBus implements StoredMessages {
  constructor(
    private readonly records: StoredMessages,
    private readonly onError: (error: unknown, subject: string) => void,
  ) {
    super({ onHandlerError: onError });
  }

  stored(subject: string, options?: StoredReadOptions): Promise<unknown[]> {
    return this.records.stored(subject, options);
  }

  lastStored(subject: string): Promise<unknown | null> {
    return this.records.lastStored(subject);
  }

  /**
   * Reads `subject`'s events from the logs, then those published after, each once (by run and seq).
   * Live messages are held from the start while the logs are read, after the bus has delivered what
   * was on its way (the persistence actor appends as it receives, so the logs hold it). `'new'`
   * reads only what comes next; a stream sequence means nothing to a log, so any other start
   * reads from the first event.
   */
  subscribeOrdered(subject: string, handler: BusHandler, options: OrderedOptions = {}): BusSubscription {
    if (options.from === 'new') return this.subscribe(subject, handler);
    let held: BusMessage[] | null = [];
    let active = true;
    const seen = new Set<string>();
    const deliver = async (message: BusMessage) => {
      const { runId, seq } = message.data as RunEvent;
      const key = `${runId}:${seq}`;
      if (!active || seen.has(key)) return;
      seen.add(key);
      await handler(message);
    };
    const live = this.subscribe(subject, (message) =>
      held === null ? deliver(message) : void held.push(message),
    );
    const catchUp = async () => {
      await this.flush();
      for (const data of (await this.records.stored(subject)) as RunEvent[])
        await deliver(storedMessage(subjects.event(data.runId, data.type), data));
      const waiting = held ?? [];
      held = null;
      for (const message of waiting) await deliver(message);
    };
    catchUp().catch((error: unknown) => this.onError(error, subject));
    return {
      subject,
      queue: null,
      unsubscribe() {
        active = false;
        live.unsubscribe();
      },
    };
  }
}

/** A stored event as a message to a reader: nobody awaits a reply to it. */
function storedMessage(subject: string, data: RunEvent): BusMessage {
  return {
    subject,
    data,
    headers: NO_HEADERS,
    reply: null,
    answerable: false,
    respond: () => Promise.reject(new BusError(`a stored message on ${subject} has no reply subject`)),
  };
}

/** Options of `startEmbeddedHost`: its workers' (models, tools, validators) and its coordinator's. */
export interface EmbeddedHostOptions extends Omit<EmbeddedWorkersOptions, 'onLogError'> {
  /** The run settings a submission may override, the task bound, and the logs' directory. */
  settings: CoordinatorSettings & { workingDirectory: string };
  /** The acting roles' tools, validators and workspace of a run, recorded in its `run.started`. */
  acting?: (runId: string) => RunActing;
  /** Told of what goes wrong outside any run: a handler that failed, a log that cannot be read. */
  onProblem?: (problem: string) => void;
  /** Told when a run's log could not be written, before the run is interrupted for it. */
  onLogError?: (runId: string, error: LogWriteError) => void;
  /** XState inspection of every run's actors (`@statelyai/inspect`). */
  inspect?: (event: InspectionEvent) => void;
  /** Tracing of the runs (`traceRuns`). */
  tracing?: RunTracing;
  /** The clock events are stamped with (tests). */
  clock?: () => number;
}

/** A running embedded host. */
export interface EmbeddedHost {
  readonly bus: HostBus;
  /** What its runs start with, unless a submission overrides it; its logs are in `workingDirectory`. */
  readonly settings: EmbeddedHostOptions['settings'];
  readonly store: LogRunStore;
  readonly service: CoordinatorService;
  /** The persistence actor: `flushed(runId)` once a run's log holds every event published. */
  readonly persistence: PersistenceActor;
  /**
   * Stops every part. `interrupt` (default) ends the runs in progress as interrupted first (their
   * logs stay consistent); `leave` aborts the workers' calls and leaves the runs where they are
   * (the API's `close`: a run in progress then is one the caller gave up).
   */
  close(mode?: 'interrupt' | 'leave'): Promise<void>;
}

/**
 * Starts the host. A run whose log cannot be written is interrupted: embedded, the log is the only
 * record, so the run stops rather than go on unrecorded (the design's "the log is never best-effort").
 */
export function startEmbeddedHost(options: EmbeddedHostOptions): EmbeddedHost {
  const problem = options.onProblem ?? ((text: string) => console.error(`pge: ${text}`));
  const store = logRunStore(options.settings.workingDirectory, problem);
  const bus = new HostBus(store, (error, subject) => {
    // Requests abandoned by `close()` belong to runs that were interrupted: nothing to report.
    if (!(error instanceof WorkerStoppedError))
      problem(`a handler on ${subject} failed: ${describeError(error).message}`);
  });
  let service: CoordinatorService | null = null;
  const { settings, acting, onProblem: _, onLogError, inspect, tracing, clock, ...workerOptions } = options;
  const workers = startEmbeddedWorkers(bus, {
    ...workerOptions,
    onLogError: (runId, error) => {
      if (onLogError) onLogError(runId, error);
      else problem(`run ${runId}: ${error.message}`);
      service?.active.get(runId)?.interrupt();
    },
  });
  const names = {
    planner: options.models.planner.name,
    generator: options.models.generator.name,
    evaluator: options.models.evaluator.name,
  };
  service = startCoordinatorService({
    bus,
    options: settings,
    models: names,
    ownership: store,
    runExists: (runId) => store.runExists(runId),
    ...(acting === undefined ? {} : { acting }),
    ...(inspect === undefined ? {} : { inspect }),
    ...(tracing === undefined ? {} : { tracing }),
    ...(clock === undefined ? {} : { clock }),
  });
  const running = service;
  return {
    bus,
    settings,
    store,
    service: running,
    persistence: workers.persistence,
    async close(mode = 'interrupt') {
      if (mode === 'leave') {
        // As the runtime always closed: calls in flight are aborted, then the charts let go.
        await workers.stop();
        await running.stop('leave');
      } else {
        await running.stop('interrupt');
        await workers.stop();
      }
      await workers.closeLogs();
      await bus.close();
    },
  };
}
