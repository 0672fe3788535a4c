import { raceAbort } from '../race-abort.js';
import type { ToolCallRequest, ToolDefinition } from './tool-calls.js';
import { ToolError } from './tool-error.js';
import type { Workspace } from './workspace.js';

/**
 * Tools a role's model may call (OpenAI function calling), run where the role's worker runs, and
 * the built-in workspace tools. A tool's failure is an answer the model reads (`ToolError`), never
 * a failure of the call: the model may try something else.
 */

/** A tool: what the model is told of it, and what running it does. */
export interface Tool {
  readonly definition: ToolDefinition;
  /** Runs the tool on the model's arguments (parsed JSON); resolves with the text the model reads. */
  run(args: Record<string, unknown>, signal: AbortSignal): Promise<string>;
}

/** Bounds of one role call's tool use. */
export interface ToolLimits {
  /** Tool calls in all the rounds of one role call; past it the model must answer. */
  readonly maxCalls: number;
  /** Wall time of one tool run, in milliseconds. */
  readonly timeoutMs: number;
  /** Characters of one tool's answer the model reads; the rest is cut, and it is told so. */
  readonly maxOutputChars: number;
}

export const DEFAULT_TOOL_LIMITS: ToolLimits = { maxCalls: 24, timeoutMs: 30_000, maxOutputChars: 20_000 };

/** What one tool call did, as the log records it (`model.call.completed`'s `toolCalls`). */
export interface ToolCallRecord {
  name: string;
  /** The model's arguments, cut to `EXCERPT_CHARS`. */
  arguments: string;
  /** The start of the answer the model read, cut to `EXCERPT_CHARS`. */
  excerpt: string;
  ok: boolean;
  durationMs: number;
}

/** Characters of a tool call's arguments and answer the log keeps. */
export const EXCERPT_CHARS = 500;

function cut(text: string, chars: number): string {
  return text.length <= chars
    ? text
    : `${text.slice(0, chars)}… [${text.length - chars} more characters cut]`;
}

/**
 * Runs one call the model asked for among `tools`, within `limits`: an unknown tool, arguments that
 * are not a JSON object, a tool that fails or outlasts its time all answer with the reason. Rejects
 * only when `signal` aborts (the role call was cancelled).
 */
export async function runToolCall(
  call: ToolCallRequest,
  tools: ReadonlyMap<string, Tool>,
  limits: ToolLimits,
  signal: AbortSignal,
): Promise<{ answer: string; record: ToolCallRecord }> {
  const started = performance.now();
  let answer: string;
  let ok = false;
  try {
    const tool = tools.get(call.name);
    if (tool === undefined)
      throw new ToolError(`there is no tool "${call.name}"; the tools are ${[...tools.keys()].join(', ')}`);
    const args = parseArguments(call.arguments);
    signal.throwIfAborted();
    const timeout = AbortSignal.timeout(limits.timeoutMs);
    const both = AbortSignal.any([signal, timeout]);
    answer = await raceAbort(tool.run(args, both), both).catch((error: unknown) => {
      throw !signal.aborted && timeout.aborted
        ? new ToolError(`${call.name} took longer than ${limits.timeoutMs} ms`)
        : error;
    });
    // A tool that ignores the signal may finish after its call was cancelled: that is no answer.
    signal.throwIfAborted();
    ok = true;
  } catch (error) {
    if (signal.aborted) throw signal.reason;
    answer = `error: ${error instanceof ToolError ? error.message : `${call.name} failed: ${(error as Error)?.message ?? String(error)}`}`;
  }
  answer = cut(answer, limits.maxOutputChars);
  return {
    answer,
    record: {
      name: call.name,
      arguments: cut(call.arguments, EXCERPT_CHARS),
      excerpt: cut(answer, EXCERPT_CHARS),
      ok,
      durationMs: performance.now() - started,
    },
  };
}

/** A call the model asked for that is not run (a bound was reached), answered with why. */
export function refusedToolCall(
  call: ToolCallRequest,
  why: string,
): { answer: string; record: ToolCallRecord } {
  const answer = `error: ${why}`;
  return {
    answer,
    record: {
      name: call.name,
      arguments: cut(call.arguments, EXCERPT_CHARS),
      excerpt: answer,
      ok: false,
      durationMs: 0,
    },
  };
}

function parseArguments(text: string): Record<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(text === '' ? '{}' : text);
  } catch (error) {
    throw new ToolError(`the arguments are not valid JSON (${(error as Error).message})`);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new ToolError('the arguments must be a JSON object');
  }
  return value as Record<string, unknown>;
}

function stringArg(args: Record<string, unknown>, name: string): string {
  const value = args[name];
  if (typeof value !== 'string') throw new ToolError(`"${name}" must be a string`);
  return value;
}

/**
 * The workspace tools: `list_files` and `read_file`, and with `write` also `write_file`. The
 * generator has all three; the evaluator reads only.
 */
export function workspaceTools(workspace: Workspace, write: boolean): Tool[] {
  const tools: Tool[] = [
    {
      definition: {
        name: 'list_files',
        description: 'Lists the files of the workspace (paths relative to it).',
        parameters: { type: 'object', properties: {}, additionalProperties: false },
      },
      run: async () => {
        const files = workspace.list();
        return files.length === 0 ? '(the workspace is empty)' : files.join('\n');
      },
    },
    {
      definition: {
        name: 'read_file',
        description: 'Reads a text file of the workspace.',
        parameters: {
          type: 'object',
          properties: { path: { type: 'string', description: 'The path, relative to the workspace.' } },
          required: ['path'],
          additionalProperties: false,
        },
      },
      run: (args) => workspace.read(stringArg(args, 'path')),
    },
  ];
  if (write) {
    tools.push({
      definition: {
        name: 'write_file',
        description:
          'Writes a text file in the workspace, making its directories; replaces a file of that path. A path another step holds is refused, unless this step builds on that step.',
        parameters: {
          type: 'object',
          properties: {
            path: { type: 'string', description: 'The path, relative to the workspace.' },
            content: { type: 'string', description: 'The whole content of the file.' },
          },
          required: ['path', 'content'],
          additionalProperties: false,
        },
      },
      run: (args, signal) => workspace.write(stringArg(args, 'path'), stringArg(args, 'content'), signal),
    });
  }
  return tools;
}
