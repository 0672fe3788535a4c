import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, afterEach, beforeAll, beforeEach } from 'vitest';
import { watchOutput } from '../support/diagnostics.js';
import { type FakeOpenAI, type FakeStep, startFakeOpenAI } from '../support/fake-openai-server.js';

/**
 * The CLI as a user meets it: `node bin/pge.js …` in a child process (from dist, which the global
 * setup builds), with a fake OpenAI server's answers for a one-step haiku task.
 */

export const ROOT = resolve(import.meta.dirname, '../..');
const BIN = join(ROOT, 'bin/pge.js');
/** The API key every run gets unless its test says otherwise; it must never be printed. */
export const SECRET = 'sk-test-SECRET-abcdefghijklmnopqrstuvwxyz';

/** How a run of the CLI ended. */
export interface Outcome {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Where and with what a run of the CLI starts. */
export interface SpawnOptions {
  env?: Record<string, string>;
  cwd: string;
  /** Kills the child after this long: for a test of something that used to hang. */
  killAfterMs?: number;
  /** Called with the child and its stderr so far, each time stderr grows. */
  onStderr?: (child: ReturnType<typeof spawn>, stderr: string) => void;
}

/** Runs the CLI; the environment is built from scratch so the developer's never leaks in. */
export function runCli(args: string[], options: SpawnOptions): Promise<Outcome> {
  return new Promise((resolvePromise, reject) => {
    const child = spawn(process.execPath, [BIN, ...args], {
      cwd: options.cwd,
      env: { PATH: process.env.PATH ?? '', OPENAI_API_KEY: SECRET, ...options.env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    const watch = watchOutput(`pge ${args.join(' ')} (pid ${child.pid})`);
    child.stdout.on('data', (chunk: Buffer) => {
      stdout += chunk.toString();
    });
    child.stderr.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
      watch(chunk.toString());
      options.onStderr?.(child, stderr);
    });
    const timer = options.killAfterMs ? setTimeout(() => child.kill('SIGKILL'), options.killAfterMs) : null;
    child.on('error', reject);
    child.on('close', (code) => {
      if (timer) clearTimeout(timer);
      resolvePromise({ code, stdout, stderr });
    });
  });
}

export const PLAN = {
  scope: 'A haiku about rain',
  steps: [
    {
      id: 'write',
      title: 'Write the haiku',
      description: 'Write it',
      expectedOutput: 'A haiku',
      dependsOn: [],
    },
  ],
  criteria: [
    { name: 'accuracy', weight: 'high', description: 'Follows 5-7-5', threshold: null },
    { name: 'imagery', weight: 'standard', description: 'Vivid', threshold: 7 },
  ],
};
export const CONTRACT = {
  title: 'Haiku',
  acceptanceCriteria: ['Three lines, 5-7-5'],
  expectedOutput: 'A haiku',
  verificationMethod: 'Count syllables',
};
export const REVIEW = { status: 'approved', amendments: [], rationale: 'Testable.' };
export const ARTIFACT = 'Soft rain on the roof / a kettle hums in the dark / the cat counts the drops';
export const WORK = {
  output: ARTIFACT,
  notes: 'first try',
  selfAssessment: [{ criterion: 'accuracy', score: 9, comment: 'ok' }],
};
/** An evaluation that gives every criterion of `PLAN` the same score. */
export const evaluation = (score: number) => ({
  scores: [
    { criterion: 'accuracy', score, evidence: 'counted' },
    { criterion: 'imagery', score, evidence: 'kettle' },
  ],
  findings: [],
  actionableFeedback: score < 7 ? ['Make it sharper'] : [],
  summary: 'judged',
});

/** Answers each phase by the name of the schema it asks for. */
export function scripted(score = 9) {
  // biome-ignore lint/suspicious/noExplicitAny: the request body as the client sent it.
  return (body: any): FakeStep => {
    const answers: Record<string, object> = {
      pge_plan: PLAN,
      pge_contract: CONTRACT,
      pge_contract_review: REVIEW,
      pge_work: WORK,
      pge_evaluation: evaluation(score),
    };
    const answer = answers[body?.response_format?.json_schema?.name];
    return answer ? { content: answer } : { status: 400, error: { message: 'unexpected schema' } };
  };
}

/** The logs a run left in a directory. */
export const logsIn = (dir: string) => readdirSync(dir).filter((f) => /^pge_shared_state_.*\.md$/.test(f));

/** For a test file: a fake OpenAI server started once, reset and given a fresh scratch directory per test. */
export function fakeServerAndScratch(prefix: string): { server: FakeOpenAI; tmp: string } {
  const context = {} as { server: FakeOpenAI; tmp: string };
  beforeAll(async () => {
    context.server = await startFakeOpenAI();
  });
  afterAll(async () => {
    await context.server?.close();
  });
  beforeEach(() => {
    context.tmp = mkdtempSync(join(tmpdir(), prefix));
    context.server.reset();
  });
  afterEach(() => {
    rmSync(context.tmp, { recursive: true, force: true });
  });
  return context;
}
