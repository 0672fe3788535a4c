/**
 * The parts of `docs/statecharts.md` about the session chart and who runs which chart; the notes
 * on its states are their `description`s, read as the other charts' are (`statecharts-doc.ts`).
 */

/** Which process runs which chart. */
export const OWNERSHIP = `## Who runs which chart

The three charts run in one process, the run's **coordinator**, nested: the session invokes the
run chart, which invokes the step chart once per plan step. The coordinator is the embedded
runtime of \`pge run\` (and of the API) without NATS, where the role workers and the log writer
share its process, or on NATS a \`pge worker --role coordinator\`, which owns each run it holds
the lease of (\`docs/distributed.md\`). A coordinator that takes a run over from one that died
starts its session again in \`replaying\`; the one that lost the lease ends its session in
\`takenOver\`. \`pge replay\` and the dashboard run the same session replay-only, from a log.

The other processes run no chart: the role workers (\`pge worker --role planner\`, \`generator\`,
\`evaluator\`) answer the requests on their role's work queue, and the persistence worker
(\`pge worker --role persistence\`) writes the run's events to its markdown log. They only see
the events and work items the coordinator publishes.

| Process | Charts |
| --- | --- |
| coordinator (embedded, or \`pge worker --role coordinator\`) | session → run → step |
| role workers (\`--role planner\`, \`generator\`, \`evaluator\`) | none |
| persistence worker (\`--role persistence\`) | none |
`;

/** The prose before the session's chart. */
export const SESSION_INTRO = `## The session

From \`src/machines/session-machine.ts\`. The life of one run on its coordinator, around the run
chart it invokes (\`invoke: run\`): a resumed run's replay, the calls and gates it waits for with
their deadlines, and how it ends. The deadlines are \`after\` transitions (\`callDeadline\`:
\`callTimeoutMs\`; \`approvalDeadline\`: \`approvalTimeoutMs\` from the gate's recorded request):
an edge \`after callDeadline\` is taken once its state has lasted that long, and leaving the state
cancels it. A result, a person's decision, a lost lease, a failed publish and an interrupt are
events. Each final state gives the session's output: the run's outcome (\`closed\`) or the error
that ended it. The session does no I/O either: recording, publishing, cancelling and answering
the calls are actions and actors the coordinator provides. The notes are the states' own
\`description\`s.`;
