import { resolve } from 'node:path';
import { LRUCache } from 'lru-cache';
import type { Bus, MessageHeaders } from '../bus/bus.js';
import { publishRejection, publishResult, serveWork, subscribeCancels } from '../bus/channels.js';
import { assertSubjectToken, subjects } from '../bus/subjects.js';
import { CallCancelledError, ConfigurationError, describeError, WorkerStoppedError } from '../errors.js';
import type { Role, RoleRequest, RoleResult } from '../schemas/index.js';
import { DEFAULT_WORKER_CONCURRENCY, OPTION_DEFAULTS } from '../schemas/index.js';
import { traceSafely } from '../telemetry/trace-safely.js';
import type { TracedWork, WorkTracing } from '../telemetry/work-tracing.js';
import { type McpServers, mcpServersOf } from '../tools/mcp.js';
import {
  DEFAULT_VALIDATOR_LIMITS,
  runValidators,
  type Validator,
  type ValidatorLimits,
} from '../tools/validators.js';
import { answerRequest, type RoleAnswer } from './answer-request.js';
import type { Model } from './model.js';
import { McpTools, toolboxFor, type Workspaces } from './role-toolbox.js';

/**
 * A role worker: takes a request of its role from the bus, answers it with its model
 * (`answerRequest`: a fresh conversation from the typed input only, the answer validated and
 * re-asked with the precise problem at most `maxRepairs` times, failing closed), with the tools
 * its role has (`role-toolbox.ts`), and publishes the result. Stateless: scale a role by starting
 * more workers.
 */

/** Default number of re-asks after an invalid answer. */
export const DEFAULT_MAX_REPAIRS = OPTION_DEFAULTS.maxRepairs;

/** The span of a request when the worker is not traced: nothing is recorded. */
const UNTRACED: TracedWork = {
  within: (work) => work(),
  validate: (run) => run(),
  tool: (tool) => tool,
  end: () => {},
};

/** How many cancelled request ids a worker remembers, to skip one it takes from the queue later. */
const CANCELS_REMEMBERED = 10_000;

/** How many live runs a worker remembers, so that a run's calls do not each ask whether it is live. */
const LIVE_RUNS_REMEMBERED = 10_000;

/**
 * Milliseconds a worker takes a run for live after `isLiveRun` said so. A run stays live for its
 * whole duration, so the answer holds; it is kept short because a run that has ended is no longer
 * live, and a work item of it taken within this time is answered (its result is rejected as late).
 */
export const LIVE_RUN_CACHE_MS = 30_000;

/** Options of `createRoleWorker`. */
export interface RoleWorkerOptions {
  bus: Bus;
  role: Role;
  model: Model;
  maxRepairs?: number;
  /** Requests handled at once by this worker (default `DEFAULT_WORKER_CONCURRENCY`). */
  concurrency?: number;
  /** Name reported in results (default `<role>-<random>`). */
  workerId?: string;
  /**
   * Whether a run is live, i.e. a coordinator issued its work (on NATS: the run has a lease in
   * the KV bucket `pge-runs`, `readRunLeases`). A work item of a run that is not live is refused
   * before its model is called: acknowledged, not answered, and reported on
   * `pge.errors.rejected.<reporter>`, so that whoever can put items on a work queue cannot spend the
   * deployment's model key on prompts of its own. A yes is remembered for `LIVE_RUN_CACHE_MS`; a
   * no is asked again each time. A rejection (the check failed) hands the item back to the queue.
   * Default: none, every item is served (the embedded mode, whose bus no one else reaches).
   */
  isLiveRun?: (runId: string) => Promise<boolean>;
  /** Milliseconds since some fixed point, for the live-run cache (default `performance.now`). */
  now?: () => number;
  /**
   * Where runs' workspaces are: each run's is `<root>/<runId>`, on the machine this worker runs on.
   * With it, the generator's model has the workspace tools `list_files`, `read_file` and
   * `write_file`, the evaluator's `list_files` and `read_file` (the planner none), within `limits`
   * (default `DEFAULT_TOOL_LIMITS`). Without it, no tools.
   */
  workspaces?: Workspaces;
  /**
   * MCP servers whose tools the role's model gets (those listed for the role: `mcpServersOf`),
   * started or reached where this worker runs.
   */
  mcpServers?: McpServers;
  /** Replaces the role's system prompt (the reference's `planner_system_prompt`, …). */
  systemPrompt?: string;
  /**
   * Tracing of the requests it serves (`traceWork`): a span per request, under the trace context
   * its work item carries, and one per tool run. Default: none.
   */
  tracing?: WorkTracing;
  /**
   * The generator's validators (`validators.ts`): run in order after each valid work answer, in
   * the run's workspace `<root>/<runId>`, within `limits` (default `DEFAULT_VALIDATOR_LIMITS`);
   * their runs go back with the work, and the step chart calls the evaluator only when all passed.
   */
  validation?: { root: string; validators: readonly Validator[]; limits?: Partial<ValidatorLimits> };
}

