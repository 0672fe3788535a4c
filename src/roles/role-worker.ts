import { join, resolve } from 'node:path';
import { LRUCache } from 'lru-cache';
import { z } from 'zod';
import type { Bus, MessageHeaders } from '../bus/bus.js';
import { publishRejection, publishResult, serveWork, subscribeCancels } from '../bus/channels.js';
import { assertSubjectToken, subjects } from '../bus/subjects.js';
import {
  CallCancelledError,
  ConfigurationError,
  describeError,
  InvalidOutputError,
  WorkerStoppedError,
} from '../errors.js';
import { raceAbort } from '../race-abort.js';
import type {
  Evaluation,
  ModelCall,
  Phase,
  Plan,
  Role,
  RoleRequest,
  RoleResult,
  RoleSuccess,
} from '../schemas/index.js';
import {
  checkEvaluationCoverage,
  DEFAULT_WORKER_CONCURRENCY,
  OPTION_DEFAULTS,
  ROLE_OF_REQUEST,
  truncatePlan,
} from '../schemas/index.js';
import { traceSafely } from '../telemetry/trace-safely.js';
import type { TracedWork, WorkTracing } from '../telemetry/work-tracing.js';
import { connectMcp, type McpConnection, type McpServers, mcpServersOf } from '../tools/mcp.js';
import {
  DEFAULT_TOOL_LIMITS,
  refusedToolCall,
  runToolCall,
  type Tool,
  type ToolCallRecord,
  type ToolLimits,
  workspaceTools,
} from '../tools/tools.js';
import {
  DEFAULT_VALIDATOR_LIMITS,
  runValidators,
  type Validator,
  type ValidatorLimits,
} from '../tools/validators.js';
import { Workspace } from '../tools/workspace.js';
import type { WorkspaceWriter } from '../tools/workspace-claims.js';
import type { ChatMessage, Model } from './model.js';
import { buildMessages, repairMessages } from './prompts.js';
import { answerSchemaFor, responseSchemaFor } from './response-schemas.js';

/**
 * A role worker: takes a request of its role from the bus, builds a fresh conversation from the
 * typed input only, calls its model, validates the answer (JSON, then the phase schema, then the
 * checks that need the input, like rubric coverage), re-asks with the precise problem at most
 * `maxRepairs` times, and fails closed. Stateless: scale a role by starting more workers.
 */

/** Default number of re-asks after an invalid answer. */
export const DEFAULT_MAX_REPAIRS = OPTION_DEFAULTS.maxRepairs;

/** What answering one request produced: every model call, and the result. */
export interface RoleAnswer {
  calls: ModelCall[];
  result: RoleResult['result'];
}

function phaseOf(request: RoleRequest): Phase {
  return request.payload.phase;
}

/** Problems the phase schema cannot see because they depend on the input. */
function contextualProblems(request: RoleRequest, output: unknown): string[] {
  if (request.type === 'step.evaluation.requested') {
    return checkEvaluationCoverage(output as Evaluation, request.payload.input.criteria);
  }
  return [];
}

/** Parses and validates one raw answer; returns the output or the problem to re-ask with. */
function validate(request: RoleRequest, raw: string | null, refusal: string | null, finishReason: string) {
  if (refusal) return { problem: `the model refused: ${refusal}` } as const;
  if (finishReason === 'length')
    return { problem: 'the answer was cut off by the token limit; answer more concisely' } as const;
  if (raw === null || raw.trim() === '') return { problem: 'the answer was empty' } as const;
  let json: unknown;
  try {
    json = JSON.parse(raw);
  } catch (error) {
    return { problem: `the answer is not valid JSON (${(error as Error).message})` } as const;
  }
  const parsed = answerSchemaFor(phaseOf(request)).safeParse(json);
  if (!parsed.success)
    return { problem: `the answer does not follow the schema: ${z.prettifyError(parsed.error)}` } as const;
  const problems = contextualProblems(request, parsed.data);
  return problems.length > 0
    ? ({ problem: problems.join('; ') } as const)
    : ({ output: parsed.data } as const);
}

/** How a worker's role calls are made, beyond the model: tools, and the role's system prompt. */
export interface CallSettings {
  /** Replaces the role's system prompt (`buildMessages`). */
  readonly systemPrompt?: string;
  readonly toolbox?: Toolbox;
}

