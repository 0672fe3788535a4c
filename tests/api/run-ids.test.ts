import { existsSync, mkdtempSync, readFileSync, renameSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { PlannerGeneratorEvaluator } from '../../src/api/planner-generator-evaluator.js';
import { ConfigurationError } from '../../src/errors.js';
import { ScriptedModel } from '../../src/testing.js';
import { passingScript } from '../support/scripts.js';

/**
 * A run id is never reused by the embedded runtime: ids are random, and should two ever meet, the
 * second run is refused before any model call, by the log its id names or, with the log gone, by
 * the coordinator that ran the first. Here every id is the same, to meet that case for certain.
 */

vi.mock('../../src/runtime/run-id.js', async (importOriginal) => ({
  ...(await importOriginal<typeof import('../../src/runtime/run-id.js')>()),
  newRunId: () => 'pge-always-the-same',
}));

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'pge-run-ids-'));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

function harness() {
  const model = new ScriptedModel({ ...passingScript(1) });
  const pge = new PlannerGeneratorEvaluator({
    plannerAgent: model,
    generatorAgent: model,
    evaluatorAgent: model,
    workingDirectory: dir,
  });
  return { model, pge };
}

describe('a run id used before', () => {
  it('is refused when the log of that run exists, and the log is left as it was', async () => {
    const first = harness();
    await first.pge.run('first');
    await first.pge.close();
    const log = join(dir, 'pge_shared_state_pge-always-the-same.md');
    const written = readFileSync(log, 'utf8');

    const second = harness();
    const refused = second.pge.run('second');
    await expect(refused).rejects.toBeInstanceOf(ConfigurationError);
    await expect(refused).rejects.toThrow(
      /the log of run pge-always-the-same .* already holds run pge-always-the-same/,
    );
    await second.pge.close();
    expect(second.model.requests).toHaveLength(0);
    expect(readFileSync(log, 'utf8')).toBe(written);
  });

  it('is refused by the coordinator that ran it, even when its log was moved away', async () => {
    const { model, pge } = harness();
    await pge.run('first');
    const log = join(dir, 'pge_shared_state_pge-always-the-same.md');
    renameSync(log, join(dir, 'moved.md'));
    const calls = model.requests.length;
    await expect(pge.run('second')).rejects.toThrow(
      /run id pge-always-the-same is taken: a run of that id has been started already/,
    );
    await pge.close();
    expect(model.requests).toHaveLength(calls);
    expect(existsSync(log)).toBe(false);
  });
});
