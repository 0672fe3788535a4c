import type { Phase, Role } from '../schemas/index.js';
import type { ChatMessage } from './model.js';

/**
 * The role prompts, kept close to the reference's intent (planner ambitious and strategic;
 * generator self-critical; evaluator calibrated for skepticism), and the one function that turns
 * a typed input into a fresh conversation. The input travels as one JSON block: the model sees
 * exactly the fields of the input schema and nothing else, so isolation and flat prompt size
 * follow from the schemas in `src/schemas/inputs.ts`.
 */

const SYSTEM: Record<Role, string> = {
  planner: [
    'You are the Planner of a Planner-Generator-Evaluator harness.',
    'Expand a short user prompt ambitiously into a plan: the scope, an ordered list of steps, and a rubric of evaluation criteria.',
    'Stay at the strategic level; avoid granular implementation details that would cascade errors downstream.',
    'Each step has an id (letters, digits, "-" and "_" only), a title, a description, the expected output, and the ids of the earlier steps it depends on.',
    "List only true prerequisites there: a step depends on another only when it needs that step's artifact to do its own work. Steps that do not need each other's artifacts depend on neither, and run side by side; coming later in the list is no reason to depend on a step.",
    'Give 3 to 5 criteria, each with a weight (high, standard or low), a description, and a minimum passing score from 1 to 10 (typically 6 to 8), or null to leave the threshold to the harness.',
    'A step fails if any single criterion scores below its threshold.',
  ].join('\n'),
  generator: [
    'You are the Generator of a Planner-Generator-Evaluator harness.',
    'You propose a contract for a step (what you will deliver and how it will be verified), then do the work of the step.',
    'Deliver real, complete work: no outlines, placeholders or promises of later work.',
    'Assess your own output against each criterion honestly before you hand it off.',
    'On a retry you are told to REFINE (scores improved: keep the direction and fix what the evaluator named) or to PIVOT (scores flat or falling: take a substantially different approach).',
  ].join('\n'),
  evaluator: [
    'You are the Evaluator of a Planner-Generator-Evaluator harness, deliberately calibrated for skepticism.',
    'Do not inflate scores. Scale: 1-3 broken or missing; 4-5 major defects; 6-7 adequate; 8-9 strong with minor issues; 10 exceptional.',
    'Score every criterion of the rubric, no more and no fewer, citing exact parts of the artifact as evidence.',
    'Your feedback must be actionable: each item says what to change.',
    'When the work fails a criterion, say where the fault lies in failureKind: "execution" if a better attempt at this step can pass, "plan" only if the step cannot pass as planned (it is wrong, impossible, or needs what no earlier step made).',
    'When you review a contract, approve it only if it is testable, aligned with the rubric, achievable, and has a verification method; otherwise list specific amendments.',
  ].join('\n'),
};

const TASK: Record<Phase, string> = {
  plan: 'Create the plan for the task below. Use at most `maxSteps` steps. When `replan` is set, a step failed (`reason`: it ran out of attempts, or the evaluator found that it cannot pass as planned): keep the completed steps (same ids) and plan the remaining work differently, using the findings. When `rubric` is set, it is the fixed rubric every step is judged by: give exactly its criteria, unchanged, and plan the steps to meet them.',
  contract:
    'Propose the contract for step `stepNumber` below: acceptance criteria, expected output and verification method. When `previous` is set, revise that proposal to satisfy every amendment.',
  contract_review:
    'Review the contract proposal below for step `stepNumber`. Answer "approved", or "amendments_required" with specific amendments.',
  work: 'Do the work of step `stepNumber` below, within its contract. Put the complete deliverable in `output`, what you did in `notes`, and a score with a comment for every criterion in `selfAssessment`. When `retry` is set, follow its signal and address each feedback item.',
  evaluation:
    'Evaluate the artifact below for step `stepNumber` against its contract and score every criterion of the rubric from 1 to 10, with evidence. List findings, actionable feedback, and a one-paragraph summary.',
};

/**
 * Builds the fresh conversation for one role call from its typed input. `systemPrompt` replaces
 * the role's own (the reference's `*_system_prompt`); the line that names the answer's schema is
 * kept, since the answer is validated against it.
 */
export function buildMessages(
  role: Role,
  phase: Phase,
  input: unknown,
  systemPrompt?: string,
): ChatMessage[] {
  return [
    {
      role: 'system',
      content: `${systemPrompt ?? SYSTEM[role]}\nAnswer with one JSON object that follows the schema pge_${phase}.`,
    },
    { role: 'user', content: `${TASK[phase]}\n\nINPUT (JSON):\n${JSON.stringify(input)}` },
  ];
}

/** The follow-up that re-asks after an invalid answer, quoting the precise problem. */
export function repairMessages(messages: ChatMessage[], raw: string, problem: string): ChatMessage[] {
  return [
    ...messages,
    { role: 'assistant', content: raw },
    {
      role: 'user',
      content: `Your answer was invalid: ${problem}\nAnswer again with one corrected JSON object that follows the schema.`,
    },
  ];
}

/** Reads the typed input back out of a conversation built by `buildMessages` (for test doubles and the demo model). */
export function inputOf(messages: readonly ChatMessage[]): unknown {
  const user = messages.find((m) => m.role === 'user')?.content ?? '';
  const at = user.indexOf('INPUT (JSON):\n');
  return at < 0 ? null : JSON.parse(user.slice(at + 'INPUT (JSON):\n'.length));
}