/** The tools one role call may use, and their bounds. */
export interface Toolbox {
  readonly tools: readonly Tool[];
  readonly limits: ToolLimits;
  /** Told to the model before it starts (what the workspace holds, its images); none when absent. */
  readonly context?: ChatMessage;
}

/**
 * Answers one request with `model`: the whole validate-and-repair loop, no bus. With a `toolbox`,
 * the model may answer with tool calls: they are run (`runToolCall`), their answers sent back, and
 * the model asked again, until it answers or `toolbox.limits.maxCalls` tool calls were made (then
 * it is asked without tools). Each round is a model call of its own, with the tool calls it made.
 * A plan with more steps than `maxSteps` is re-asked once, then cut (DESIGN 1), which the result
 * reports.
 */
export async function answerRequest(
  request: RoleRequest,
  model: Model,
  maxRepairs: number,
  signal?: AbortSignal,
  settings: CallSettings = {},
): Promise<RoleAnswer> {
  const { toolbox } = settings;
  const role = ROLE_OF_REQUEST[request.type];
  const phase = phaseOf(request);
  const { name, jsonSchema } = await responseSchemaFor(phase);
  const calls: ModelCall[] = [];
  let messages = buildMessages(role, phase, request.payload.input, settings.systemPrompt);
  if (toolbox?.context !== undefined) messages = [...messages, toolbox.context];
  const tools = new Map((toolbox?.tools ?? []).map((tool) => [tool.definition.name, tool]));
  let toolCallsMade = 0;
  let raw: string | null = null;
  let problem = '';
  let askedToShorten = false;
  // The re-ask of a plan with too many steps is its own, not one of the repairs (DESIGN 1); a
  // round of tool calls is not a repair either.
  for (let repair = 0; repair <= maxRepairs + (askedToShorten ? 1 : 0); ) {
    const started = performance.now();
    const offered = toolbox !== undefined && toolCallsMade < toolbox.limits.maxCalls;
    let answer: Awaited<ReturnType<Model['complete']>>;
    try {
      const call = model.complete({
        role,
        phase,
        schemaName: name,
        jsonSchema,
        messages,
        ...(offered ? { tools: [...tools.values()].map((tool) => tool.definition) } : {}),
        ...(signal ? { signal } : {}),
      });
      // A model that ignores the signal must not hold the request: the abort wins the race.
      answer = signal ? await raceAbort(call, signal) : await call;
    } catch (error) {
      // An aborted call has no result: the worker decides what becomes of the request.
      if (signal?.aborted) throw signal.reason;
      return { calls, result: { status: 'error', phase, error: describeError(error), raw: null } };
    }
    const spent = {
      role,
      phase,
      model: answer.model,
      promptTokens: answer.promptTokens,
      completionTokens: answer.completionTokens,
      costUsd: answer.costUsd,
      ...(answer.priced === false ? { priced: false } : {}),
      repair,
    };
    if (offered && answer.toolCalls !== undefined && answer.toolCalls.length > 0) {
      const answers: ChatMessage[] = [];
      const toolCalls: ToolCallRecord[] = [];
      for (const asked of answer.toolCalls) {
        const left = toolbox.limits.maxCalls - toolCallsMade;
        const ran =
          left > 0
            ? await runToolCall(asked, tools, toolbox.limits, signal ?? NEVER)
            : refusedToolCall(
                asked,
                `the limit of ${toolbox.limits.maxCalls} tool calls is reached: answer now`,
              );
        toolCallsMade += 1;
        answers.push({ role: 'tool', toolCallId: asked.id, content: ran.answer });
        toolCalls.push(ran.record);
      }
      calls.push({
        ...spent,
        latencyMs: performance.now() - started,
        outcome: 'tools',
        problem: null,
        toolCalls,
      });
      messages = [
        ...messages,
        { role: 'assistant', content: answer.content ?? '', toolCalls: answer.toolCalls },
        ...answers,
      ];
      continue;
    }
    raw = answer.content;
    const checked = validate(request, raw, answer.refusal, answer.finishReason);
    calls.push({
      ...spent,
      latencyMs: performance.now() - started,
      outcome: 'output' in checked ? 'valid' : 'invalid',
      problem: 'problem' in checked ? (checked.problem ?? null) : null,
    });
    repair += 1;
    if ('output' in checked) {
      if (request.type === 'plan.requested') {
        const plan = checked.output as Plan;
        const maxSteps = request.payload.input.maxSteps;
        if (plan.steps.length > maxSteps && !askedToShorten) {
          askedToShorten = true;
          problem = `the plan has ${plan.steps.length} steps; at most ${maxSteps} are allowed`;
          messages = repairMessages(messages, raw ?? '', problem);
          continue;
        }
        return { calls, result: { status: 'ok', phase: 'plan', output: truncatePlan(plan, maxSteps) } };
      }
      return { calls, result: { status: 'ok', phase, output: checked.output } as RoleSuccess };
    }
    problem = checked.problem;
    messages = repairMessages(messages, raw ?? '', problem);
  }
  const error = new InvalidOutputError(`${phase} answer invalid after ${maxRepairs + 1} tries: ${problem}`, {
    raw,
  });
  return { calls, result: { status: 'error', phase, error: describeError(error), raw } };
}