/** A running role worker. */
export interface RoleWorker {
  readonly id: string;
  /**
   * Stops taking requests. `finish` (default) lets the requests in flight complete and publish
   * their results; `abort` cancels their model calls and publishes nothing, so that a durable
   * queue hands them to another worker.
   */
  stop(mode?: 'finish' | 'abort'): Promise<void>;
  /** The ids of the requests this worker has taken and not yet settled (its presence says them). */
  holding(): string[];
}

/** `isLiveRun` with its yes remembered per run for `LIVE_RUN_CACHE_MS`. */
function liveRunCheck(
  isLiveRun: (runId: string) => Promise<boolean>,
  now: () => number = () => performance.now(),
): (runId: string) => Promise<boolean> {
  /**
   * Until when each run is taken for live without asking. The expiry is kept here, not by
   * lru-cache's `ttl`: that one takes a start of 0 on an injected clock (a test's) for no start.
   */
  const liveUntil = new LRUCache<string, number>({ max: LIVE_RUNS_REMEMBERED });
  return async (runId) => {
    if ((liveUntil.get(runId) ?? Number.NEGATIVE_INFINITY) > now()) return true;
    const isLive = await isLiveRun(runId);
    if (isLive) liveUntil.set(runId, now() + LIVE_RUN_CACHE_MS);
    else liveUntil.delete(runId);
    return isLive;
  };
}

/**
 * Refuses a work item of a run that is not live: acknowledged without an answer (no coordinator
 * waits for it, and a redelivery would only ask again), and reported.
 */
async function refuse(bus: Bus, role: Role, workerId: string, request: RoleRequest): Promise<void> {
  await publishRejection(bus, {
    subject: subjects.work(role),
    problem: `${request.type} ${request.id} names run ${request.runId}, which is not live (no coordinator issued it): refused by ${workerId}, no model was called`,
    ts: new Date().toISOString(),
  }).catch(() => {
    // The report is the only thing lost: the item was refused all the same.
  });
}

/** What a worker serves its requests with: the role's model, tools, prompt and validators, and its bus. */
interface Serving {
  bus: Bus;
  workerId: string;
  validation: RoleWorkerOptions['validation'];
  role: Role;
  model: Model;
  maxRepairs: number;
  mcp: McpTools;
  workspaces: Workspaces | undefined;
  systemPrompt: string | undefined;
}

/** Answers a request with the model and the tools its role has for it; tools not had fail the call. */
async function answerWithTools(
  { role, model, maxRepairs, mcp, workspaces, systemPrompt }: Serving,
  request: RoleRequest,
  signal: AbortSignal,
  traced: TracedWork,
): Promise<RoleAnswer> {
  try {
    const mcpTools = await mcp.tools(signal);
    const toolbox = await toolboxFor(role, request, workspaces, mcpTools, traced.tool);
    return await traced.within(() =>
      answerRequest(request, model, maxRepairs, signal, {
        ...(systemPrompt === undefined ? {} : { systemPrompt }),
        ...(toolbox === undefined ? {} : { toolbox }),
      }),
    );
  } catch (error) {
    if (signal.aborted) throw error;
    // Its tools could not be had (an MCP server that does not start, say): the call fails.
    return {
      calls: [],
      result: { status: 'error', phase: request.payload.phase, error: describeError(error), raw: null },
    };
  }
}

