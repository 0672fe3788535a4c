import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { readLogFile } from '../../src/persistence/index.js';
import type { RunEventOf } from '../../src/schemas/index.js';
import {
  type FakeOpenAI,
  type FakeStep,
  type RecordedRequest,
  startFakeOpenAI,
} from '../support/fake-openai-server.js';
import { startPge } from '../support/processes.js';
import { CONTRACT, evaluation, REVIEW, WORK } from './run-cli.js';

/**
 * A real crash: `pge run` (embedded, talking to a scripted OpenAI-compatible server over HTTP) is
 * killed with SIGKILL while step 2's work call is in flight; `pge resume <log>` finishes the run
 * in the same file, and the server sees only that one call again.
 */

const PLAN = {
  scope: 'A two-part note',
  steps: [1, 2].map((n) => ({
    id: `part${n}`,
    title: `Write part ${n}`,
    description: `Write part ${n} of the note`,
    expectedOutput: `Part ${n}`,
    dependsOn: n === 2 ? ['part1'] : [],
  })),
  criteria: [
    { name: 'accuracy', weight: 'high', description: 'Right', threshold: 7 },
    { name: 'imagery', weight: 'standard', description: 'Vivid', threshold: null },
  ],
};

/** The step a request is about, from the prompt the SDK sent. */
const stepOf = (body: { messages: { content: string }[] }) =>
  JSON.stringify(body.messages).includes('Write part 2 of the note') ? 2 : 1;

let server: FakeOpenAI;
let tmp: string;
/** Step 2's work call hangs (for a minute) until the test lets it answer. */
let hang = true;

beforeAll(async () => {
  server = await startFakeOpenAI();
  // biome-ignore lint/suspicious/noExplicitAny: the request body as the SDK sent it.
  server.script((body: any): FakeStep => {
    const schema = body?.response_format?.json_schema?.name;
    const answers: Record<string, object> = {
      pge_plan: PLAN,
      pge_contract: CONTRACT,
      pge_contract_review: REVIEW,
      pge_work: { ...WORK, output: `the text of part ${stepOf(body)}` },
      pge_evaluation: evaluation(9),
    };
    const content = answers[schema];
    if (!content) return { status: 400, error: { message: `unexpected schema ${schema}` } };
    return hang && schema === 'pge_work' && stepOf(body) === 2 ? { content, delayMs: 60_000 } : { content };
  });
  tmp = mkdtempSync(join(tmpdir(), 'pge-resume-cli-'));
});

afterAll(async () => {
  await server?.close();
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

/** Waits until `check` holds, polling; fails with `what` after `timeoutMs`. */
async function until(check: () => boolean, what: string, timeoutMs = 20_000): Promise<void> {
  const started = Date.now();
  while (!check()) {
    if (Date.now() - started > timeoutMs) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

const sameCall = (a: RecordedRequest, b: RecordedRequest) =>
  JSON.stringify(a.body.messages) === JSON.stringify(b.body.messages) &&
  a.body.response_format?.json_schema?.name === b.body.response_format?.json_schema?.name;

it('a pge run killed mid-call is finished by pge resume in the same log, repeating only the call in flight', async () => {
  const log = join(tmp, 'note.md');
  const env = { OPENAI_API_KEY: 'sk-test-resume', OPENAI_BASE_URL: server.url };
  const run = startPge(['run', 'Write a two-part note', '--log', log, '--model', 'note-model'], env, tmp);
  // Killed once step 2's work call has reached the model and its request is in the log.
  const workOfStep2 = () =>
    server
      .completions()
      .find((r) => r.body.response_format?.json_schema?.name === 'pge_work' && stepOf(r.body) === 2);
  await until(() => workOfStep2() !== undefined, "step 2's work call");
  await until(
    () =>
      existsSync(log) && (readFileSync(log, 'utf8').match(/type=step\.work\.requested/g)?.length ?? 0) === 2,
    "step 2's work request in the log",
  );
  run.child.kill('SIGKILL');
  expect(await run.exited()).toBeNull();
  const crashed = await readLogFile(log);
  expect(crashed.at(-1)?.type).toBe('step.work.requested');
  const inFlight = crashed.at(-1)!;
  const before = server.completions().length;
  hang = false;

  // No --model: the log names the models; the endpoint and key come from the environment as before.
  const resume = startPge(['resume', log], env, tmp);
  expect(await resume.exited(), resume.stderr()).toBe(0);
  expect(resume.stdout()).toContain('the text of part 2');
  expect(resume.stdout()).toContain('2/2 steps passed');
  expect(resume.stderr()).toMatch(/run resumed by .* after event \d+ .*asking again 1 request in flight/);

  // One log, gap-free (the reader checks seq 1..n), the crashed run's events first, then the rest.
  const events = await readLogFile(log);
  expect(events.slice(0, crashed.length)).toEqual(crashed);
  expect(events.at(-1)?.type).toBe('run.completed');
  expect((events.at(-1) as RunEventOf<'run.completed'>).payload.passed).toBe(true);
  const resumes = events.filter((e): e is RunEventOf<'run.resumed'> => e.type === 'run.resumed');
  expect(resumes).toHaveLength(1);
  expect(resumes[0]!.seq).toBe(crashed.length + 1);
  expect(resumes[0]!.payload).toMatchObject({
    fromSeq: crashed.length,
    repeated: [inFlight.id],
    discardedBytes: 0,
  });
  expect(readFileSync(log, 'utf8')).toContain('### [RUN RESUMED]');

  // The model saw the call in flight twice and nothing else again: 9 calls for the run, plus one.
  const calls = server.completions();
  expect(calls).toHaveLength(10);
  const afterCrash = calls.slice(before);
  expect(afterCrash).toHaveLength(2);
  expect(sameCall(afterCrash[0]!, workOfStep2()!)).toBe(true);
  const answeredBefore = calls.slice(0, before).filter((c) => c !== workOfStep2());
  for (const call of afterCrash)
    expect(answeredBefore.some((earlier) => sameCall(earlier, call))).toBe(false);
  expect(events.filter((e) => e.type === 'model.call.completed')).toHaveLength(9);

  // A run that has ended cannot be resumed: exit 2, and the log is left as it was.
  const text = readFileSync(log, 'utf8');
  const again = startPge(['resume', log], env, tmp);
  expect(await again.exited()).toBe(2);
  expect(again.stderr()).toMatch(/has already ended \(run\.completed at seq \d+\)/);
  expect(readFileSync(log, 'utf8')).toBe(text);
}, 60_000);
