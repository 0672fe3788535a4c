import type {
  ContractInput,
  ContractProposal,
  ContractReview,
  ContractReviewInput,
  Evaluation,
  EvaluationInput,
  Plan,
  PlanInput,
  Work,
  WorkInput,
} from '../schemas/index.js';
import type { ValidatorContext, ValidatorVerdict } from '../tools/validators.js';
import type { Model, ModelAnswer, ModelRequest, ToolCallRequest } from './model.js';
import { inputOf } from './prompts.js';

/**
 * The demo model: a deterministic stand-in for a real model, so that `pge demo` shows the whole
 * loop offline with no key. It is not an AI: its answers are templates filled from the typed
 * input, scripted so that a run shows a contract amendment, a failed attempt, a refine and a pivot.
 * Its plan's first two steps depend on nothing, so they run side by side (`--parallel`), and the
 * draft waits for both. Step 1 (outline) fails once and passes on a refine; step 2 (sources) fails
 * twice with flat scores, pivots, and passes. Given the workspace tools, its generator first writes
 * its deliverable into the workspace (`<step id>.md`, one tool call), then answers: so the demo
 * shows a tool call too. Step 3's first draft has no title, which `titledDeliverable`, the
 * validator of `pge demo`, fails.
 */

const NAME = 'pge-demo (scripted demo model, not an AI)';

function plan(input: PlanInput): Plan {
  const subject = input.task.replace(/\s+/g, ' ').trim().slice(0, 80);
  const steps = [
    {
      id: 'outline',
      title: 'Outline the deliverable',
      description: `Decide the structure and key points of: ${subject}`,
      expectedOutput: 'A structured outline with sections and key points',
      dependsOn: [],
    },
    {
      id: 'sources',
      title: 'Gather the sources',
      description: `Collect the facts, references and examples needed for: ${subject}`,
      expectedOutput: 'A list of sources, each with the point it supports',
      dependsOn: [],
    },
    {
      id: 'draft',
      title: 'Write the deliverable',
      description: `Write the full text for: ${subject}`,
      expectedOutput: 'The complete deliverable, following the outline and citing the sources',
      dependsOn: ['outline', 'sources'],
    },
    {
      id: 'review',
      title: 'Polish and check',
      description: 'Check facts, fix gaps and polish the wording',
      expectedOutput: 'The final, checked deliverable',
      dependsOn: ['draft'],
    },
  ].slice(0, input.maxSteps);
  return {
    scope: `Demo plan for: ${subject}`,
    steps,
    criteria: [
      { name: 'accuracy', weight: 'high', description: 'Claims are correct and specific', threshold: 7 },
      { name: 'clarity', weight: 'standard', description: 'Easy to follow, well organised', threshold: 7 },
      {
        name: 'completeness',
        weight: 'standard',
        description: 'Covers what the step promised',
        threshold: null,
      },
    ],
  };
}

function contract(input: ContractInput): ContractProposal {
  const extra = input.previous?.amendments ?? [];
  return {
    title: `${input.step.title} (round ${input.round})`,
    acceptanceCriteria: [`Delivers: ${input.step.expectedOutput}`, ...extra],
    expectedOutput: input.step.expectedOutput,
    verificationMethod: 'The evaluator reads the artifact against each acceptance criterion and the rubric.',
  };
}

function review(input: ContractReviewInput): ContractReview {
  // The first step's first proposal is sent back once, to show a negotiation round.
  return input.stepNumber === 1 && input.round === 1
    ? {
        status: 'amendments_required',
        amendments: ['Name the sources or reasoning behind each key point'],
        rationale: 'Not yet verifiable.',
      }
    : { status: 'approved', amendments: [], rationale: 'Testable, aligned with the rubric, achievable.' };
}

