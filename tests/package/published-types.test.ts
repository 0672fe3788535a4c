import { execFile } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

/**
 * The package as a consumer gets it: built with the build's own settings into a temporary folder,
 * installed there as `node_modules/pge` with only its runtime dependencies beside it, and used by
 * a small TypeScript file compiled with `types: []`, so without Node's types (`@types/node`), and
 * with `skipLibCheck` off, so that every published declaration is checked. The consumer has the
 * DOM library: xstate's and zod's own declarations name `AbortSignal` and `URL`, which a project
 * gets from it or from Node's types.
 */

const ROOT = join(import.meta.dirname, '..', '..');
const TSC = join(ROOT, 'node_modules', '.bin', 'tsc');
const run = promisify(execFile);
const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as {
  dependencies: Record<string, string>;
};

let dir: string;
let consumer: string;

/** Compiles the consumer's `files`; resolves with tsc's output, '' when it compiled. */
async function typeCheck(files: Record<string, string>): Promise<string> {
  for (const [name, text] of Object.entries(files)) writeFileSync(join(consumer, name), text);
  const tsconfig = {
    compilerOptions: {
      target: 'ES2022',
      module: 'NodeNext',
      moduleResolution: 'NodeNext',
      lib: ['ES2023', 'DOM'],
      types: [],
      strict: true,
      skipLibCheck: false,
      noEmit: true,
    },
    files: Object.keys(files),
  };
  writeFileSync(join(consumer, 'tsconfig.json'), JSON.stringify(tsconfig));
  try {
    await run(TSC, ['-p', consumer], { cwd: consumer });
    return '';
  } catch (error) {
    return String((error as { stdout?: string }).stdout ?? error);
  }
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'pge-types-'));
  const installed = join(dir, 'consumer', 'node_modules', 'pge');
  consumer = join(dir, 'consumer');
  await run(TSC, ['-p', join(ROOT, 'tsconfig.build.json'), '--outDir', join(installed, 'dist')], {
    cwd: ROOT,
  });
  cpSync(join(ROOT, 'package.json'), join(installed, 'package.json'));
  // The runtime dependencies only: no @types package is installed where the consumer could find it.
  for (const name of Object.keys(pkg.dependencies)) {
    const link = join(consumer, 'node_modules', name);
    mkdirSync(dirname(link), { recursive: true });
    symlinkSync(join(ROOT, 'node_modules', name), link);
  }
}, 120_000);
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('the published types', () => {
  it('compile in a project without Node types, and type run() by outputType', async () => {
    const problems = await typeCheck({
      'consumer.ts': `
import { type HarnessResult, PlanDocument, type PlanDocumentInput, PlannerGeneratorEvaluator, type RunEvent, readLog } from 'pge';
import { type Script, ScriptedModel } from 'pge/testing';

const script: Script = { plan: [{ json: { scope: 'x', steps: [], criteria: [] } }] };
const model = new ScriptedModel(script);
export async function main(): Promise<string> {
  const pge = new PlannerGeneratorEvaluator({ plannerAgent: model, outputType: 'final', onEvent: (e: RunEvent) => e.seq });
  const artifact: string = await pge.run('Write a haiku');
  const result: HarnessResult | null = pge.lastResult;
  const events: RunEvent[] = readLog('');
  return artifact + String(result?.passed) + events.length;
}
export async function planned(task: string): Promise<number> {
  const pge = new PlannerGeneratorEvaluator({ plannerAgent: model });
  const doc: PlanDocument = await pge.plan(task);
  const edited: PlanDocumentInput = { version: 1, steps: [{ id: 'a', title: 'A', description: 'a', expectedOutput: 'a' }], criteria: [{ name: 'accuracy' }] };
  await new PlannerGeneratorEvaluator({ plan: edited }).run(doc.task ?? task);
  return PlanDocument.parse(doc).steps.length;
}
`,
    });
    expect(problems).toBe('');
  });

  it('keep the test doubles out of the main entry', async () => {
    const problems = await typeCheck({
      'doubles.ts': `
// @ts-expect-error: test doubles are exported by pge/testing only.
import { ScriptedModel } from 'pge';
export const model = ScriptedModel;
`,
    });
    expect(problems).toBe('');
    // And at run time, through the package's exports map, as Node resolves it for a consumer.
    const script = `const [main, testing] = await Promise.all([import('pge'), import('pge/testing')]);
      console.log(JSON.stringify(['ScriptedModel' in main, typeof testing.ScriptedModel, typeof main.PlannerGeneratorEvaluator]));`;
    const { stdout } = await run(process.execPath, ['--input-type=module', '-e', script], { cwd: consumer });
    expect(JSON.parse(stdout)).toEqual([false, 'function', 'function']);
  });

  it('are judged by a check that fails on a Node global and on a wrong output type', async () => {
    const problems = await typeCheck({
      'wrong.ts': `
import { PlannerGeneratorEvaluator } from 'pge';
export const bytes: Buffer | undefined = undefined;
export async function main(): Promise<string> {
  return new PlannerGeneratorEvaluator({ outputType: 'dict' }).run('Write a haiku');
}
`,
    });
    expect(problems).toMatch(/wrong\.ts\(3,\d+\): error TS\d+: Cannot find name 'Buffer'/);
    expect(problems).toMatch(/wrong\.ts\(5,\d+\): error TS2322/);
  });
});
