import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { PgeOptions } from '../../src/api/options.js';
import { PlannerGeneratorEvaluator } from '../../src/api/planner-generator-evaluator.js';
import type { ValidatorContext } from '../../src/index.js';
import { readLogFile } from '../../src/persistence/index.js';
import type { RunEvent, RunEventOf } from '../../src/schemas/index.js';
import { type FakeOpenAI, type FakeStep, startFakeOpenAI } from '../support/fake-openai-server.js';
import { answers, asksForTools, schemaOf, toolAnswers } from '../support/scripted-deployment.js';

/**
 * Validators through the real openai SDK: the scripted generator writes `hello.py` into the run's
 * workspace (a `write_file` tool call), a command validator checks it there, and a failed check
 * fails the attempt before any evaluation is asked for (counted on the model server's wire).
 */

let dir: string;
let openai: FakeOpenAI;
// biome-ignore lint/suspicious/noExplicitAny: request bodies as the SDK sent them.
type Body = any;

/** The scripted generator: attempt 1 writes a hello.py that prints nothing, later attempts one that does. */
function script(body: Body): FakeStep {
  const schema = schemaOf(body) ?? '';
  if (schema === 'pge_work' && toolAnswers(body).length === 0) {
    const retry = body.messages.some((m: Body) => String(m.content).includes('"retry":{'));
    const content = retry ? 'print("hello")\n' : 'pass\n';
    return asksForTools([{ name: 'write_file', arguments: { path: 'hello.py', content } }]);
  }
  const content =
    schema === 'pge_work'
      ? { output: 'see hello.py', notes: 'n', selfAssessment: [] }
      : answers(9, 1)[schema];
  return content ? { content } : { status: 400, error: { message: 'unexpected schema' } };
}

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'pge-validators-'));
  openai = await startFakeOpenAI();
  openai.script(script);
});
afterEach(async () => {
  await openai.close();
  rmSync(dir, { recursive: true, force: true });
});

function harness(options: PgeOptions): PlannerGeneratorEvaluator {
  return new PlannerGeneratorEvaluator({
    modelName: 'test-model',
    baseURL: openai.url,
    apiKey: 'sk-test-validators',
    workingDirectory: dir,
    maxRetries: 0,
    ...options,
  });
}

const requests = (schema: string): Body[] =>
  openai
    .completions()
    .map((r) => r.body as Body)
    .filter((b) => schemaOf(b) === schema);

async function logOf(events: RunEvent[]): Promise<RunEvent[]> {
  return readLogFile(join(dir, `pge_shared_state_${events[0]!.runId}.md`));
}

describe('validators', () => {
  it('a failing command fails the attempt without calling the evaluator; its output is the feedback of the retry', async () => {
    const events: RunEvent[] = [];
    const pge = harness({
      onEvent: (e) => events.push(e),
      validators: ['grep -q print hello.py || { echo "hello.py prints nothing" >&2; exit 3; }'],
    });
    await pge.run('Write hello world in Python');
    await pge.close();

    // Two attempts of work, one evaluation: the attempt the validator failed never reached the evaluator.
    const works = requests('pge_work').filter((b) => toolAnswers(b).length === 0);
    expect(works).toHaveLength(2);
    expect(requests('pge_evaluation')).toHaveLength(1);
    // The retry tells the generator what the validator printed.
    const input = (body: Body) => {
      const text: string = body.messages.find((m: Body) =>
        String(m.content).includes('INPUT (JSON):'),
      ).content;
      return JSON.parse(text.slice(text.indexOf('INPUT (JSON):') + 'INPUT (JSON):'.length));
    };
    expect(input(works[1]).retry.feedback).toEqual([
      'validator "grep -q print hello.py || { echo "hello.py prints nothing" >&2; exit 3; }" failed with exit code 3:\nhello.py prints nothing',
    ]);

    const log = await logOf(events);
    const completed = log.filter(
      (e): e is RunEventOf<'step.work.completed'> => e.type === 'step.work.completed',
    );
    expect(completed.map((e) => e.payload.validation)).toEqual([
      [expect.objectContaining({ passed: false, exitCode: 3, output: 'hello.py prints nothing\n' })],
      [expect.objectContaining({ passed: true, exitCode: 0, output: '' })],
    ]);
    const judged = log.flatMap((e) => (e.type === 'step.attempt.judged' ? [e.payload] : []));
    expect(judged.map((j) => [j.attempt, j.verdict, j.reason])).toEqual([
      [1, 'fail', 'failed_validation'],
      [2, 'pass', 'all_criteria_pass'],
    ]);
    expect(log.at(-1)).toMatchObject({ type: 'run.completed', payload: { passed: true } });
  });

  it('runs a command in the workspace with the output on stdin and the run in its environment, without the API key', async () => {
    const events: RunEvent[] = [];
    const before = process.env.OPENAI_API_KEY;
    process.env.OPENAI_API_KEY = 'sk-must-not-leak';
    try {
      const pge = harness({
        onEvent: (e) => events.push(e),
        validators: [
          'cat > answer.txt; echo "$PGE_RUN_ID $PGE_STEP_ID $PGE_STEP_NUMBER $PGE_ATTEMPT $PGE_WORKSPACE [$OPENAI_API_KEY]" > env.txt; ls',
        ],
      });
      await pge.run('Write hello world in Python');
      await pge.close();
    } finally {
      if (before === undefined) delete process.env.OPENAI_API_KEY;
      else process.env.OPENAI_API_KEY = before;
    }
    const runId = events[0]!.runId;
    const workspace = join(dir, 'workspaces', runId);
    expect(readFileSync(join(workspace, 'answer.txt'), 'utf8')).toBe('see hello.py');
    expect(readFileSync(join(workspace, 'env.txt'), 'utf8')).toBe(`${runId} s1 1 1 ${workspace} []\n`);
    const work = (await logOf(events)).find((e) => e.type === 'step.work.completed');
    expect(work).toMatchObject({
      payload: { validation: [{ passed: true, output: 'answer.txt\nenv.txt\nhello.py\n' }] },
    });
  });

  it('takes validator functions in the API, and shows the evaluator an image a validator rendered', async () => {
    const png = Buffer.from(
      'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==',
      'base64',
    );
    const seen: ValidatorContext[] = [];
    async function renders(context: ValidatorContext) {
      seen.push(context);
      writeFileSync(join(context.workspace, 'render.png'), png);
      return { passed: true, output: 'rendered render.png' };
    }
    const events: RunEvent[] = [];
    const pge = harness({ onEvent: (e) => events.push(e), validators: [renders] });
    await pge.run('Draw a scene');
    await pge.close();
    expect(seen.map((c) => [c.output, c.stepNumber, c.attempt])).toEqual([['see hello.py', 1, 1]]);
    const [evaluation] = requests('pge_evaluation');
    const parts = evaluation.messages.flatMap((m: Body) => (Array.isArray(m.content) ? m.content : []));
    expect(parts.filter((p: Body) => p.type === 'image_url').map((p: Body) => p.image_url.url)).toEqual([
      `data:image/png;base64,${png.toString('base64')}`,
    ]);
    const work = (await logOf(events)).find((e) => e.type === 'step.work.completed');
    expect(work).toMatchObject({
      payload: {
        validation: [{ validator: 'renders', passed: true, exitCode: null, output: 'rendered render.png' }],
      },
    });
  });

  it('refuses an empty command', () => {
    expect(() => harness({ validators: ['  '] })).toThrow(/a validator command must not be empty/);
  });
});
