import type { AnyStateMachine } from 'xstate';
import { machineGraph } from './machine-graph.js';
import { OWNERSHIP, SESSION_INTRO } from './session-doc.js';
import { toMermaid } from './to-mermaid.js';

/**
 * The text of `docs/statecharts.md`: the three charts, as Mermaid generated from the machines, and a
 * note on every state, which is the state's `description` in the machine (as `pge graph --format
 * json` and an inspector show it). A state without one is an error, so the document cannot fall
 * behind the machines unnoticed.
 */

/** Each state's note, its `description` in the machine, in the order of the states; throws if one has none. */
function noteRows(machine: AnyStateMachine): string[] {
  const graph = machineGraph(machine);
  const path = (id: string) => id.slice(graph.id.length + 1);
  const states = graph.nodes.slice(1);
  const missing = states.filter((n) => !n.description).map((n) => path(n.id));
  if (missing.length > 0)
    throw new Error(
      `every state of the ${graph.id} machine needs a description, its note in docs/statecharts.md: ` +
        `none for ${missing.join(', ')}`,
    );
  return states.map((n) => `| \`${path(n.id)}\` | ${n.description} |`);
}

function section(machine: AnyStateMachine): string {
  return [
    '```mermaid',
    toMermaid(machine).trimEnd(),
    '```',
    '',
    '| State | What happens there |',
    '| --- | --- |',
    ...noteRows(machine),
  ].join('\n');
}

/** What the charts are, and how they call the roles. */
const INTRO = `The harness is three XState statecharts. The **session machine** is a run's life on the
coordinator that owns it (replay, the calls and gates it waits for, takeover) and invokes the run
machine. The **run machine** plans the task and runs the plan's
steps one after another; for each step it invokes the **step machine**, which negotiates a
contract, has the work done and evaluated, and retries until the step passes or its attempts run
out. The machines do no I/O: a state that needs the planner, the generator or the evaluator
invokes the call as a child actor (\`invoke: doWork\` in the charts), and its output comes back as
the invoke's \`done\` event; the call actors are wired in at the composition root. Leaving a state
stops its actor, which cancels the call end to end. The charts below are generated from the machine definitions,
as \`pge graph\` prints them (\`pge graph --machine step --format dot\` for Graphviz); the same
charts are in \`docs/diagrams/\` as \`.mmd\` and \`.dot\` files.`;

/** How the charts' edges are labelled. */
const READING_EDGES = `How to read the edges: the label is the event, then the guard in brackets. \`always\` is an
eventless transition, taken as soon as its guard holds; the guarded ones are tried in order and
the unguarded one last. \`done: doWork\` is the call actor's output, \`error: doWork\` a call
that failed; \`done: runStep\` and \`error: runStep\` are the invoked step machine finishing or
failing. Every guard is named after what it checks; the notes say how.`;

/** Where the budgets are checked. */
const BUDGETS = `Budgets are checked on the way to every model call: the spend so far plus the mean cost of one
call must stay within \`maxCostUsd\` and \`maxTokens\`, and \`maxDurationMs\` must not have passed.
A call that would break a budget is never made; the machine goes to \`stopped\` instead, and so
does the run. The edges into \`stopped\` are these checks: \`overBudget\` before a call, and
\`overBudgetAfterAnswer\` on the \`done\` edges whose next state would make a call.`;

/** What the run does when a step runs out of attempts (`onStepExhausted`). */
const EXHAUSTED = `### When a step is exhausted

The step machine ends \`exhausted\` when no attempt passed within \`maxRetriesPerStep\` retries.
The run then follows \`onStepExhausted\`, the \`done: step.*\` edges out of
\`stepping\` under \`policyIsAbort\` and \`policyIsReplan\` (which holds only while a
replan is left):

- \`advance\` (the default): the step is recorded as failed and the run goes on; the steps that
  depend on it run with its best attempt's artefact; the run completes but does not pass.
- \`abort\`: the run ends \`aborted\`, and the steps still running beside it are stopped (their
  calls cancelled, recorded as \`request.cancelled\` before the closing event).
- \`replan\`: no step starts any more; once the steps still running have ended (\`draining\`),
  back to \`planning\`, with what was learnt from the failed step, at most \`maxReplans\` times;
  steps that passed stay passed. After that the step is treated as under \`advance\`.`;

/** How steps run side by side, and what stops them together. */
const SIDE_BY_SIDE = `### Steps side by side

Each step runs in its own step chart, a child actor of the run chart (\`step.<id>\`, spawned
from \`scheduling\`). A step is ready once every step it depends on has ended
(\`aStepIsReady\`), and starts while fewer than \`maxParallelSteps\` (\`--parallel\`, default 4)
run (\`aSlotIsFree\`); the first ready step in plan order goes first, so with \`--parallel 1\`
the steps run one at a time in plan order. While steps run side by side each reports the cost
of each call to the run (\`step.spent\`), which passes it on to the others (\`budget.others\`):
every step's budget guards count every step's calls. A budget stop, an abort or an interrupt
stops every step running: each step's call in flight is cancelled (\`request.cancelled\`), and the
closing \`run.failed\` lists the steps that were running, each with its attempt and the state its
chart stood in (\`inFlight\`; the log's summary shows them as a table). An answer that arrives
after its call was cancelled is never applied: while the run is open it is recorded as
\`result.rejected\` (reason \`late\`); after the run has closed, its log takes nothing more, and
the coordinator reports it on \`pge.errors.rejected.coordinator\`.`;

/** A plan at fault, whatever the policy. */
const PLAN_AT_FAULT = `Whatever the policy, a failed attempt the evaluator judges to be the plan's fault
(\`failureKind: plan\`) goes back to \`planning\` at once while a replan is left: the step chart
ends in \`planRejected\` (\`planAtFault\` and \`replansLeft\`), and the run chart takes it under
\`stepRejectedPlan\`. Replans of both kinds count against \`maxReplans\`.`;

/** The markdown of `docs/statecharts.md` for the given run, step and session machines. */
export function statechartsDoc(
  runMachine: AnyStateMachine,
  stepMachine: AnyStateMachine,
  sessionMachine: AnyStateMachine,
): string {
  return `# Statecharts

<!-- Generated from src/machines by \`npx tsx scripts/gen-diagrams.ts\`; edit the machines (each
state's note is its \`description\`) or src/graph/statecharts-doc.ts, then regenerate. tests/graph/graph.test.ts fails when this is stale. -->

${INTRO}

${READING_EDGES}

${BUDGETS}

${OWNERSHIP}
${SESSION_INTRO}

${section(sessionMachine)}

## The run

From \`src/machines/run-machine.ts\`.

${section(runMachine)}

${EXHAUSTED}

${SIDE_BY_SIDE}

${PLAN_AT_FAULT}

## The step

From \`src/machines/step-machine.ts\`.

${section(stepMachine)}
`;
}
