import type { ContractInput, EvaluationInput, Plan, WorkInput } from '../../src/schemas/index.js';
import type { Script, ScriptedAnswer } from '../../src/testing.js';

/** Scripts for the ScriptedModel test double: valid answers computed from the typed input. */

export function planOf(
  steps: number,
  criteria: { name: string; threshold: number | null }[] = [
    { name: 'accuracy', threshold: 7 },
    { name: 'clarity', threshold: 6 },
  ],
): Plan {
  return {
    scope: 'test scope',
    steps: Array.from({ length: steps }, (_, i) => ({
      id: `s${i + 1}`,
      title: `Step title ${String(i + 1).padStart(3, '0')}`,
      description: `describe ${i + 1}`,
      expectedOutput: `output ${i + 1}`,
      dependsOn: i > 0 ? [`s${i}`] : [],
    })),
    criteria: criteria.map((c) => ({ ...c, weight: 'standard' as const, description: `${c.name} rubric` })),
  };
}

export const proposal: ScriptedAnswer = (_req, input) => ({
  json: {
    title: `contract for ${(input as ContractInput).step.id}`,
    acceptanceCriteria: ['meets the rubric'],
    expectedOutput: (input as ContractInput).step.expectedOutput,
    verificationMethod: 'evaluator reads it',
  },
});

export const approve: ScriptedAnswer = { json: { status: 'approved', amendments: [], rationale: 'fine' } };

/** Work whose output names the step and attempt, with a flattering self-assessment and secret notes. */
export const work =
  (output?: (input: WorkInput) => string): ScriptedAnswer =>
  (_req, input) => {
    const w = input as WorkInput;
    return {
      json: {
        output: output ? output(w) : `artifact ${w.step.id} attempt ${w.attempt}`,
        notes: 'SECRET-GENERATOR-NOTES',
        selfAssessment: w.criteria.map((c) => ({
          criterion: c.name,
          score: 10,
          comment: 'SECRET-SELF-ASSESSMENT',
        })),
      },
    };
  };

/** An evaluation giving every rubric criterion `score`. */
export const evaluate =
  (score: number, summary = 'summary'): ScriptedAnswer =>
  (_req, input) => ({
    json: {
      scores: (input as EvaluationInput).criteria.map((c) => ({
        criterion: c.name,
        score,
        evidence: `${c.name} evidence`,
      })),
      findings: [`finding at ${score}`],
      actionableFeedback: [`improve beyond ${score}`],
      summary,
    },
  });

/** Repeats an answer n times. */
export const times = (n: number, answer: ScriptedAnswer): ScriptedAnswer[] =>
  Array.from({ length: n }, () => answer);

/** A script where every step passes on its first attempt. */
export function passingScript(steps: number): Script {
  return {
    plan: [{ json: planOf(steps) }],
    contract: times(steps, proposal),
    contract_review: times(steps, approve),
    work: times(steps, work()),
    evaluation: times(steps, evaluate(9)),
  };
}
