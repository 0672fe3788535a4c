import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { PgeOptions } from '../../src/api/options.js';
import { PlannerGeneratorEvaluator } from '../../src/api/planner-generator-evaluator.js';
import { readLogFile } from '../../src/persistence/index.js';
import type { RunEvent } from '../../src/schemas/index.js';
import { type FakeOpenAI, type FakeStep, startFakeOpenAI } from '../support/fake-openai-server.js';
import {
  answers,
  asksForTools,
  offeredTools,
  schemaOf,
  toolAnswers,
} from '../support/scripted-deployment.js';

/**
 * Tools through the real openai SDK: a scripted OpenAI-compatible server answers the generator's
 * work call with function calls, pge runs them in the run's workspace and sends back what they
 * answered, and the model then gives its structured answer. The evaluator reads the files.
 */

let dir: string;
let outside: string;
let openai: FakeOpenAI;
// biome-ignore lint/suspicious/noExplicitAny: request bodies as the SDK sent them.
type Body = any;

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'pge-tools-'));
  outside = mkdtempSync(join(tmpdir(), 'pge-tools-outside-'));
  openai = await startFakeOpenAI();
  openai.script((body: Body): FakeStep => {
    const schema = schemaOf(body) ?? '';
    if (schema === 'pge_work' && toolAnswers(body).length === 0) {
      // First round: write a file, and try to write outside the workspace.
      return asksForTools(
        [
          { name: 'write_file', arguments: { path: 'src/hello.py', content: 'print("hello")\n' } },
          {
            name: 'write_file',
            arguments: { path: `../../../${basename(outside)}/escaped.txt`, content: 'x' },
          },
        ],
        1,
      );
    }
    if (schema === 'pge_evaluation' && toolAnswers(body).length === 0) {
      return asksForTools([{ name: 'read_file', arguments: { path: 'src/hello.py' } }], 3);
    }
    const content =
      schema === 'pge_work'
        ? { output: 'see hello.py', notes: 'a secret of the generator', selfAssessment: [] }
        : answers(9, 1)[schema];
    return content ? { content } : { status: 400, error: { message: 'unexpected schema' } };
  });
});
afterEach(async () => {
  await openai.close();
  rmSync(dir, { recursive: true, force: true });
  rmSync(outside, { recursive: true, force: true });
});

/** The harness on the scripted server, in this test's working directory. */
function harness(options: PgeOptions): PlannerGeneratorEvaluator {
  return new PlannerGeneratorEvaluator({
    modelName: 'test-model',
    baseURL: openai.url,
    apiKey: 'sk-test-tools',
    workingDirectory: dir,
    maxRetries: 0,
    ...options,
  });
}

