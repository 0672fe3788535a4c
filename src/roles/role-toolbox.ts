import { join } from 'node:path';
import { assertSubjectToken } from '../bus/subjects.js';
import type { Role, RoleRequest } from '../schemas/index.js';
import { connectMcp, type McpConnection, type McpServers } from '../tools/mcp.js';
import { DEFAULT_TOOL_LIMITS, type Tool, type ToolLimits, workspaceTools } from '../tools/tools.js';
import { Workspace } from '../tools/workspace.js';
import type { WorkspaceWriter } from '../tools/workspace-claims.js';
import type { Toolbox } from './answer-request.js';

/**
 * The tools a role worker gives its model for one request: the run's workspace, shown to the
 * model as it starts, and the role's MCP servers.
 */

/** Where runs' workspaces are on a worker's machine (`RoleWorkerOptions.workspaces`). */
export interface Workspaces {
  root: string;
  limits?: Partial<ToolLimits>;
  /** Whether the evaluator is shown the workspace's images (default true). */
  images?: boolean;
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
export async function toolboxFor(
  role: Role,
  request: RoleRequest,
  workspaces: Workspaces | undefined,
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
export class McpTools {
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