/** The span of a request when the worker is not traced: nothing is recorded. */
const UNTRACED: TracedWork = {
  within: (work) => work(),
  validate: (run) => run(),
  tool: (tool) => tool,
  end: () => {},
};

/** A signal that never aborts, for tools of a call that has none. */
const NEVER = new AbortController().signal;

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
  workspaces?: {
    root: string;
    limits?: Partial<ToolLimits>;
    /** Whether the evaluator is shown the workspace's images (default true). */
    images?: boolean;
  };
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

/**
 * The step a work request writes for: its id and title, the steps it builds on and the plan's
 * steps, which decide the paths it may write (`WorkspaceClaims`). Null for any other request: the
 * generator writes only in its work, not while it proposes a contract, and the evaluator never.
 */
function writerOf(request: RoleRequest): WorkspaceWriter | null {
  if (request.type !== 'step.work.requested') return null;
  const { step, plan } = request.payload.input;
  return {
    stepId: step.id,
    title: step.title,
    dependsOn: step.dependsOn,
    planStepIds: plan.steps.map((s) => s.id),
  };
}

/**
 * The toolbox of one request of `role`: the workspace tools on its run's workspace, with a message
 * that shows the model what the workspace holds, and the tools of the role's MCP servers. None
 * when there is no tool. The planner has none: it plans, it does not act. Only a work request
 * writes (`writerOf`).
 */
async function toolboxFor(
  role: Role,
  request: RoleRequest,
  workspaces: RoleWorkerOptions['workspaces'],
  mcpTools: readonly Tool[],
  traced: (tool: Tool) => Tool,
): Promise<Toolbox | undefined> {
  if (role === 'planner' || (workspaces === undefined && mcpTools.length === 0)) return undefined;
  const limits = { ...DEFAULT_TOOL_LIMITS, ...workspaces?.limits };
  if (workspaces === undefined) return { tools: mcpTools.map(traced), limits };
  const writer = writerOf(request);
  const dir = join(workspaces.root, assertSubjectToken('run id', request.runId));
  const workspace = new Workspace(dir, ...(writer === null ? [] : [writer]));
  await workspace.recordWriter();
  const files = workspace.list();
  const listing = files.length === 0 ? '(empty)' : files.map((file) => `- ${file}`).join('\n');
  const tools = [...workspaceTools(workspace, writer !== null), ...mcpTools].map(traced);
  if (role === 'generator') {
    const write =
      writer === null
        ? 'Read them with read_file and list them with list_files; you write files when you do the work, not now.'
        : 'Read them with read_file, write the files of your deliverable with write_file (they are part of it, beside your answer), list them with list_files. Steps may run at the same time: a file another step wrote is refused to you unless your step builds on that step, so give your files paths of their own.';
    const text = `WORKSPACE: the run's files, which earlier steps left and later steps build on. ${write} It holds:\n${listing}`;
    return { tools, limits, context: { role: 'user', content: text } };
  }
  // The evaluator sees the images the work left (rendered by a tool, a validator or an MCP server).
  const images = workspaces.images === false ? [] : await workspace.images(files);
  const shown =
    images.length === 0
      ? ''
      : `\nThe images attached are, in order: ${images.map((i) => i.path).join(', ')}.`;
  const text = `WORKSPACE: the files of the artifact, beside its output. Read them with read_file and list_files. It holds:\n${listing}${shown}`;
  return {
    tools,
    limits,
    context: {
      role: 'user',
      content: text,
      ...(images.length === 0 ? {} : { images: images.map((i) => i.image) }),
    },
  };
}

