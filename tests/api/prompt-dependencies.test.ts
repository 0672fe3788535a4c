import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { PlannerGeneratorEvaluator } from '../../src/api/planner-generator-evaluator.js';
import { inputOf } from '../../src/roles/prompts.js';
import type { Plan, WorkInput } from '../../src/schemas/index.js';
import { ScriptedModel } from '../../src/testing.js';
import { approve, evaluate, planOf, proposal, times, work } from '../support/scripts.js';

/**
 * A step's prompts carry the artifacts of the steps it depends on and of no other (issue #34,
 * item 8): however many steps ran before it, what it is shown grows only with its own
 * dependencies, so steps that run side by side stay small and do not see each other's work.
 */

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'pge-prompt-deps-'));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

/** s1 and s2 side by side; s3 builds on s1; s4 on s3 (so on s1 only through it). */
const DEPENDS_ON: Record<string, string[]> = { s1: [], s2: [], s3: ['s1'], s4: ['s3'] };
const plan = (): Plan => {
  const base = planOf(4);
  return { ...base, steps: base.steps.map((s) => ({ ...s, dependsOn: DEPENDS_ON[s.id]! })) };
};
const artifactOf = (stepId: string) => `ARTIFACT-OF-${stepId}`;

describe("a step's prompts", () => {
  it("carry its own dependencies' artifacts and no other step's", async () => {
    const model = new ScriptedModel({
      plan: [{ json: plan() }],
      contract: times(4, proposal),
      contract_review: times(4, approve),
      work: times(
        4,
        work((input) => artifactOf(input.step.id)),
      ),
      evaluation: times(4, evaluate(9)),
    });
    const pge = new PlannerGeneratorEvaluator({
      plannerAgent: model,
      generatorAgent: model,
      evaluatorAgent: model,
      workingDirectory: dir,
      tools: false,
    });
    try {
      await pge.run('Write a guide');
    } finally {
      await pge.close();
    }
    expect(pge.lastResult!.passed).toBe(true);

    // Every prompt of each step, whatever the order the steps ran in: the step is in its input.
    const shown = new Map<string, string[]>();
    for (const request of model.requests) {
      if (request.phase === 'plan') continue;
      const stepId = (inputOf(request.messages) as { step: { id: string } }).step.id;
      const text = request.messages.map((m) => m.content).join('\n');
      shown.set(stepId, [...(shown.get(stepId) ?? []), `${request.phase}: ${text}`]);
    }
    const artifactsIn = (stepId: string, phase: string) =>
      ['s1', 's2', 's3', 's4'].filter((id) =>
        shown
          .get(stepId)!
          .filter((p) => p.startsWith(`${phase}: `))
          .some((p) => p.includes(artifactOf(id))),
      );
    for (const stepId of ['s1', 's2', 's3', 's4']) {
      // The generator is shown the artifacts of the steps the step depends on, no more …
      expect(artifactsIn(stepId, 'work'), `${stepId} work`).toEqual(DEPENDS_ON[stepId]);
      // … the evaluator the step's own, and a contract none.
      expect(artifactsIn(stepId, 'evaluation'), `${stepId} evaluation`).toEqual([stepId]);
      expect(artifactsIn(stepId, 'contract'), `${stepId} contract`).toEqual([]);
      expect(artifactsIn(stepId, 'contract_review'), `${stepId} review`).toEqual([]);
    }
    const s4 = model.requestsOf('work').map((r) => inputOf(r.messages) as WorkInput);
    expect(s4.find((input) => input.step.id === 's4')!.dependencies).toEqual([
      { stepId: 's3', title: 'Step title 003', output: artifactOf('s3') },
    ]);
  });
});
