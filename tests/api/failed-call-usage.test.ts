import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { PlannerGeneratorEvaluator } from '../../src/api/planner-generator-evaluator.js';
import type { RunEvent } from '../../src/schemas/index.js';
import { ScriptedModel } from '../../src/testing.js';

/** A request that failed after its model calls cost something: the run's totals count them. */

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'pge-failed-usage-'));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

describe('the usage of a failed request', () => {
  it('is in the closing event’s totals, as in its per-phase table and the result', async () => {
    // The plan call answers something invalid, then the model fails for good on the repair.
    const model = new ScriptedModel(
      { plan: [{ raw: 'not json' }, { throws: new Error('the model server is down') }] },
      { promptTokens: 100, completionTokens: 50, costUsd: 0.01 },
    );
    const events: RunEvent[] = [];
    const pge = new PlannerGeneratorEvaluator({
      plannerAgent: model,
      generatorAgent: model,
      evaluatorAgent: model,
      workingDirectory: dir,
      onEvent: (event) => events.push(event),
    });
    try {
      await expect(pge.run('Write a haiku')).rejects.toThrow(/the model server is down/);
    } finally {
      await pge.close();
    }
    const closing = events.at(-1)!;
    expect(closing.type).toBe('run.failed');
    if (closing.type !== 'run.failed') return;
    expect(events.filter((e) => e.type === 'model.call.completed')).toHaveLength(1);
    expect(closing.payload.usage).toMatchObject({ promptTokens: 100, completionTokens: 50, calls: 1 });
    expect(closing.payload.usage.costUsd).toBeCloseTo(0.01);
    const plan = closing.payload.byPhase.find((p) => p.phase === 'plan')!;
    expect(plan).toMatchObject({ calls: 1, promptTokens: 100, completionTokens: 50 });
    expect(pge.lastResult?.usage).toMatchObject({ promptTokens: 100, completionTokens: 50, calls: 1 });
  });
});
