import type { Model, ModelAnswer, ModelRequest } from '../src/roles/model.js';
import { inputOf } from '../src/roles/prompts.js';
import type {
  ContractInput,
  ContractProposal,
  ContractReview,
  Evaluation,
  EvaluationInput,
  Phase,
  Plan,
  Work,
  WorkInput,
} from '../src/schemas/index.js';

/**
 * The instant model of the benchmark: valid answers computed from the typed input, the way
 * `DemoModel` computes them, with no I/O and no waiting. Every step fails its first attempt (all
 * scores 5, under the thresholds of 7) and passes its second (all 9), so a plan of n steps costs
 * 1 + 6n model calls: plan, then per step proposal, review, work, evaluation, work, evaluation.
 * The same answer functions feed the bare XState baseline, so both loops get identical answers.
 */

/** Model calls of one run of an n-step plan with the fail-once-then-pass pattern. */
export const callsPerRun = (steps: number): number => 1 + 6 * steps;

const pad = (n: number): string => String(n).padStart(3, '0');

/**
 * A plan of `steps` steps. Ids, titles and descriptions have the same length for every step (up
 * to 999 steps), so that a prompt at step 200 differs from one at step 10 only by what the harness
 * adds to it, not by a longer title.
 */
export function benchPlan(steps: number): Plan {
  return {
    scope: 'Benchmark plan: equal-length steps, each failing once then passing',
    steps: Array.from({ length: steps }, (_, i) => ({
      id: `s${pad(i + 1)}`,
      title: `Step ${pad(i + 1)}: write the next section of the document`,
      description: `Write section ${pad(i + 1)} of the document, building on the previous section.`,
      expectedOutput: `Section ${pad(i + 1)}, complete and checked`,
      dependsOn: i > 0 ? [`s${pad(i)}`] : [],
    })),
    criteria: [
      { name: 'accuracy', weight: 'high', description: 'Claims are correct and specific', threshold: 7 },
      { name: 'clarity', weight: 'standard', description: 'Easy to follow, well organised', threshold: 7 },
      {
        name: 'completeness',
        weight: 'standard',
        description: 'Covers what the step promised',
        threshold: 7,
      },
    ],
  };
}

/** The generator's contract proposal for a step. */
export function proposalFor(input: Pick<ContractInput, 'step'>): ContractProposal {
  return {
    title: `Contract for ${input.step.title}`,
    acceptanceCriteria: [`Delivers: ${input.step.expectedOutput}`, 'Every claim is checkable'],
    expectedOutput: input.step.expectedOutput,
    verificationMethod: 'The evaluator reads the artifact against each acceptance criterion and the rubric.',
  };
}

/** The evaluator approves every proposal at once. */
export function reviewFor(): ContractReview {
  return { status: 'approved', amendments: [], rationale: 'Testable, aligned with the rubric, achievable.' };
}

/** The generator's work: an artifact of fixed length per step and attempt. */
export function workFor(input: Pick<WorkInput, 'step' | 'attempt' | 'criteria'>): Work {
  return {
    output: `# ${input.step.title}\n\nAttempt ${pad(input.attempt)}. ${input.step.description}`,
    notes: `Bench generator, attempt ${pad(input.attempt)}.`,
    selfAssessment: input.criteria.map((c) => ({ criterion: c.name, score: 9, comment: 'Looks right.' })),
  };
}

/** Attempt 1 scores 5 on every criterion (fail), later attempts 9 (pass). */
export function evaluationFor(input: Pick<EvaluationInput, 'attempt' | 'criteria'>): Evaluation {
  return evaluationScoring(input.criteria, input.attempt === 1 ? 5 : 9);
}

/** An evaluation giving `score` on every criterion: under 7 fails (the plan's thresholds), else passes. */
export function evaluationScoring(criteria: EvaluationInput['criteria'], score: number): Evaluation {
  const low = score < 7;
  return {
    scores: criteria.map((c) => ({ criterion: c.name, score, evidence: `Read for ${c.name}.` })),
    findings: low ? criteria.map((c) => `${c.name} is below its threshold`) : [],
    actionableFeedback: low ? criteria.map((c) => `Raise ${c.name}: make it concrete.`) : [],
    summary: low ? 'Every criterion is below its threshold.' : 'Meets every criterion.',
    failureKind: low ? 'execution' : null,
  };
}

/** The answer of one phase from its typed input. */
export function answerFor(phase: Phase, input: unknown, steps: number): unknown {
  switch (phase) {
    case 'plan':
      return benchPlan(steps);
    case 'contract':
      return proposalFor(input as ContractInput);
    case 'contract_review':
      return reviewFor();
    case 'work':
      return workFor(input as WorkInput);
    case 'evaluation':
      return evaluationFor(input as EvaluationInput);
  }
}

/** A `Model` that answers at once from the typed input (parsed back out of the prompt). */
export class InstantModel implements Model {
  readonly name = 'bench-instant (not an AI)';
  readonly #steps: number;

  constructor(steps: number) {
    this.#steps = steps;
  }

  async complete(request: ModelRequest): Promise<ModelAnswer> {
    return instantAnswer(this.name, answerFor(request.phase, inputOf(request.messages), this.#steps));
  }
}

/** A bench model's answer: `answer` as JSON, with fixed token counts and no cost. */
export function instantAnswer(model: string, answer: unknown): ModelAnswer {
  return {
    content: JSON.stringify(answer),
    refusal: null,
    finishReason: 'stop',
    model,
    promptTokens: 100,
    completionTokens: 50,
    costUsd: 0,
  };
}
