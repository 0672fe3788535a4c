import {
  chmodSync,
  existsSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { PgeOptions } from '../../src/api/options.js';
import { PlannerGeneratorEvaluator } from '../../src/api/planner-generator-evaluator.js';
import { ConfigurationError } from '../../src/errors.js';
import { ScriptedModel } from '../../src/testing.js';
import { passingScript } from '../support/scripts.js';

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'pge-opts-'));
});
afterEach(() => {
  chmodSync(dir, 0o755);
  rmSync(dir, { recursive: true, force: true });
});

const agents = () => {
  const m = new ScriptedModel(passingScript(1));
  return { plannerAgent: m, generatorAgent: m, evaluatorAgent: m };
};

/** A harness whose every role is one scripted model, returned too, to count its calls. */
function harness(options: PgeOptions = {}) {
  const model = new ScriptedModel(passingScript(1));
  const pge = new PlannerGeneratorEvaluator({
    plannerAgent: model,
    generatorAgent: model,
    evaluatorAgent: model,
    workingDirectory: dir,
    ...options,
  });
  return { model, pge };
}

function rejects(options: Record<string, unknown>, message: RegExp) {
  expect(
    () => new PlannerGeneratorEvaluator({ ...agents(), workingDirectory: dir, ...options } as PgeOptions),
  ).toThrow(message);
  try {
    new PlannerGeneratorEvaluator({ ...agents(), workingDirectory: dir, ...options } as PgeOptions);
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigurationError);
  }
}

