import type { AnyStateMachine } from 'xstate';
import { machineGraph } from './machine-graph.js';
import { descriptionNotes, OWNERSHIP, SESSION_INTRO } from './session-doc.js';
import { toMermaid } from './to-mermaid.js';

/**
 * The text of `docs/statecharts.md`: both charts, as Mermaid generated from the machines, and a
 * note on every state. The notes are keyed by state path; a state without a note, or a note for a
 * state that is gone, is an error, so the document cannot fall behind the machines unnoticed.
 */

/** What happens in each state of the run machine, by path below the root. */
const RUN_NOTES: Record<string, string> = {
  planning:
    'The **planner** turns the task into a plan: a scope, at most `maxSteps` steps (each with its dependencies) and a graded rubric of criteria. The harness, not the planner, owns the thresholds: the plan\'s own, else `defaultThresholds`, else `fallbackThreshold`. After a failed step under `onStepExhausted: "replan"` the planner gets the previous plan, the failed step, the findings and feedback of its best attempt and the steps already done.',
  'planning.gate':
    'Budget check before the planner is called (`overBudget`); a call that would break a budget is never made.',
  'planning.calling':
    'Invokes `plan`, the call to the planner role, and waits for it. Done (`done: plan`): the plan is recorded (`plan.created`) and goes to `planned`. Failed (`error: plan`): `failed`.',
  'planning.planned':
    'With the plan gate on (`planGateOn`: `--approve plan`): `awaitingApproval`. Otherwise stepping starts at the first step.',
  'planning.awaitingApproval':
    "Waits for a person's decision on the plan (invokes `awaitApproval`, recorded as `approval.requested`; the decision as `approval.decided`), for as long as it takes: on the terminal, through the API's `approve`, or `pge approve` on NATS. Approved (`approved`): stepping starts. Rejected: back to the planner with the reason (`replan.reason: disapproved`) while `replansLeft`, else `aborted`. A run waiting here survives a restart of its process: it is waiting again once resumed.",
  stepping: "The plan's steps in order, each run to its end by the step machine before the next starts.",
  'stepping.next':
    "Chooses what comes next: no steps left, `completed`; the step's first model call would break a budget, `stopped`; a step whose id already passed (before a replan) is skipped; otherwise the step runs.",
  'stepping.running':
    "Records `step.started` and invokes `runStep`, the step machine below, with the step, the outputs of the steps it depends on and the budget spent so far. On its outcome, in this order: `stepPassed`, the next step; `stepStopped`, `stopped`; `stepFailed`, `failed`; `stepRejectedPlan` (the evaluator found the failure to be the plan's), back to `planning` with the evaluation's findings (`replan.reason: plan_rejected`); exhausted, the exhaustion policy: `policyIsAbort` goes to `aborted`, `policyIsReplan` goes back to `planning` while `replansLeft` (`maxReplans`), and otherwise (`advance`, or no replans left) the step stays failed and the run goes on with the next step.",
  completed:
    'Every step has run. The run passed if every step passed (under `advance` an exhausted step does not stop the run, but the run does not pass). Records `run.completed`.',
  aborted:
    'A step exhausted its attempts under `onStepExhausted: "abort"`. Records `run.failed` (reason `aborted`).',
  stopped:
    'A budget check (here or in the step) found that the next model call would break a budget. Records `run.failed` (reason `budget`) naming the budget.',
  failed:
    'A call or the step machine failed: the model server or transport, an answer that stayed invalid after repairs, or the log. Records `run.failed` (reason `error`).',
  interrupted:
    'The `interrupt` event (Ctrl-C or SIGTERM in the CLI) is taken in any state until the run has ended. Records `run.failed` (reason `interrupted`). Leaving the running state stops the call actor in flight, which cancels its request: the worker aborts the HTTP request to the model (`request.cancelled` is recorded before the closing event).',
};