/** A valid work answer with the runs of the generator's validators in its workspace added; any other as it is. */
async function withValidation(
  validation: RoleWorkerOptions['validation'],
  request: RoleRequest,
  result: RoleResult['result'],
  signal: AbortSignal,
  traced: TracedWork,
): Promise<RoleResult['result']> {
  const validators = validation?.validators ?? [];
  if (
    validation === undefined ||
    validators.length === 0 ||
    request.type !== 'step.work.requested' ||
    result.status !== 'ok' ||
    result.phase !== 'work'
  )
    return result;
  const { input } = request.payload;
  const runs = await traced.validate(() =>
    runValidators(
      validators,
      {
        workspace: resolve(validation.root, assertSubjectToken('run id', request.runId)),
        output: result.output.output,
        runId: request.runId,
        stepId: input.step.id,
        stepNumber: input.stepNumber,
        attempt: input.attempt,
      },
      signal,
      { ...DEFAULT_VALIDATOR_LIMITS, ...validation.limits },
    ),
  );
  return { ...result, validation: runs };
}

/** Answers a request, runs the validators on a work answer, and publishes the result. */
async function serve(
  serving: Serving,
  request: RoleRequest,
  signal: AbortSignal,
  traced: TracedWork,
): Promise<RoleResult['result']> {
  const { calls, result } = await answerWithTools(serving, request, signal, traced);
  const validated = await withValidation(serving.validation, request, result, signal, traced);
  await publishResult(serving.bus, {
    requestId: request.id,
    runId: request.runId,
    role: serving.role,
    worker: serving.workerId,
    calls,
    result: validated,
  });
  return validated;
}

/**
 * The requests a worker has taken and not yet settled (those in flight, and those whose run is
 * looked up), with how many copies of each: a request sent again may reach this worker twice.
 */
class TakenRequests {
  private readonly copies = new Map<string, number>();

  take(requestId: string): void {
    this.copies.set(requestId, (this.copies.get(requestId) ?? 0) + 1);
  }

  settle(requestId: string): void {
    const copies = (this.copies.get(requestId) ?? 1) - 1;
    if (copies > 0) this.copies.set(requestId, copies);
    else this.copies.delete(requestId);
  }

  ids(): string[] {
    return [...this.copies.keys()];
  }
}

/** How a request's handling ended, as its tracing is told. */
type Outcome = Parameters<TracedWork['end']>[0];

/**
 * The calls a worker has in flight (at most its `concurrency`), each with the controller that
 * aborts its model call: a request sent again may be in flight here twice, and a cancel aborts both.
 */
class CallsInFlight {
  private readonly calls = new Set<{
    requestId: string;
    controller: AbortController;
    job: Promise<unknown>;
  }>();

  /** Runs a request's `job` with a signal of its own; how it ended, and that signal. */
  async run(
    requestId: string,
    job: (signal: AbortSignal) => Promise<RoleResult['result']>,
  ): Promise<{ outcome: Outcome; signal: AbortSignal }> {
    const controller = new AbortController();
    const call = { requestId, controller, job: job(controller.signal) };
    this.calls.add(call);
    try {
      return { outcome: { result: await call.job }, signal: controller.signal };
    } catch (error) {
      return { outcome: { error }, signal: controller.signal };
    } finally {
      this.calls.delete(call);
    }
  }

  /** Aborts each copy of the request in flight. */
  cancel(requestId: string, reason: Error): void {
    for (const call of this.calls) if (call.requestId === requestId) call.controller.abort(reason);
  }