describe('workspace tools', () => {
  it('writes the files the generator asks for in the run workspace, refuses a path out of it, logs each call, and lets the evaluator read them', async () => {
    const events: RunEvent[] = [];
    const pge = harness({ onEvent: (e) => events.push(e) });
    const result = await pge.run('Write hello world in Python');
    await pge.close();
    expect(result).toBeTruthy();
    const runId = events[0]!.runId;
    const workspace = join(dir, 'workspaces', runId);
    expect(readFileSync(join(workspace, 'src', 'hello.py'), 'utf8')).toBe('print("hello")\n');
    expect(existsSync(join(outside, 'escaped.txt'))).toBe(false);

    // The model read what each tool answered, and the refusal of the path out of the workspace.
    const requests = openai.completions().map((r) => r.body as Body);
    const works = requests.filter((b) => schemaOf(b) === 'pge_work');
    expect(works).toHaveLength(2);
    expect(offeredTools(works[0])).toEqual(['list_files', 'read_file', 'write_file']);
    // A contract is proposed, not worked: the generator reads then, and writes in its work.
    const contracts = requests.filter((b) => schemaOf(b) === 'pge_contract');
    expect(contracts.map(offeredTools)).toEqual([['list_files', 'read_file']]);
    expect(toolAnswers(works[1]).map((m: Body) => [m.tool_call_id, m.content])).toEqual([
      ['call_1', 'wrote 15 bytes to src/hello.py'],
      ['call_2', expect.stringMatching(/^error: .* is outside the workspace$/)],
    ]);
    // The evaluator reads, never writes, and sees the files, not the generator's notes.
    const evaluations = requests.filter((b) => schemaOf(b) === 'pge_evaluation');
    expect(offeredTools(evaluations[0])).toEqual(['list_files', 'read_file']);
    expect(JSON.stringify(evaluations[0].messages)).toContain('- src/hello.py');
    expect(toolAnswers(evaluations[1])[0].content).toBe('print("hello")\n');
    for (const evaluation of evaluations)
      expect(JSON.stringify(evaluation)).not.toContain('a secret of the generator');
    // The planner has no tools.
    expect(requests.find((b) => schemaOf(b) === 'pge_plan').tools).toBeUndefined();

    // Each round is a model call in the log, with the tool calls it made; tokens count every round.
    const log = await readLogFile(join(dir, `pge_shared_state_${runId}.md`));
    const calls = log.flatMap((e) => (e.type === 'model.call.completed' ? [e.payload] : []));
    const workCalls = calls.filter((c) => c.phase === 'work');
    expect(workCalls.map((c) => c.outcome)).toEqual(['tools', 'valid']);
    expect(workCalls[0]!.toolCalls).toEqual([
      expect.objectContaining({ name: 'write_file', ok: true, excerpt: 'wrote 15 bytes to src/hello.py' }),
      expect.objectContaining({ name: 'write_file', ok: false }),
    ]);
    expect(calls).toHaveLength(requests.length);
    const completed = log.at(-1)!;
    expect(completed.type).toBe('run.completed');
  });

  it('offers no tool with tools: false, and writes nothing', async () => {
    const pge = harness({ maxRepairs: 0, tools: false });
    await pge.run('Write hello world in Python');
    await pge.close();
    const requests = openai.completions().map((r) => r.body as Body);
    expect(requests.every((b) => b.tools === undefined)).toBe(true);
    expect(existsSync(join(dir, 'workspaces'))).toBe(false);
  });

  it("replaces a role's system prompt with the one given, keeping the schema it must answer in", async () => {
    const pge = harness({ tools: false, generatorSystemPrompt: 'You are a terse senior engineer.' });
    await pge.run('Write hello world in Python');
    await pge.close();
    const system = (schema: string): string => {
      const request = openai.completions().find((r) => schemaOf(r.body) === schema);
      return (request?.body as Body)?.messages?.[0]?.content ?? `no ${schema} request`;
    };
    expect(system('pge_work')).toBe(
      'You are a terse senior engineer.\nAnswer with one JSON object that follows the schema pge_work.',
    );
    expect(system('pge_contract')).toMatch(/^You are a terse senior engineer\./);
    expect(system('pge_plan')).toMatch(/^You are the Planner of a Planner-Generator-Evaluator harness\./);
    expect(system('pge_contract_review')).toMatch(/^You are the Evaluator/);
  });

  it.each([
    [true, 'shows the evaluator the images the work left in the workspace, as image parts of its request'],
    [false, 'shows no image with images: false'],
  ])('%s: %s', async (images) => {
    // A 1×1 PNG, as a renderer would leave it: the scripted generator's second round drops it in.
    const png = Buffer.from(
      'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==',
      'base64',
    );
    openai.script((body: Body): FakeStep => {
      const schema = schemaOf(body) ?? '';
      if (schema === 'pge_work' && toolAnswers(body).length === 0) {
        return asksForTools([{ name: 'write_file', arguments: { path: 'scene.txt', content: 'a' } }]);
      }
      if (schema === 'pge_work') {
        const [runDir] = readdirSync(join(dir, 'workspaces')).filter((name) => !name.startsWith('.'));
        writeFileSync(join(dir, 'workspaces', runDir!, 'render.png'), png);
      }
      return { content: answers(9, 1)[schema] ?? {} };
    });
    const pge = harness({ images });
    await pge.run('Draw a scene');
    await pge.close();
    const evaluation = openai.completions().find((r) => schemaOf(r.body) === 'pge_evaluation')?.body as Body;
    const parts = evaluation.messages.flatMap((m: Body) => (Array.isArray(m.content) ? m.content : []));
    const urls = parts.filter((p: Body) => p.type === 'image_url').map((p: Body) => p.image_url.url);
    expect(urls).toEqual(images ? [`data:image/png;base64,${png.toString('base64')}`] : []);
    expect(JSON.stringify(evaluation.messages)).toContain(
      images ? 'The images attached are, in order: render.png' : '- render.png',
    );
  });
});
