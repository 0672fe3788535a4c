import { createHash } from 'node:crypto';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { z } from 'zod';
import { ConfigurationError } from '../errors.js';
import { ToolError } from './tool-error.js';
import type { Tool } from './tools.js';

/**
 * MCP servers as tool sources (the official TypeScript SDK): a server started as a command and
 * spoken to over stdio, or reached at a URL over streamable HTTP. Its tools become tools of the
 * roles it is given to, named `<server>__<tool>` so that two servers' tools never clash, within an
 * allow-list when one is given.
 */

/** The roles that act, and may have MCP servers (the planner plans). */
const ActingRole = z.enum(['generator', 'evaluator']);

const common = {
  /** The tools offered to models, by the server's names; all of them when absent. */
  allowTools: z.array(z.string().min(1)).optional(),
  /** The roles whose models get its tools (default both). */
  roles: z.array(ActingRole).min(1).default(['generator', 'evaluator']),
};

/** An MCP server, as the options and the config file (`mcpServers`) give it. */
export const McpServerSettings = z.union([
  z.strictObject({
    /** The command that starts the server, which then speaks MCP on its stdin and stdout. */
    command: z.string().min(1),
    args: z.array(z.string()).default([]),
    /** Added to the server's environment (which the SDK keeps to a safe default set). */
    env: z.record(z.string(), z.string()).optional(),
    ...common,
  }),
  z.strictObject({
    /** A streamable HTTP endpoint. */
    url: z.url(),
    ...common,
  }),
]);
export type McpServerSettings = z.output<typeof McpServerSettings>;

/** MCP server names travel in tool names: letters, digits, `-` and `_`. */
export const McpServerName = z.string().regex(/^(?!.*__)[A-Za-z0-9_-]{1,32}$/, {
  error: 'an MCP server name is 1 to 32 letters, digits, "-" or "_", without "__"',
});

/** The `mcpServers` option: servers by name. */
export const McpServers = z.record(McpServerName, McpServerSettings);
export type McpServers = z.output<typeof McpServers>;

/** The servers whose tools `role`'s model gets. */
export function mcpServersOf(role: string, servers: McpServers): McpServers {
  return Object.fromEntries(
    Object.entries(servers).filter(([, server]) => (server.roles as readonly string[]).includes(role)),
  );
}

/**
 * `--mcp <name>=<command …>` or `--mcp <name>=<url>`: one server from the command line, for
 * `roles` (a command is split on white space; an http(s) URL is a streamable HTTP endpoint).
 */
export function parseMcpFlag(
  value: string,
  roles: readonly ('generator' | 'evaluator')[],
): [string, McpServerSettings] {
  const at = value.indexOf('=');
  const name = McpServerName.safeParse(value.slice(0, Math.max(at, 0)));
  const target = value.slice(at + 1).trim();
  if (at < 1 || !name.success || target === '') {
    throw new ConfigurationError(`"${value}" is not <name>=<command …> or <name>=<url>`);
  }
  if (/^https?:\/\//.test(target)) return [name.data, { url: target, roles: [...roles] }];
  const [command, ...args] = target.split(/\s+/);
  return [name.data, { command: command!, args, roles: [...roles] }];
}

/** One connected MCP server and the tools it gives. */
export interface McpConnection {
  readonly tools: readonly Tool[];
  close(): Promise<void>;
}

/** Separates a server's name from its tool's in the name a model sees. */
const SEPARATOR = '__';
/** What OpenAI takes as a function name. */
const FUNCTION_NAME = /^[A-Za-z0-9_-]{1,64}$/;

/**
 * The name a model sees for `tool` of `server`: `<server>__<tool>` when that is a valid function
 * name; else the tool's name with other characters as `_`, cut to fit, and a hash of the original
 * so that two tools never end up with one name.
 */
export function toolNameOf(server: string, tool: string): string {
  const plain = `${server}${SEPARATOR}${tool}`;
  if (FUNCTION_NAME.test(plain)) return plain;
  const hash = createHash('sha256').update(tool).digest('hex').slice(0, 8);
  const room = 64 - server.length - SEPARATOR.length - hash.length - 1;
  return `${server}${SEPARATOR}${tool.replace(/[^A-Za-z0-9_-]/g, '_').slice(0, Math.max(room, 0))}_${hash}`;
}

/**
 * Connects to `name`'s server and lists its tools (those allowed, every page). Each tool runs the
 * server's tool; a result the server marks as an error is a `ToolError`; text parts are what the
 * model reads, other parts are named by their type. A connection that fails after the server was
 * started closes it; `onClose` is told when the server goes away later.
 */
export async function connectMcp(
  name: string,
  settings: McpServerSettings,
  onClose: () => void,
  signal?: AbortSignal,
): Promise<McpConnection> {
  const [{ Client }, transport] = await Promise.all([
    import('@modelcontextprotocol/sdk/client/index.js'),
    transportOf(settings),
  ]);
  const client: Client = new Client({ name: 'pge', version: '1' });
  try {
    await client.connect(transport, signal ? { signal } : {});
    const allowed = settings.allowTools === undefined ? null : new Set(settings.allowTools);
    const listed: Awaited<ReturnType<Client['listTools']>>['tools'] = [];
    let cursor: string | undefined;
    do {
      const page = await client.listTools(cursor === undefined ? {} : { cursor }, signal ? { signal } : {});
      listed.push(...page.tools);
      cursor = page.nextCursor;
    } while (cursor !== undefined);
    client.onclose = onClose;
    const tools = listed
      .filter((tool) => allowed?.has(tool.name) ?? true)
      .map(
        (tool): Tool => ({
          definition: {
            name: toolNameOf(name, tool.name),
            description: tool.description ?? `${tool.name} of MCP server ${name}`,
            parameters: tool.inputSchema as Record<string, unknown>,
          },
          async run(args, runSignal) {
            const result = await client.callTool({ name: tool.name, arguments: args }, undefined, {
              signal: runSignal,
            });
            const parts = Array.isArray(result.content) ? result.content : [];
            const text = parts
              .map((part: { type: string; text?: string }) =>
                part.type === 'text' ? (part.text ?? '') : `[${part.type}]`,
              )
              .join('\n');
            if (result.isError === true) throw new ToolError(text || `${tool.name} failed`);
            return text;
          },
        }),
      );
    return { tools, close: () => client.close() };
  } catch (error) {
    await client.close().catch(() => undefined);
    throw error;
  }
}

async function transportOf(settings: McpServerSettings) {
  if ('url' in settings) {
    const { StreamableHTTPClientTransport } = await import(
      '@modelcontextprotocol/sdk/client/streamableHttp.js'
    );
    return new StreamableHTTPClientTransport(new URL(settings.url));
  }
  const { StdioClientTransport, getDefaultEnvironment } = await import(
    '@modelcontextprotocol/sdk/client/stdio.js'
  );
  return new StdioClientTransport({
    command: settings.command,
    args: settings.args,
    env: { ...getDefaultEnvironment(), ...settings.env },
    // The server's own messages go to this process's stderr, as a child process's do.
    stderr: 'inherit',
  });
}