/** What happens in each state of the step machine, by path below the root. */
const STEP_NOTES: Record<string, string> = {
  negotiating:
    'Before any work, the generator and the evaluator agree a contract for the step: what will be delivered, its acceptance criteria and how they will be checked.',
  'negotiating.proposing':
    "The **generator** proposes the contract (invokes `proposeContract`); from round 2 on it revises its last proposal with the evaluator's amendments. Done: to the review, unless the spend so far means the review would break a budget (`overBudgetAfterAnswer`), then `stopped`. Failed: `failed`.",
  'negotiating.reviewing':
    'The **evaluator** reviews the proposal (invokes `reviewContract`): it approves it, or asks for amendments. Failed: `failed`.',
  'negotiating.decided':
    'Over budget (`overBudget`): `stopped`. Approved (`contractApproved`): the contract is agreed (`step.contract.agreed`). Amendments with rounds left (`roundsLeft`, `maxContractRounds`): another round. Amendments in the last round: the proposal is taken with the amendments added to its criteria, and the contract is imposed (`step.contract.imposed`). Either way: `agreed`.',
  'negotiating.agreed':
    'With the contract gate on (`contractGateOn`: `--approve contract`): `awaitingApproval`. Otherwise the work starts.',
  'negotiating.awaitingApproval':
    "Waits for a person's decision on the contract (invokes `awaitApproval`). Approved (`approved`): the work starts. Rejected with rounds left (`roundsLeft`): the generator proposes again, told the reason as an amendment. Rejected in the last round: `exhausted`.",
  executing:
    "The **generator** does the work of the current attempt (invokes `doWork`) against the contract, given the outputs of the steps this one depends on; on a retry also the signal (refine or pivot), the scores with their change since the previous attempt, and the evaluator's feedback. Done, in order: work that stayed invalid after repairs (`workInvalid`) skips the evaluation and is judged at once as a failed attempt (`invalid_work`); an evaluation that would break a budget is not made (`overBudgetAfterAnswer`: `stopped`); otherwise the work goes to `validating`. Failed: `failed`.",
  'executing.firstAttempt': 'The first attempt at the step: the generator works from the contract alone.',
  'executing.refining':
    'A retry with the **refine** signal: the generator improves its last attempt with the scores, their change and the feedback. The signal the generator gets is this state.',
  'executing.pivoting':
    'A retry with the **pivot** signal: the scores were flat or falling, so the generator tries a different approach. The signal the generator gets is this state.',
  validating:
    "The validators' verdict (`--validate`, `validators`): they ran on the generator's worker, in the run's workspace, as the last part of the work call, so they see the files exactly as the work left them (`step.work.completed` records each one's result). Every one passed, or there are none (`allValidatorsPass`): `evaluating`. When one failed (`aValidatorFailed`) the evaluator is not asked: the attempt is judged failed (`failed_validation`) and the retry's feedback is what the failed validators printed. A decision that takes no time, like `judging`.",
  evaluating:
    "The **evaluator** scores the artifact against every criterion of the rubric and the contract (invokes `evaluateWork`), with evidence, findings and actionable feedback. It sees the artifact, not the generator's notes or self-assessment. An evaluation that stayed invalid after repairs fails the attempt (`invalid_evaluation`): the harness fails closed. Failed: `failed`.",
  judging:
    "The chart, not a model, decides the verdict, and records it (`step.attempt.judged`) on the transition it takes. `allCriteriaPass` (every criterion has a score at or above its threshold, and no person rejected the result): `passed`, or first `awaitingApproval` with the step gate on (`stepGateOn`). A failure the evaluator found to be the plan's (`planAtFault`: `failureKind: plan`) while the run has a replan left (`replansLeft`, `maxReplans`): `planRejected`, whatever retries are left. Otherwise, with retries left (`retriesLeft`: at most `maxRetriesPerStep` retries): `stopped` if the retry would break a budget (`overBudget`); `executing.refining` when there is no trajectory yet (`noTrajectoryYet`: fewer than two scored attempts, as at the first retry) or the weighted mean rose (`scoresImproving`); `executing.pivoting` when it was flat or fell. The transition into a retry starts the next attempt with that signal (`step.retry.scheduled`); the contract stays as agreed. No retries left: `exhausted`. `judging` is a decision that takes no time: it passes within one step of the machine, so an inspector shows the transition it takes rather than the state.",
  awaitingApproval:
    "With the step gate on (`stepGateOn`: `--approve step`), a result that passed its evaluation waits here for a person's decision (invokes `awaitApproval`) before the step passes. Approved (`approved`): `passed`, the verdict recorded. Rejected: back to `judging` with the attempt marked `rejected`, so it is judged failed and retried (refine or pivot, bounded by `retriesLeft`) with the reason as the generator's feedback.",
  passed: 'The step passed. Records `step.passed` with the passing attempt.',
  exhausted:
    'No attempt passed and no retries are left. Records `step.failed` with the best attempt and the policy; the run machine then applies `onStepExhausted`.',
  planRejected:
    'The step cannot pass as planned. Records `step.plan.rejected`; the run machine sends the run back to the planner with the evaluation that said so (a replan, counted against `maxReplans`). Without a replan left, such a failure is retried like any other.',
  stopped: 'The next model call would have broken a budget; the run machine goes to `stopped`.',
  failed: 'A call failed; the run machine goes to `failed`.',
};

