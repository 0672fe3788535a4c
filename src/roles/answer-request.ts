import { z } from 'zod';
import { describeError, InvalidOutputError } from '../errors.js';
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
import { checkEvaluationCoverage, ROLE_OF_REQUEST, truncatePlan } from '../schemas/index.js';
import {
  refusedToolCall,
  runToolCall,
  type Tool,
  type ToolCallRecord,
  type ToolLimits,
} from '../tools/tools.js';
import type { ChatMessage, Model, ModelAnswer, ModelRequest } from './model.js';
import { buildMessages, repairMessages } from './prompts.js';
import { answerSchemaFor, responseSchemaFor } from './response-schemas.js';

/**
 * One request answered by a model, with no bus: a fresh conversation from the typed input only,
 * the answer validated (JSON, then the phase schema, then the checks that need the input, like
 * rubric coverage) and re-asked with the precise problem at most `maxRepairs` times, failing
 * closed. The role worker (`role-worker.ts`) serves it on the bus; `planAlone` calls it directly.
 */

/** What answering one request produced: every model call, and the result. */
export interface RoleAnswer {
  calls: ModelCall[];
  result: RoleResult['result'];
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

/** A signal that never aborts, for tools of a call that has none. */
const NEVER = new AbortController().signal;

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

/** The conversation a request opens with: its role's prompt and input, then what its tools show. */
function openingMessages(request: RoleRequest, role: Role, settings: CallSettings): ChatMessage[] {
  const messages = buildMessages(role, phaseOf(request), request.payload.input, settings.systemPrompt);
  return settings.toolbox?.context === undefined ? messages : [...messages, settings.toolbox.context];
}

/** Asks the model once; a model that ignores the signal must not hold the request: the abort wins the race. */
async function complete(
  model: Model,
  asked: ModelRequest,
  signal: AbortSignal | undefined,
): Promise<ModelAnswer> {
  const call = model.complete({ ...asked, ...(signal ? { signal } : {}) });
  return signal ? await raceAbort(call, signal) : await call;
}

/** What one model call of a request spent, for its `ModelCall`. */
function spentOn(answer: ModelAnswer, role: Role, phase: Phase, repair: number) {
  return {
    role,
    phase,
    model: answer.model,
    promptTokens: answer.promptTokens,
    completionTokens: answer.completionTokens,
    costUsd: answer.costUsd,
    ...(answer.priced === false ? { priced: false } : {}),
    repair,
  };
}

/**
 * Runs the tool calls of one answer, `made` having been made before it: those past the toolbox's
 * limit are refused with a word to answer now. Returns the tools' answers for the conversation
 * and the records of the calls.
 */
async function runToolRound(
  asked: NonNullable<ModelAnswer['toolCalls']>,
  tools: ReadonlyMap<string, Tool>,
  limits: ToolLimits,
  made: number,
  signal: AbortSignal | undefined,
): Promise<{ answers: ChatMessage[]; records: ToolCallRecord[] }> {
  const answers: ChatMessage[] = [];
  const records: ToolCallRecord[] = [];
  for (const [i, toolCall] of asked.entries()) {
    const ran =
      limits.maxCalls - (made + i) > 0
        ? await runToolCall(toolCall, tools, limits, signal ?? NEVER)
        : refusedToolCall(toolCall, `the limit of ${limits.maxCalls} tool calls is reached: answer now`);
    answers.push({ role: 'tool', toolCallId: toolCall.id, content: ran.answer });
    records.push(ran.record);
  }
  return { answers, records };
}

/** Why a valid plan is asked again, shorter: it has more steps than the run allows (DESIGN 1). */
function tooManySteps(request: RoleRequest, output: unknown): string | null {
  if (request.type !== 'plan.requested') return null;
  const { maxSteps } = request.payload.input;
  const steps = (output as Plan).steps.length;
  return steps > maxSteps ? `the plan has ${steps} steps; at most ${maxSteps} are allowed` : null;
}

/** The result of a valid answer: a plan cut to the run's `maxSteps` (asked once to shorten). */
function successOf(request: RoleRequest, output: unknown): RoleResult['result'] {
  if (request.type === 'plan.requested')
    return {
      status: 'ok',
      phase: 'plan',
      output: truncatePlan(output as Plan, request.payload.input.maxSteps),
    };
  return { status: 'ok', phase: phaseOf(request), output } as RoleSuccess;
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
  let messages = openingMessages(request, role, settings);
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
    const asked = { role, phase, schemaName: name, jsonSchema, messages };
    let answer: ModelAnswer;
    try {
      const offer = offered ? { tools: [...tools.values()].map((tool) => tool.definition) } : {};
      answer = await complete(model, { ...asked, ...offer }, signal);
    } catch (error) {
      // An aborted call has no result: the worker decides what becomes of the request.
      if (signal?.aborted) throw signal.reason;
      return { calls, result: { status: 'error', phase, error: describeError(error), raw: null } };
    }
    const spent = spentOn(answer, role, phase, repair);
    if (offered && answer.toolCalls !== undefined && answer.toolCalls.length > 0) {
      const round = await runToolRound(answer.toolCalls, tools, toolbox.limits, toolCallsMade, signal);
      toolCallsMade += answer.toolCalls.length;
      const latencyMs = performance.now() - started;
      calls.push({ ...spent, latencyMs, outcome: 'tools', problem: null, toolCalls: round.records });
      const said: ChatMessage = {
        role: 'assistant',
        content: answer.content ?? '',
        toolCalls: answer.toolCalls,
      };
      messages = [...messages, said, ...round.answers];
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
      const tooLong = askedToShorten ? null : tooManySteps(request, checked.output);
      if (tooLong === null) return { calls, result: successOf(request, checked.output) };
      askedToShorten = true;
      problem = tooLong;
    } else problem = checked.problem;
    messages = repairMessages(messages, raw ?? '', problem);
  }
  const error = new InvalidOutputError(`${phase} answer invalid after ${maxRepairs + 1} tries: ${problem}`, {
    raw,
  });
  return { calls, result: { status: 'error', phase, error: describeError(error), raw } };
}
