import { readdirSync, statSync } from 'node:fs';
import { lstat, mkdir, readFile, realpath, writeFile } from 'node:fs/promises';
import { dirname, extname, isAbsolute, join, resolve, sep } from 'node:path';
import { raceAbort } from '../race-abort.js';
import type { ChatImage, ToolCallRequest, ToolDefinition } from './tool-calls.js';

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

/** A refusal or failure the model is told of, as the tool's answer. */
export class ToolError extends Error {
  override readonly name = 'ToolError';
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

/** Images of the workspace an evaluator is shown at most, the latest first, and their size. */
export const MAX_IMAGES = 4;
export const MAX_IMAGE_BYTES = 4 * 1024 * 1024;
const IMAGE_TYPES: Readonly<Record<string, string>> = {
  '.png': 'image/png',
  '.jpg': 'image/jpeg',
  '.jpeg': 'image/jpeg',
  '.webp': 'image/webp',
};

/** Files listed at most, so that a listing stays readable, and directories read at most. */
const MAX_LISTED = 500;
/** Bytes of a file `read_file` reads at most. */
const MAX_READ_BYTES = 1_000_000;

/**
 * A run's workspace: a directory the tools may read and write, and nothing outside it. A path is
 * relative to the workspace; an absolute path, one that climbs out (`..`), and one that reaches
 * out through a symbolic link are refused, never followed.
 */
export class Workspace {
  constructor(readonly dir: string) {}

  /**
   * The workspace's files, relative paths with `/`, sorted. Listed synchronously: a listing is
   * small (at most `MAX_LISTED` files, from at most `MAX_LISTED` directories) and taken before every
   * acting call, where a trip through Node's thread pool per directory would cost more than the
   * listing itself.
   */
  list(): string[] {
    // The workspace is made by the first file written in it: a run that wrote none has none.
    if (statSync(this.dir, { throwIfNoEntry: false }) === undefined) return [];
    const files: string[] = [];
    let directories = 0;
    const walk = (at: string): void => {
      if (++directories > MAX_LISTED) return;
      for (const entry of readdirSync(join(this.dir, at), { withFileTypes: true })) {
        if (files.length >= MAX_LISTED) return;
        const path = at === '' ? entry.name : `${at}/${entry.name}`;
        if (entry.isDirectory()) walk(path);
        else if (entry.isFile()) files.push(path);
      }
    };
    walk('');
    return files.sort();
  }

  async read(path: string): Promise<string> {
    return withoutHostPaths(path, () => this.readInside(path));
  }

  /**
   * The images of the workspace (png, jpeg, webp), the most recently written first: at most
   * `MAX_IMAGES`, each at most `MAX_IMAGE_BYTES` (a larger one is left out), with their paths.
   * `files` is the workspace's listing, when the caller has just made it (`list`).
   */
  async images(files?: readonly string[]): Promise<{ path: string; image: ChatImage }[]> {
    const found: { path: string; mtime: number; size: number }[] = [];
    for (const path of files ?? this.list()) {
      if (IMAGE_TYPES[extname(path).toLowerCase()] === undefined) continue;
      const info = await lstat(join(this.dir, path));
      if (info.isFile() && info.size <= MAX_IMAGE_BYTES)
        found.push({ path, mtime: info.mtimeMs, size: info.size });
    }
    found.sort((a, b) => b.mtime - a.mtime || a.path.localeCompare(b.path));
    return Promise.all(
      found.slice(0, MAX_IMAGES).map(async ({ path }) => ({
        path,
        image: {
          mediaType: IMAGE_TYPES[extname(path).toLowerCase()]!,
          base64: (await readFile(join(this.dir, path))).toString('base64'),
        },
      })),
    );
  }

  async write(path: string, content: string): Promise<string> {
    return withoutHostPaths(path, () => this.writeInside(path, content));
  }

  private async readInside(path: string): Promise<string> {
    const target = await this.inside(path, false);
    const info = await lstat(target).catch(() => null);
    if (info === null || !info.isFile()) throw new ToolError(`no file ${path} in the workspace`);
    if (info.size > MAX_READ_BYTES)
      throw new ToolError(`${path} has ${info.size} bytes; at most ${MAX_READ_BYTES} are read`);
    return readFile(target, 'utf8');
  }

  private async writeInside(path: string, content: string): Promise<string> {
    const target = await this.inside(path, true);
    await writeFile(target, content, 'utf8');
    return `wrote ${Buffer.byteLength(content)} bytes to ${path}`;
  }

  /**
   * The absolute path of `path` in the workspace, after checking that it stays inside: no `..`
   * out of it, and its deepest existing part resolved through any links is in it. With `create`,
   * the directories that lead to it are made.
   */
  private async inside(path: string, create: boolean): Promise<string> {
    if (path === '' || isAbsolute(path) || path.includes('\0'))
      throw new ToolError(`${JSON.stringify(path)} is not a path in the workspace (give one relative to it)`);
    if (!create && !(await exists(this.dir)))
      throw new ToolError(`no file ${path} in the workspace (it is empty)`);
    await mkdir(this.dir, { recursive: true });
    const root = await realpath(this.dir);
    const target = resolve(root, path);
    const within = (p: string) => p === root || p.startsWith(root + sep);
    if (!within(target) || target === root) throw new ToolError(`${path} is outside the workspace`);
    // The deepest part that exists (the file itself, if it does), resolved through links, must be
    // inside too; a link that leads nowhere resolves to nothing and is refused.
    let existing = target;
    while (!(await exists(existing))) existing = dirname(existing);
    const real = await realpath(existing).catch(() => null);
    if (real === null || !within(real)) throw new ToolError(`${path} leads outside the workspace`);
    if (create) {
      const parent = dirname(target);
      await mkdir(parent, { recursive: true });
      if (!within(await realpath(parent))) throw new ToolError(`${path} leads outside the workspace`);
    }
    return target;
  }
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
          'Writes a text file in the workspace, making its directories; replaces a file of that path.',
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
      run: (args) => workspace.write(stringArg(args, 'path'), stringArg(args, 'content')),
    });
  }
  return tools;
}

function exists(path: string): Promise<boolean> {
  return lstat(path).then(
    () => true,
    () => false,
  );
}

/**
 * Runs a file operation on `path`, turning a failure of the file system (its message names the
 * host's absolute paths) into a `ToolError` that names only the workspace's.
 */
async function withoutHostPaths<T>(path: string, operation: () => Promise<T>): Promise<T> {
  try {
    return await operation();
  } catch (error) {
    if (error instanceof ToolError) throw error;
    const code = (error as NodeJS.ErrnoException).code ?? 'failed';
    throw new ToolError(`cannot use ${path} in the workspace (${code})`);
  }
}