  abortAll(reason: Error): void {
    for (const { controller } of this.calls) controller.abort(reason);
  }

  /** Resolves when every call now in flight has settled. */
  async settled(): Promise<void> {
    await Promise.allSettled([...this.calls].map((call) => call.job));
  }
}

/**
 * Starts a worker serving `role` on the bus, as one member of the role's queue group. Each
 * request it holds has its own abort signal, passed to the model (the openai SDK aborts the HTTP
 * request with it): a cancel from the run's coordinator aborts that request's call (each copy, if
 * it was sent again and reached this worker twice), and the request is done with no result;
 * `stop('abort')` aborts them all, and the requests go back to the queue.
 */
export function createRoleWorker(options: RoleWorkerOptions): RoleWorker {
  const { bus, role, validation, tracing } = options;
  if (validation !== undefined && validation.validators.length > 0 && role !== 'generator')
    throw new ConfigurationError(`validators run on the generator's workers, not the ${role}'s`);
  const mcp = new McpTools(mcpServersOf(role, options.mcpServers ?? {}));
  const id = options.workerId ?? `${role}-${Math.random().toString(36).slice(2, 8)}`;
  const serving: Serving = {
    bus,
    workerId: id,
    validation,
    role,
    model: options.model,
    maxRepairs: options.maxRepairs ?? DEFAULT_MAX_REPAIRS,
    mcp,
    workspaces: options.workspaces,
    systemPrompt: options.systemPrompt,
  };
  const inFlight = new CallsInFlight();
  const taken = new TakenRequests();
  const cancelled = new LRUCache<string, true>({ max: CANCELS_REMEMBERED });
  const live = options.isLiveRun === undefined ? null : liveRunCheck(options.isLiveRun, options.now);
  /** Set by `stop`: a request taken before it and not begun yet goes back to the queue. */
  let stopping: WorkerStoppedError | null = null;

  const cancels = subscribeCancels(bus, (cancel) => {
    cancelled.set(cancel.requestId, true);
    inFlight.cancel(cancel.requestId, new CallCancelledError(cancel.reason));
  });

  /** Handles one request taken from the queue. */
  async function take(request: RoleRequest, headers: MessageHeaders): Promise<void> {
    if (live !== null) {
      if (!(await live(request.runId))) return refuse(bus, role, id, request);
      // Cancelled while its run was looked up; or the worker stopped meanwhile, before it began.
      if (cancelled.get(request.id)) return;
      if (stopping !== null) throw stopping;
    }
    const what = `${request.type} ${request.id}`;
    const traced = (tracing && traceSafely(what, () => tracing.begin(request, headers, id))) ?? UNTRACED;
    const { outcome, signal } = await inFlight.run(request.id, (signal) =>
      serve(serving, request, signal, traced),
    );
    traceSafely(what, () => traced.end(outcome));
    if ('error' in outcome && !(signal.reason instanceof CallCancelledError)) throw outcome.error;
  }

  // One member of the role's queue group, taking up to `concurrency` requests at once: the bus
  // acknowledges a request only when its handler settles, so a request counts as done once its
  // result is published (or it was cancelled), and one abandoned by `stop('abort')` (the handler
  // rejects) is handed back to the queue.
  const subscription = serveWork(
    bus,
    role,
    async (request, headers) => {
      if (cancelled.get(request.id)) return;
      taken.take(request.id);
      try {
        await take(request, headers);
      } finally {
        taken.settle(request.id);
      }
    },
    options.concurrency ?? DEFAULT_WORKER_CONCURRENCY,
  );
  return {
    id,
    holding: () => taken.ids(),
    async stop(mode = 'finish') {
      stopping = new WorkerStoppedError(`worker ${id} stopped; its requests go back to the queue`);
      subscription.unsubscribe();
      if (mode === 'abort') inFlight.abortAll(stopping);
      await inFlight.settled();
      cancels.unsubscribe();
      await mcp.close();
    },
  };
}
