import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { PlannerGeneratorEvaluator } from '../../src/api/planner-generator-evaluator.js';
import { readLogFile } from '../../src/persistence/index.js';
import { inputOf } from '../../src/roles/prompts.js';
import type { PlanInput, RunEvent } from '../../src/schemas/index.js';
import { type FakeOpenAI, type FakeStep, startFakeOpenAI } from '../support/fake-openai-server.js';
import { answers, planOf, schemaOf } from '../support/scripted-deployment.js';

/**
 * Rejections routed by their nature, through the real openai SDK: the evaluator says the failure
 * of step 2 is the plan's (`failureKind: "plan"`), and the run goes back to the planner with its
 * findings instead of retrying the generator.
 */

let dir: string;
let openai: FakeOpenAI;
// biome-ignore lint/suspicious/noExplicitAny: request bodies as the SDK sent them.
type Body = any;

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'pge-routing-'));
  openai = await startFakeOpenAI();
});
afterEach(async () => {
  await openai.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('rejections routed by their nature', () => {
  it('sends a plan-level rejection to the planner, which revises the plan; the generator is not asked again', async () => {
    const replanned = {
      ...planOf(2),
      steps: planOf(2).steps.map((s, i) => (i === 1 ? { ...s, id: 's2b' } : s)),
    };
    openai.script((body: Body): FakeStep => {
      const schema = schemaOf(body) ?? '';
      const input = inputOf(body.messages) as {
        stepNumber?: number;
        replan?: unknown;
        step?: { id: string };
      };
      if (schema === 'pge_plan') return { content: input.replan ? replanned : planOf(2) };
      if (schema === 'pge_evaluation' && input.step?.id === 's2') {
        return {
          content: {
            ...answers(3, 2).pge_evaluation,
            findings: ['step 2 needs the survey data, which no step gathers'],
            actionableFeedback: ['add a step that gathers the survey data first'],
            failureKind: 'plan',
          },
        };
      }
      return { content: answers(9, 2)[schema] ?? {} };
    });
    const events: RunEvent[] = [];
    const pge = new PlannerGeneratorEvaluator({
      modelName: 'test-model',
      baseURL: openai.url,
      apiKey: 'sk-test-routing',
      workingDirectory: dir,
      maxRetries: 0,
      tools: false,
      onEvent: (e) => events.push(e),
    });
    await pge.run('Write a report on the survey');
    await pge.close();

    const bodies = openai.completions().map((r) => r.body as Body);
    // The evaluator is asked for failureKind, as a required field of the strict schema.
    const evaluationSchema = bodies.find((b) => schemaOf(b) === 'pge_evaluation').response_format.json_schema;
    expect(evaluationSchema.strict).toBe(true);
    expect(evaluationSchema.schema.required).toContain('failureKind');

    const plans = bodies
      .filter((b) => schemaOf(b) === 'pge_plan')
      .map((b) => inputOf(b.messages) as PlanInput);
    expect(plans).toHaveLength(2);
    expect(plans[1]!.replan).toMatchObject({
      reason: 'plan_rejected',
      failedStepId: 's2',
      completedStepIds: ['s1'],
      findings: ['step 2 needs the survey data, which no step gathers'],
      actionableFeedback: ['add a step that gathers the survey data first'],
    });
    // Step 2 had retries left, yet its generator was asked once: the fault was not its own.
    const works = bodies
      .filter((b) => schemaOf(b) === 'pge_work')
      .map((b) => (inputOf(b.messages) as Body).step.id);
    expect(works).toEqual(['s1', 's2', 's2b']);

    // The evidence is in the log: the evaluation that said so, the routing, the revised plan.
    const log = await readLogFile(join(dir, `pge_shared_state_${events[0]!.runId}.md`));
    const types = log.map((e) => e.type);
    const rejected = types.indexOf('step.plan.rejected');
    expect(rejected).toBeGreaterThan(0);
    expect(
      log.find((e) => e.type === 'step.evaluation.completed' && e.payload.stepId === 's2'),
    ).toMatchObject({
      payload: { evaluation: { failureKind: 'plan' } },
    });
    expect(types.slice(rejected, rejected + 3)).toEqual([
      'step.plan.rejected',
      'plan.requested',
      'model.call.completed',
    ]);
    expect(log.at(-1)).toMatchObject({ type: 'run.completed', payload: { passed: true, stepsPassed: 2 } });
  });
});