function work(input: WorkInput): Work {
  const approach =
    input.retry?.signal === 'pivot'
      ? 'a different approach (pivot)'
      : input.retry
        ? 'the same approach, refined'
        : 'a first approach';
  const deps = input.dependencies.map((d) => `- builds on "${d.title}"`).join('\n');
  // The third step's first draft forgets its title, which the demo's validator catches.
  const title = input.stepNumber === 3 && input.attempt === 1 ? [] : [`# ${input.step.title}`, ''];
  return {
    output: [
      ...title,
      `Attempt ${input.attempt}, using ${approach}.`,
      input.step.description,
      deps,
      ...(input.retry?.feedback ?? []).map((f) => `- addressed: ${f}`),
    ]
      .filter((l) => l !== '')
      .join('\n'),
    notes: `Demo generator, attempt ${input.attempt}.`,
    selfAssessment: input.criteria.map((c) => ({
      criterion: c.name,
      score: 9,
      comment: 'The demo generator always rates itself highly.',
    })),
  };
}

/** Scores by step and attempt: each inner list is one attempt's [accuracy, clarity, completeness]. */
const SCORES: number[][][] = [
  [
    [5, 7, 6],
    [8, 8, 7],
  ],
  [
    [6, 6, 5],
    [5, 6, 6],
    [8, 9, 8],
  ],
];

function evaluation(input: EvaluationInput): Evaluation {
  const byStep = SCORES[input.stepNumber - 1] ?? [[8, 8, 8]];
  const row = byStep[Math.min(input.attempt, byStep.length) - 1]!;
  const scores = input.criteria.map((c, i) => ({
    criterion: c.name,
    score: row[i] ?? 8,
    evidence: `Demo evaluator on attempt ${input.attempt}: ${c.description}.`,
  }));
  const low = scores.filter((s, i) => s.score < input.criteria[i]!.threshold);
  return {
    scores,
    findings: low.map((s) => `${s.criterion} is below its threshold`),
    actionableFeedback: low.map((s) => `Raise ${s.criterion}: make it concrete and checkable.`),
    summary: low.length === 0 ? 'Meets every criterion.' : `${low.length} criteria below threshold.`,
    failureKind: low.length === 0 ? null : 'execution',
  };
}

/** The validator of `pge demo`: the deliverable must open with a title heading (`# …`). */
export function titledDeliverable({ output }: ValidatorContext): ValidatorVerdict {
  return /^# \S/.test(output)
    ? { passed: true, output: 'it opens with a title heading' }
    : { passed: false, output: 'the deliverable does not open with a title heading ("# <title>")' };
}

/** A deterministic demo model for `pge demo`. It says plainly that it is not an AI. */
export class DemoModel implements Model {
  readonly name = NAME;

  async complete(request: ModelRequest): Promise<ModelAnswer> {
    const input = inputOf(request.messages);
    const writes = request.tools?.some((tool) => tool.name === 'write_file') === true;
    if (request.phase === 'work' && writes && !request.messages.some((m) => m.role === 'tool')) {
      const deliverable = work(input as WorkInput).output;
      const toolCalls = [
        {
          id: `demo-write-${(input as WorkInput).attempt}`,
          name: 'write_file',
          arguments: JSON.stringify({
            path: `${(input as WorkInput).step.id}.md`,
            content: `${deliverable}\n`,
          }),
        },
      ];
      return this.#answer(request, null, toolCalls);
    }
    const answers = {
      plan: () => plan(input as PlanInput),
      contract: () => contract(input as ContractInput),
      contract_review: () => review(input as ContractReviewInput),
      work: () => work(input as WorkInput),
      evaluation: () => evaluation(input as EvaluationInput),
    };
    return this.#answer(request, JSON.stringify(answers[request.phase]()));
  }

  #answer(request: ModelRequest, content: string | null, toolCalls?: ToolCallRequest[]): ModelAnswer {
    const promptTokens = Math.ceil(request.messages.reduce((n, m) => n + m.content.length, 0) / 4);
    const said = content ?? JSON.stringify(toolCalls);
    return {
      content,
      refusal: null,
      finishReason: toolCalls === undefined ? 'stop' : 'tool_calls',
      ...(toolCalls === undefined ? {} : { toolCalls }),
      model: NAME,
      promptTokens,
      completionTokens: Math.ceil(said.length / 4),
      costUsd: 0,
    };
  }
}