describe('bad options get a clear error and nothing half-done', () => {
  it("rejects the reference's conditions with its words", () => {
    rejects({ maxSteps: 0 }, /maxSteps must be >= 1, got 0/);
    rejects({ maxRetriesPerStep: -1 }, /maxRetriesPerStep must be >= 0, got -1/);
    rejects({ modelName: '' }, /modelName must be provided/);
    rejects({ modelName: '   ' }, /modelName must be provided/);
  });

  it('rejects unknown option names instead of ignoring them', () => {
    rejects({ maxRetries: 3, score_threshold: 0.8 }, /unknown option: score_threshold/);
    rejects({ sharedFilePath: 'x', generatorTools: [] }, /unknown options: sharedFilePath, generatorTools/);
  });

  it('rejects budgets the run could not carry: fractional tokens or milliseconds', () => {
    rejects({ maxTokens: 1000.5 }, /maxTokens must be a whole number/);
    rejects({ maxDurationMs: 0.5 }, /maxDurationMs must be a whole number/);
    rejects({ maxCostUsd: 0 }, /maxCostUsd must be > 0/);
  });

  it("rejects a call or gate deadline past Node's longest timer, which would fire at once", () => {
    const tooLong = 2 ** 31;
    rejects({ callTimeoutMs: tooLong }, /callTimeoutMs must be at most 2147483647 \(24\.8 days\)/);
    rejects({ approvalTimeoutMs: tooLong }, /approvalTimeoutMs must be at most 2147483647 \(24\.8 days\)/);
    expect(() => harness({ callTimeoutMs: tooLong - 1, approvalTimeoutMs: tooLong - 1 })).not.toThrow();
  });

  it('keeps the API key out of the public options', () => {
    const pge = new PlannerGeneratorEvaluator({
      ...agents(),
      workingDirectory: dir,
      apiKey: 'sk-test-SECRET-options-0123456789',
    });
    expect(JSON.stringify(pge.options)).not.toContain('SECRET');
    expect(pge.options.apiKey).toBe('(set)');
  });

  it('rejects thresholds outside 1-10', () => {
    rejects({ defaultThresholds: { accuracy: 11 } }, /between 1 and 10/);
    rejects({ defaultThresholds: { accuracy: 0 } }, /between 1 and 10/);
    rejects({ fallbackThreshold: 0.5 }, /between 1 and 10/);
  });

  it('rejects a bad output type, policy or agent', () => {
    rejects({ outputType: 'basemodel' }, /outputType/);
    rejects({ onStepExhausted: 'retry' }, /onStepExhausted/);
    rejects({ generatorAgent: { run: () => 'x' } }, /must be a Model/);
  });

  it('rejects an unwritable working directory', () => {
    writeFileSync(join(dir, 'file-not-dir'), 'x');
    rejects({ workingDirectory: join(dir, 'file-not-dir') }, /not a writable directory/);
    rejects({ workingDirectory: join(dir, 'file-not-dir', 'sub') }, /not a writable directory/);
    // A device is no directory, even to root, who may write anywhere else.
    rejects({ workingDirectory: '/dev/null/pge-working-dir' }, /not a writable directory/);
    if (process.getuid?.() !== 0) {
      chmodSync(dir, 0o500);
      rejects({ workingDirectory: join(dir, 'locked') }, /not a writable directory/);
    }
  });

  it('refuses maxCostUsd when a model that would spend it has no price', () => {
    const key = { apiKey: 'sk-test', workingDirectory: dir };
    const refuse = (options: PgeOptions, message: RegExp) =>
      expect(() => new PlannerGeneratorEvaluator({ ...key, ...options })).toThrow(message);
    refuse({ modelName: 'llama3.1', maxCostUsd: 1 }, /no price is known for model llama3\.1/);
    refuse(
      { modelName: 'gpt-4.1', evaluatorModelName: 'qwen', generatorModelName: 'mistral', maxCostUsd: 1 },
      /no price is known for models mistral, qwen/,
    );
    // A price given, a known model, or a role with its own agent (it reports its own cost).
    const accepted: PgeOptions[] = [
      {
        modelName: 'llama3.1',
        maxCostUsd: 1,
        prices: { 'llama3.1': { inputPerMTok: 0.2, outputPerMTok: 0.6 } },
      },
      { modelName: 'gpt-4.1-mini-2025-04-14', maxCostUsd: 1 },
      { ...agents(), modelName: 'llama3.1', maxCostUsd: 1 },
      { modelName: 'llama3.1' },
    ];
    for (const options of accepted)
      expect(() => new PlannerGeneratorEvaluator({ ...key, ...options })).not.toThrow();
  });

  it('asks for a base URL with its scheme', () => {
    rejects(
      { baseURL: '127.0.0.1:8000' },
      /baseURL must be an http:\/\/ or https:\/\/ URL, such as http:\/\/127\.0\.0\.1:8000/,
    );
    rejects({ baseURL: 'localhost:8000/v1' }, /such as http:\/\/localhost:8000\/v1/);
    rejects({ baseURL: 'ftp://models.example/v1' }, /such as http:\/\/127\.0\.0\.1:8000\/v1; got "ftp/);
  });

  it('refuses a run whose working directory went away, before any model call', async () => {
    const workingDirectory = join(dir, 'gone');
    const { model, pge } = harness({ workingDirectory });
    rmSync(workingDirectory, { recursive: true });
    await expect(pge.run('a task')).rejects.toThrow(/the directory of the log .* does not exist/);
    expect(model.requests).toHaveLength(0);
    await pge.close();
  });

  it('rejects an empty task before doing anything', async () => {
    const pge = new PlannerGeneratorEvaluator({ ...agents(), workingDirectory: dir });
    await expect(pge.run('')).rejects.toThrow(/Task must be a non-empty string/);
    await expect(pge.run('   ')).rejects.toThrow(ConfigurationError);
    await expect(pge.batchedRun(['ok', ''])).rejects.toThrow(/non-empty/);
    await pge.close();
    expect(readdirSync(dir)).toEqual([]);
  });

  it('refuses a task over maxTaskBytes (256 KiB unless set), counted in UTF-8, or holding a NUL, before doing anything', async () => {
    const { model, pge } = harness();
    expect(pge.options.maxTaskBytes).toBe(256 * 1024);
    await expect(pge.run('x'.repeat(256 * 1024 + 1))).rejects.toThrow(
      /the task is 262145 bytes, more than maxTaskBytes allows \(262144\)/,
    );
    // 'é' is two bytes in UTF-8: fewer characters than the limit, more bytes.
    await expect(pge.run('é'.repeat(128 * 1024 + 1))).rejects.toThrow(/the task is 262146 bytes/);
    await expect(pge.run('a task\0with a NUL')).rejects.toThrow(/NUL character \(at character 6\)/);
    await expect(pge.run('a task\0with a NUL')).rejects.toBeInstanceOf(ConfigurationError);
    await expect(pge.batchedRun(['fine', 'binary\0'])).rejects.toThrow(/NUL/);
    await pge.close();
    expect(model.requests).toHaveLength(0);
    expect(readdirSync(dir)).toEqual([]);
  });

  it('takes a task of exactly maxTaskBytes and refuses one byte more', async () => {
    const { model, pge } = harness({ maxTaskBytes: 64 });
    await expect(pge.run('y'.repeat(65))).rejects.toThrow(/65 bytes, more than maxTaskBytes allows \(64\)/);
    expect(model.requests).toHaveLength(0);
    await pge.run('y'.repeat(64));
    await pge.close();
    expect(pge.lastResult?.passed).toBe(true);
  });

  it('rejects a task limit or stream limits that cannot be kept', () => {
    rejects({ maxTaskBytes: 0 }, /maxTaskBytes must be > 0/);
    rejects({ maxTaskBytes: 1.5 }, /maxTaskBytes must be a whole number of bytes/);
    rejects({ streamMaxAgeMs: 60_000 }, /streamMaxAgeMs must be 0 \(no limit\) or at least 120000/);
    rejects({ streamMaxBytes: -1 }, /streamMaxBytes must be >= 0 \(0: no limit\), got -1/);
  });

  it('never truncates a sharedStatePath that already holds another run, or anything', async () => {
    const path = join(dir, 'state.md');
    const before = '# PGE Harness Shared State\n\n**Run ID**: pge-other-run\n';
    writeFileSync(path, before);
    const pge = new PlannerGeneratorEvaluator({ ...agents(), sharedStatePath: path });
    await expect(pge.run('task')).rejects.toThrow(
      /already holds run pge-other-run; pge never overwrites a file/,
    );
    await pge.close();
    expect(readFileSync(path, 'utf8')).toBe(before);
    // A file that is no log is not called one.
    writeFileSync(path, 'my notes\n');
    const again = new PlannerGeneratorEvaluator({ ...agents(), sharedStatePath: path });
    await expect(again.run('task')).rejects.toThrow(
      `sharedStatePath ${path} already exists; pge never overwrites a file`,
    );
    await again.close();
    expect(readFileSync(path, 'utf8')).toBe('my notes\n');
  });

  it('runs twice on one sharedStatePath only once: the second run refuses instead of overwriting', async () => {
    const path = join(dir, 'state.md');
    const { pge } = harness({ sharedStatePath: path });
    await pge.run('first');
    const first = readFileSync(path, 'utf8');
    await expect(pge.run('second')).rejects.toThrow(ConfigurationError);
    await pge.close();
    expect(readFileSync(path, 'utf8')).toBe(first);
    expect(existsSync(path)).toBe(true);
  });
});