/**
 * The tools of a worker's MCP servers, connected at its first request that needs them, and again
 * after a failure to connect or a server that went away; closed when the worker stops. Servers
 * that connected when another failed are closed, not kept half.
 */
class McpTools {
  private connecting: Promise<McpConnection[]> | null = null;

  constructor(private readonly servers: McpServers) {}

  async tools(signal: AbortSignal): Promise<Tool[]> {
    if (Object.keys(this.servers).length === 0) return [];
    this.connecting ??= this.connect(signal);
    const connecting = this.connecting;
    try {
      return (await connecting).flatMap((connection) => connection.tools);
    } catch (error) {
      if (this.connecting === connecting) this.connecting = null;
      throw error;
    }
  }

  async close(): Promise<void> {
    const connections = await this.connecting?.catch(() => []);
    this.connecting = null;
    await Promise.allSettled((connections ?? []).map((connection) => connection.close()));
  }

  private async connect(signal: AbortSignal): Promise<McpConnection[]> {
    const gone = () => {
      this.connecting = null;
    };
    const settled = await Promise.allSettled(
      Object.entries(this.servers).map(([name, server]) => connectMcp(name, server, gone, signal)),
    );
    const failed = settled.find((s): s is PromiseRejectedResult => s.status === 'rejected');
    const connected = settled.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
    if (failed === undefined) return connected;
    await Promise.allSettled(connected.map((connection) => connection.close()));
    throw failed.reason;
  }
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
 * Starts a worker serving `role` on the bus, as one member of the role's queue group. Each
 * request it holds has its own abort signal, passed to the model (the openai SDK aborts the HTTP
 * request with it): a cancel from the run's coordinator aborts that request's call (each copy, if
 * it was sent again and reached this worker twice), and the request is done with no result;
 * `stop('abort')` aborts them all, and the requests go back to the queue.
 */
export function createRoleWorker(options: RoleWorkerOptions): RoleWorker {
  const { bus, role, model, workspaces, validation, tracing } = options;
  if (validation !== undefined && validation.validators.length > 0 && role !== 'generator')
    throw new ConfigurationError(`validators run on the generator's workers, not the ${role}'s`);
  const mcp = new McpTools(mcpServersOf(role, options.mcpServers ?? {}));
  const maxRepairs = options.maxRepairs ?? DEFAULT_MAX_REPAIRS;
  const concurrency = options.concurrency ?? DEFAULT_WORKER_CONCURRENCY;
  const id = options.workerId ?? `${role}-${Math.random().toString(36).slice(2, 8)}`;
  /**
   * The calls in flight (at most `concurrency`), each with the controller that aborts its model
   * call: a request sent again may be in flight here twice, and a cancel aborts both.
   */
  const inFlight = new Set<{ requestId: string; controller: AbortController; job: Promise<unknown> }>();
  /**
   * The requests taken and not yet settled (those in flight, and those whose run is looked up),
   * with how many copies of each: a request sent again may reach this worker twice.
   */
  const taken = new Map<string, number>();
  const cancelled = new LRUCache<string, true>({ max: CANCELS_REMEMBERED });
  const live = options.isLiveRun === undefined ? null : liveRunCheck(options.isLiveRun, options.now);
  /** Set by `stop`: a request taken before it and not begun yet goes back to the queue. */
  let stopping: WorkerStoppedError | null = null;

  const cancels = subscribeCancels(bus, (cancel) => {
    cancelled.set(cancel.requestId, true);
    for (const call of inFlight)
      if (call.requestId === cancel.requestId) call.controller.abort(new CallCancelledError(cancel.reason));
  });

  /**
   * Refuses a work item of a run that is not live: acknowledged without an answer (no coordinator
   * waits for it, and a redelivery would only ask again), and reported.
   */
  async function refuse(request: RoleRequest): Promise<void> {
    await publishRejection(bus, {
      subject: subjects.work(role),
      problem: `${request.type} ${request.id} names run ${request.runId}, which is not live (no coordinator issued it): refused by ${id}, no model was called`,
      ts: new Date().toISOString(),
    }).catch(() => {
      // The report is the only thing lost: the item was refused all the same.
    });
  }

  async function answer(
    request: RoleRequest,
    signal: AbortSignal,
    traced: TracedWork,
  ): Promise<RoleResult['result']> {
    let answered: RoleAnswer;
    try {
      const mcpTools = await mcp.tools(signal);
      const toolbox = await toolboxFor(role, request, workspaces, mcpTools, traced.tool);
      answered = await traced.within(() =>
        answerRequest(request, model, maxRepairs, signal, {
          ...(options.systemPrompt === undefined ? {} : { systemPrompt: options.systemPrompt }),
          ...(toolbox === undefined ? {} : { toolbox }),
        }),
      );
    } catch (error) {
      if (signal.aborted) throw error;
      // Its tools could not be had (an MCP server that does not start, say): the call fails.
      answered = {
        calls: [],
        result: { status: 'error', phase: request.payload.phase, error: describeError(error), raw: null },
      };
    }
    const { calls } = answered;
    let { result } = answered;
    const validators = validation?.validators ?? [];
    if (
      validation !== undefined &&
      validators.length > 0 &&
      request.type === 'step.work.requested' &&
      result.status === 'ok' &&
      result.phase === 'work'
    ) {
      const { input } = request.payload;
      const { output } = result.output;
      const runs = await traced.validate(() =>
        runValidators(
          validators,
          {
            workspace: resolve(validation.root, assertSubjectToken('run id', request.runId)),
            output,
            runId: request.runId,
            stepId: input.step.id,
            stepNumber: input.stepNumber,
            attempt: input.attempt,
          },
          signal,
          { ...DEFAULT_VALIDATOR_LIMITS, ...validation.limits },
        ),
      );
      result = { ...result, validation: runs };
    }
    await publishResult(bus, {
      requestId: request.id,
      runId: request.runId,
      role,
      worker: id,
      calls,
      result,
    });
    return result;
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
      taken.set(request.id, (taken.get(request.id) ?? 0) + 1);
      try {
        await take(request, headers);
      } finally {
        const copies = (taken.get(request.id) ?? 1) - 1;
        if (copies > 0) taken.set(request.id, copies);
        else taken.delete(request.id);
      }
    },
    concurrency,
  );
  /** Handles one request taken from the queue. */
  async function take(request: RoleRequest, headers: MessageHeaders): Promise<void> {
    if (live !== null) {
      if (!(await live(request.runId))) return refuse(request);
      // Cancelled while its run was looked up; or the worker stopped meanwhile, before it began.
      if (cancelled.get(request.id)) return;
      if (stopping !== null) throw stopping;
    }
    const controller = new AbortController();
    const what = `${request.type} ${request.id}`;
    const traced = (tracing && traceSafely(what, () => tracing.begin(request, headers, id))) ?? UNTRACED;
    const call = { requestId: request.id, controller, job: answer(request, controller.signal, traced) };
    inFlight.add(call);
    let outcome: Parameters<TracedWork['end']>[0];
    try {
      outcome = { result: await call.job };
    } catch (error) {
      outcome = { error };
    } finally {
      inFlight.delete(call);
    }
    traceSafely(what, () => traced.end(outcome));
    if ('error' in outcome && !(controller.signal.reason instanceof CallCancelledError)) throw outcome.error;
  }
  return {
    id,
    holding: () => [...taken.keys()],
    async stop(mode = 'finish') {
      stopping = new WorkerStoppedError(`worker ${id} stopped; its requests go back to the queue`);
      subscription.unsubscribe();
      if (mode === 'abort') for (const { controller } of inFlight) controller.abort(stopping);
      await Promise.allSettled([...inFlight].map((call) => call.job));
      cancels.unsubscribe();
      await mcp.close();
    },
  };
}
