import { describe, expect, it } from 'vitest';
import { buildMessages } from '../../src/roles/prompts.js';

/** What the role prompts ask of the models, where a run's shape depends on it. */

describe("the planner's prompt", () => {
  it('asks for true prerequisites only, so that independent steps run side by side', () => {
    const input = { task: 'Build a to-do app', maxSteps: 5, replan: null };
    const [system, user] = buildMessages('planner', 'plan', input);
    expect(system!.content).toContain(
      "a step depends on another only when it needs that step's artifact to do its own work",
    );
    expect(system!.content).toContain("Steps that do not need each other's artifacts depend on neither");
    expect(system!.content).toMatch(/Answer with one JSON object that follows the schema pge_plan\.$/);
    expect(user!.content).toContain('"task":"Build a to-do app"');
  });

  it('gives way to a system prompt of its own, which is not told the rule', () => {
    const [system] = buildMessages('planner', 'plan', {}, 'You plan tersely.');
    expect(system!.content).toBe(
      'You plan tersely.\nAnswer with one JSON object that follows the schema pge_plan.',
    );
  });
});