/** The notes in the order of the machine's states; throws if notes and states do not match. */
function noteRows(machine: AnyStateMachine, notes: Record<string, string>): string[] {
  const graph = machineGraph(machine);
  const paths = graph.nodes.slice(1).map((n) => n.id.slice(graph.id.length + 1));
  const missing = paths.filter((p) => !Object.hasOwn(notes, p));
  const stale = Object.keys(notes).filter((p) => !paths.includes(p));
  if (missing.length > 0 || stale.length > 0)
    throw new Error(
      `the notes on the ${graph.id} machine do not match its states (src/graph/statecharts-doc.ts): ` +
        `missing ${missing.join(', ') || 'none'}; no such state ${stale.join(', ') || 'none'}`,
    );
  return paths.map((p) => `| \`${p}\` | ${notes[p]} |`);
}

function section(machine: AnyStateMachine, notes: Record<string, string>): string {
  return [
    '```mermaid',
    toMermaid(machine).trimEnd(),
    '```',
    '',
    '| State | What happens there |',
    '| --- | --- |',
    ...noteRows(machine, notes),
  ].join('\n');
}

/** The markdown of `docs/statecharts.md` for the given run, step and session machines. */
export function statechartsDoc(
  runMachine: AnyStateMachine,
  stepMachine: AnyStateMachine,
  sessionMachine: AnyStateMachine,
): string {
  return `# Statecharts

<!-- Generated from src/machines by \`npx tsx scripts/gen-diagrams.ts\`; edit the machines or
src/graph/statecharts-doc.ts, then regenerate. tests/graph/graph.test.ts fails when this is stale. -->

The harness is three XState statecharts. The **session machine** is a run's life on the
coordinator that owns it (replay, the calls and gates it waits for, takeover) and invokes the run
machine. The **run machine** plans the task and runs the plan's
steps one after another; for each step it invokes the **step machine**, which negotiates a
contract, has the work done and evaluated, and retries until the step passes or its attempts run
out. The machines do no I/O: a state that needs the planner, the generator or the evaluator
invokes the call as a child actor (\`invoke: doWork\` in the charts), and its output comes back as
the invoke's \`done\` event; the call actors are wired in at the composition root. Leaving a state
stops its actor, which cancels the call end to end. The charts below are generated from the machine definitions,
as \`pge graph\` prints them (\`pge graph --machine step --format dot\` for Graphviz); the same
charts are in \`docs/diagrams/\` as \`.mmd\` and \`.dot\` files.

How to read the edges: the label is the event, then the guard in brackets. \`always\` is an
eventless transition, taken as soon as its guard holds; the guarded ones are tried in order and
the unguarded one last. \`done: doWork\` is the call actor's output, \`error: doWork\` a call
that failed; \`done: runStep\` and \`error: runStep\` are the invoked step machine finishing or
failing. Every guard is named after what it checks; the notes say how.

Budgets are checked on the way to every model call: the spend so far plus the mean cost of one
call must stay within \`maxCostUsd\` and \`maxTokens\`, and \`maxDurationMs\` must not have passed.
A call that would break a budget is never made; the machine goes to \`stopped\` instead, and so
does the run. The edges into \`stopped\` are these checks: \`overBudget\` before a call, and
\`overBudgetAfterAnswer\` on the \`done\` edges whose next state would make a call.

${OWNERSHIP}
${SESSION_INTRO}

${section(sessionMachine, descriptionNotes(sessionMachine))}

## The run

From \`src/machines/run-machine.ts\`.

${section(runMachine, RUN_NOTES)}

### When a step is exhausted

The step machine ends \`exhausted\` when no attempt passed within \`maxRetriesPerStep\` retries.
The run then follows \`onStepExhausted\`, the \`done: runStep\` edges out of
\`stepping.running\` under \`policyIsAbort\` and \`and(policyIsReplan, replansLeft)\`:

- \`advance\` (the default): the step is recorded as failed and the run goes on with the next
  step; the run completes but does not pass.
- \`abort\`: the run ends \`aborted\`.
- \`replan\`: back to \`planning\`, with what was learnt from the failed step, at most
  \`maxReplans\` times; after that the step is treated as under \`advance\`.

Whatever the policy, a failed attempt the evaluator judges to be the plan's fault
(\`failureKind: plan\`) goes back to \`planning\` at once while a replan is left: the step chart
ends in \`planRejected\` (\`planAtFault\` and \`replansLeft\`), and the run chart takes it under
\`stepRejectedPlan\`. Replans of both kinds count against \`maxReplans\`.

## The step

From \`src/machines/step-machine.ts\`.

${section(stepMachine, STEP_NOTES)}
`;
}
