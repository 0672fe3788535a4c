import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { PgeOptions } from '../../src/api/options.js';
import { PlannerGeneratorEvaluator } from '../../src/api/planner-generator-evaluator.js';
import { readLogFile } from '../../src/persistence/index.js';
import type { RunEvent } from '../../src/schemas/index.js';
import { type FakeOpenAI, type FakeStep, startFakeOpenAI } from '../support/fake-openai-server.js';
import { MCP_FIXTURE_COMMAND, startMcpHttp } from '../support/mcp-fixture-server.js';
import {
  answers,
  asksForTools,
  offeredTools,
  schemaOf,
  toolAnswers,
} from '../support/scripted-deployment.js';

/**
 * MCP servers as tool sources, through the official SDK: a real MCP server process on stdio, and
 * one over streamable HTTP; a scripted OpenAI-compatible server asks for their tools.
 */

// biome-ignore lint/suspicious/noExplicitAny: request bodies as the SDK sent them.
type Body = any;

let dir: string;
let openai: FakeOpenAI;
/** The phase whose first round calls the MCP tools, and the calls it makes. */
let caller: { schema: string; calls: { name: string; arguments: object }[] };

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'pge-mcp-'));
  openai = await startFakeOpenAI();
  openai.script((body: Body): FakeStep => {
    const schema = schemaOf(body) ?? '';
    if (schema === caller.schema && toolAnswers(body).length === 0) {
      return asksForTools(caller.calls);
    }
    const content = answers(9, 1)[schema];
    return content ? { content } : { status: 400, error: { message: 'unexpected schema' } };
  });
});
afterEach(async () => {
  await openai.close();
  rmSync(dir, { recursive: true, force: true });
});

async function run(options: PgeOptions): Promise<{ requests: Body[]; log: RunEvent[] }> {
  const events: RunEvent[] = [];
  const pge = new PlannerGeneratorEvaluator({
    modelName: 'test-model',
    baseURL: openai.url,
    apiKey: 'sk-test-mcp',
    workingDirectory: dir,
    maxRetries: 0,
    tools: false,
    onEvent: (e) => events.push(e),
    ...options,
  });
  await pge.run('Shout something');
  await pge.close();
  const log = await readLogFile(join(dir, `pge_shared_state_${events[0]!.runId}.md`));
  return { requests: openai.completions().map((r) => r.body as Body), log };
}

describe('MCP servers', () => {
  it('gives the models the allowed tools of a server process on stdio, and runs them there', async () => {
    caller = {
      schema: 'pge_work',
      calls: [
        { name: 'fixture__shout', arguments: { text: 'hello' } },
        { name: 'fixture__fail', arguments: {} },
        { name: 'fixture__secret', arguments: {} },
      ],
    };
    const { requests, log } = await run({
      mcpServers: { fixture: { ...MCP_FIXTURE_COMMAND, allowTools: ['shout', 'fail'] } },
    });
    const works = requests.filter((b) => schemaOf(b) === 'pge_work');
    expect(offeredTools(works[0])).toEqual(['fixture__fail', 'fixture__shout']);
    expect(toolAnswers(works[1]).map((m: Body) => m.content)).toEqual([
      'HELLO',
      'error: it broke',
      expect.stringMatching(/^error: there is no tool "fixture__secret"/),
    ]);
    // Both acting roles have the server's tools by default; the planner none.
    expect(offeredTools(requests.find((b) => schemaOf(b) === 'pge_evaluation'))).toEqual([
      'fixture__fail',
      'fixture__shout',
    ]);
    expect(requests.find((b) => schemaOf(b) === 'pge_plan').tools).toBeUndefined();
    const round = log.find((e) => e.type === 'model.call.completed' && e.payload.outcome === 'tools');
    expect(round?.type === 'model.call.completed' && round.payload.toolCalls).toEqual([
      expect.objectContaining({ name: 'fixture__shout', ok: true, excerpt: 'HELLO' }),
      expect.objectContaining({ name: 'fixture__fail', ok: false }),
      expect.objectContaining({ name: 'fixture__secret', ok: false }),
    ]);
    expect(log.at(-1)?.type).toBe('run.completed');
  }, 30_000);

  it('reaches a server over streamable HTTP, for the role it is given to only', async () => {
    const http = await startMcpHttp();
    try {
      caller = { schema: 'pge_evaluation', calls: [{ name: 'web__shout', arguments: { text: 'look' } }] };
      const { requests } = await run({ mcpServers: { web: { url: http.url, roles: ['evaluator'] } } });
      const evaluations = requests.filter((b) => schemaOf(b) === 'pge_evaluation');
      expect(offeredTools(evaluations[0])).toEqual(['web__fail', 'web__secret', 'web__shout']);
      expect(toolAnswers(evaluations[1])[0].content).toBe('LOOK');
      expect(requests.filter((b) => schemaOf(b) === 'pge_work').every((b) => b.tools === undefined)).toBe(
        true,
      );
    } finally {
      await http.close();
    }
  }, 30_000);
});
