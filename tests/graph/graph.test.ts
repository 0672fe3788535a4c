import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { type AnyStateMachine, and, createMachine, fromPromise, not } from 'xstate';
import { DIAGRAM_FILES, REGENERATE } from '../../src/graph/diagram-files.js';
import { exportGraph } from '../../src/graph/export-graph.js';
import { type MachineGraph, machineGraph, nodeNotes, toJson } from '../../src/graph/machine-graph.js';
import { statechartsDoc } from '../../src/graph/statecharts-doc.js';
import { toDot } from '../../src/graph/to-dot.js';
import { toMermaid } from '../../src/graph/to-mermaid.js';
import { runMachine } from '../../src/machines/run-machine.js';
import { sessionMachine } from '../../src/machines/session-machine.js';
import { stepMachine } from '../../src/machines/step-machine.js';
import { ROOT, runCli } from '../cli/run-cli.js';

/**
 * The statechart exports: the committed diagrams are what the machines produce now, every state
 * and the branches a reader looks for are drawn, the Mermaid and DOT are well formed, and
 * `pge graph` prints them from the built CLI.
 */

const MACHINES: [string, AnyStateMachine][] = [
  ['session', sessionMachine],
  ['run', runMachine],
  ['step', stepMachine],
];

/** The Mermaid id of a state: its path below the root, joined with `_` (true of these machines). */
const mermaidId = (graph: MachineGraph, id: string) => id.slice(graph.id.length + 1).replace(/\./g, '_');

/** Checks the Mermaid the way its parser would object: balanced blocks, every id declared before use. */
function expectWellFormedMermaid(source: string): void {
  const lines = source.trimEnd().split('\n');
  expect(lines[0]).toBe('stateDiagram-v2');
  let depth = 0;
  const declared = new Set<string>();
  const initials: string[] = [];
  for (const line of lines.slice(1)) {
    const text = line.trim();
    if (text.startsWith('%%') || text === '--') continue;
    const state = /^state "[^"]*" as (\w+)( \{)?$/.exec(text);
    if (state) {
      declared.add(state[1]!);
      if (state[2]) depth++;
      continue;
    }
    if (text === '}') {
      depth--;
      expect(depth).toBeGreaterThanOrEqual(0);
      continue;
    }
    const edge = /^(\[\*\]|\w+) --> (\[\*\]|\w+)( : [^;#\n]+)?$/.exec(text);
    const note = /^(\w+) : [^;#\n]+$/.exec(text);
    expect(edge ?? note, `not a stateDiagram-v2 statement: ${line}`).not.toBeNull();
    // The first mention of a state places it in a composite: apart from the initial arrow, which
    // is in the right composite, every use must come after the state's own declaration.
    if (edge?.[1] === '[*]') initials.push(edge[2]!);
    else
      for (const id of edge ? [edge[1]!, edge[2]!] : [note![1]!])
        if (id !== '[*]') expect(declared, `${id} used before it is declared`).toContain(id);
  }
  expect(depth).toBe(0);
  for (const id of initials) expect(declared).toContain(id);
}

describe('the committed diagrams', () => {
  it.each(Object.keys(DIAGRAM_FILES))('%s is what the machines produce now', (path) => {
    const file = join(ROOT, path);
    const committed = existsSync(file) ? readFileSync(file, 'utf8') : null;
    expect(committed, `${path} is stale or missing: run \`${REGENERATE}\``).toBe(DIAGRAM_FILES[path]!());
  });

  it('docs/statecharts.md embeds the three Mermaid charts and a note on every state', () => {
    const doc = DIAGRAM_FILES['docs/statecharts.md']!();
    const blocks = [...doc.matchAll(/```mermaid\n([\s\S]*?)```/g)].map((m) => m[1]);
    expect(blocks).toEqual([toMermaid(sessionMachine), toMermaid(runMachine), toMermaid(stepMachine)]);
    for (const [, machine] of MACHINES) {
      const graph = machineGraph(machine);
      for (const node of graph.nodes.slice(1))
        expect(doc).toContain(`| \`${node.id.slice(graph.id.length + 1)}\` |`);
    }
  });
});

describe('the notes of docs/statecharts.md', () => {
  it("are the states' descriptions, and a state without one is refused", () => {
    const doc = DIAGRAM_FILES['docs/statecharts.md']!();
    for (const [, machine] of MACHINES) {
      const graph = machineGraph(machine);
      for (const node of graph.nodes.slice(1))
        expect(doc).toContain(`| \`${node.id.slice(graph.id.length + 1)}\` | ${node.description} |\n`);
    }
    const bare = createMachine({
      id: 'bare',
      initial: 'a',
      states: { a: { description: 'Waits.', on: { GO: 'b' } }, b: { states: { c: {} }, initial: 'c' } },
    });
    expect(() => statechartsDoc(bare, stepMachine, sessionMachine)).toThrow(
      /every state of the bare machine needs a description, its note in docs\/statecharts\.md: none for b, b\.c/,
    );
  });
});

describe.each(MACHINES)('the %s machine', (_name, machine) => {
  const graph = machineGraph(machine);

  it('draws every state in Mermaid, in its composite, with initial and final markers', () => {
    const source = toMermaid(machine);
    expectWellFormedMermaid(source);
    for (const node of graph.nodes.slice(1)) {
      const id = mermaidId(graph, node.id);
      const composite = node.type === 'compound' || node.type === 'parallel';
      // A composite state's invoked actors go in its label; an atomic state's in a note below it.
      const label =
        composite && node.invokes.length > 0 ? `${node.key} (${nodeNotes(node).join(', ')})` : node.key;
      expect(source).toContain(`state "${label}" as ${id}${composite ? ' {' : '\n'}`);
      if (node.type === 'final') expect(source).toContain(`${id} --> [*]`);
      if (node.initial) expect(source).toContain(`[*] --> ${mermaidId(graph, node.initial)}`);
    }
    expect(source).toContain(`\n  [*] --> ${mermaidId(graph, graph.nodes[0]!.initial!)}\n`);
  });

  it('draws every state in DOT, compound states as clusters, every edge between declared nodes', () => {
    const source = toDot(machine);
    expect(source.startsWith(`digraph "${graph.id}" {\n  compound=true;`)).toBe(true);
    expect(source.match(/\{/g)?.length).toBe(source.match(/\}/g)?.length);
    const declared = new Set([...source.matchAll(/^\s*"([^"]+)" \[/gm)].map((m) => m[1]));
    for (const node of graph.nodes) expect(declared).toContain(node.id);
    for (const node of graph.nodes.slice(1).filter((n) => n.type === 'compound'))
      expect(source).toContain(`subgraph "cluster_${node.id}" {\n`);
    for (const [, from, to] of source.matchAll(/^\s*"([^"]+)" -> "([^"]+)"/gm)) {
      expect(declared).toContain(from);
      expect(declared).toContain(to);
    }
  });

  it('lists the states and transitions as JSON nodes and edges', () => {
    const json = JSON.parse(toJson(machine)) as MachineGraph;
    expect(json.nodes.map((n) => n.id)).toEqual(graph.nodes.map((n) => n.id));
    expect(json.edges.length).toBe(graph.edges.length);
    // Each state's prose is its description in the machine, the same that docs/statecharts.md shows.
    for (const node of json.nodes.slice(1)) {
      expect(node.description).toBe(machine.getStateNodeById(node.id).description);
      expect(node.description).toMatch(/\S/);
    }
    expect(exportGraph(machine, 'json')).toBe(toJson(machine));
    expect(exportGraph(machine, 'dot')).toBe(toDot(machine));
    expect(exportGraph(machine, 'mermaid')).toBe(toMermaid(machine));
  });
});

describe('the run chart', () => {
  const source = toMermaid(runMachine);

  it('shows the outcomes of a step and the exhaustion policies, each under a named guard', () => {
    for (const line of [
      'stepping --> stepping_scheduling : done: step.* [stepPassed]',
      'stepping --> stopped : done: step.* [stepStopped]',
      'stepping --> failed : done: step.* [stepFailed]',
      'stepping --> stepping_scheduling : done: step.* [stepRejectedPlan]',
      'stepping --> aborted : done: step.* [policyIsAbort]',
      // Replan only while a replan is left: `policyIsReplan` says so, as the step's recorded policy does.
      'stepping --> stepping_scheduling : done: step.* [policyIsReplan]',
      'stepping --> stepping_scheduling : done: step.*\n', // advance, or no replans left
      'stepping --> failed : error: step.*',
      // A replan waits for the steps still running.
      'stepping_scheduling --> stepping_draining : always [replanPending]',
      'stepping_draining --> planning : always [noStepRunning]',
    ])
      expect(source).toContain(line);
  });

  it('shows planning, the step loop, the budget checks, completion and the interrupt from every running state', () => {
    for (const line of [
      'planning_gate --> stopped : always [overBudget]',
      'planning_gate --> planning_calling : always\n',
      'planning_calling : invoke: plan',
      'stepping_scheduling --> stopped : always [and(aStepIsReady, aSlotIsFree, overBudget)]',
      'planning_calling --> planning_planned : done: plan',
      'planning_planned --> planning_awaitingApproval : always [planGateOn]',
      'planning_planned --> stepping : always',
      'planning_awaitingApproval --> stepping : done: awaitApproval [approved]',
      'planning_awaitingApproval --> planning_gate : done: awaitApproval [replansLeft]',
      'planning_awaitingApproval --> disapproved : done: awaitApproval\n',
      'planning_calling --> failed : error: plan',
      'stepping_scheduling --> completed : always [allStepsEnded]',
      'stepping_scheduling --> stepping_scheduling : always [and(aStepIsReady, aSlotIsFree, readyStepPassed)]',
      'stepping_scheduling --> stepping_scheduling : always [and(aStepIsReady, aSlotIsFree)]',
      'stepping_scheduling --> stepping_waiting : always\n',
      'stepping --> stepping : step.spent',
      'planning --> interrupted : interrupt',
      'stepping --> interrupted : interrupt',
    ])
      expect(source).toContain(line);
    expect(source).not.toMatch(
      /^\s*(completed|aborted|disapproved|stopped|failed|interrupted) --> interrupted/m,
    );
  });
});

describe('the step chart', () => {
  const source = toMermaid(stepMachine);

  it('shows the verdict, refine and pivot as separate transitions under named guards, exhausted and stopped', () => {
    for (const line of [
      'judging --> passed : always [allCriteriaPass]',
      'judging --> stopped : always [and(retriesLeft, overBudget)]',
      'judging --> executing_refining : always [and(retriesLeft, or(noTrajectoryYet, scoresImproving))]',
      'judging --> executing_pivoting : always [retriesLeft]',
      'judging --> exhausted : always\n',
      'negotiating_decided --> negotiating_agreed : always [contractApproved]',
      'judging --> awaitingApproval : always [and(allCriteriaPass, stepGateOn)]',
      'awaitingApproval --> passed : done: awaitApproval [approved]',
      'awaitingApproval --> judging : done: awaitApproval',
      'negotiating_proposing --> stopped : done: proposeContract [overBudgetAfterAnswer]',
      'negotiating_decided --> stopped : always [overBudget]',
      'passed --> [*]',
      'exhausted --> [*]',
      'stopped --> [*]',
    ])
      expect(source).toContain(line);
  });

  it('shows the contract rounds, invalid work and failed validators skipping the evaluation, and the model calls as invoked actors', () => {
    for (const line of [
      'negotiating_decided --> negotiating_proposing : always [roundsLeft]',
      'negotiating_decided --> negotiating_agreed : always\n',
      'negotiating_agreed --> negotiating_awaitingApproval : always [contractGateOn]',
      'negotiating_awaitingApproval --> negotiating_proposing : done: awaitApproval [roundsLeft]',
      'negotiating_proposing --> negotiating_reviewing : done: proposeContract\n',
      'negotiating_reviewing --> negotiating_decided : done: reviewContract',
      'validating --> evaluating : always [allValidatorsPass]',
      'validating --> judging : always [aValidatorFailed]',
      'evaluating --> judging : done: evaluateWork [evaluationInvalid]',
      'evaluating --> judging : done: evaluateWork\n',
      'evaluating --> failed : error: evaluateWork',
      'negotiating_proposing : invoke: proposeContract',
      'negotiating_reviewing : invoke: reviewContract',
      'evaluating : invoke: evaluateWork',
    ])
      expect(source).toContain(line);
  });

  it('has each attempt state call the generator itself, with the signal it stands for', () => {
    expect(source).toContain('state "executing" as executing {');
    for (const attempt of ['executing_firstAttempt', 'executing_refining', 'executing_pivoting'])
      for (const line of [
        `${attempt} : invoke: doWork`,
        `${attempt} --> judging : done: doWork [workInvalid]`,
        `${attempt} --> stopped : done: doWork [overBudgetAfterAnswer]`,
        `${attempt} --> validating : done: doWork\n`,
        `${attempt} --> failed : error: doWork`,
        `${attempt} --> ${attempt} : after callDeadline`,
      ])
        expect(source).toContain(line);
  });

  it("draws each call's deadline on the state that makes the call, as an after transition", () => {
    const step = toMermaid(stepMachine);
    for (const state of ['negotiating_proposing', 'negotiating_reviewing', 'evaluating'])
      expect(step).toContain(`${state} --> ${state} : after callDeadline`);
    expect(toMermaid(runMachine)).toContain('planning_calling --> planning_calling : after callDeadline');
  });
});

describe('the session chart', () => {
  const graph = machineGraph(sessionMachine);
  const edge = (source: string, target: string, label: string, guard: string | null = null) => ({
    source: `session.${source}`,
    target: `session.${target}`,
    label,
    guard,
  });
  const edges = graph.edges.map(({ source, target, label, guard }) => ({ source, target, label, guard }));

  it('invokes the run chart, replays before it is live, and ends in a final state for each outcome', () => {
    expect(graph.nodes.find((n) => n.id === 'session.open')?.invokes).toEqual(['run']);
    expect(graph.nodes.filter((n) => n.type === 'final').map((n) => n.key)).toEqual([
      'closed',
      'takenOver',
      'diverged',
      'failed',
    ]);
    expect(edges).toEqual(
      expect.arrayContaining([
        edge('open.opening', 'open.replaying', 'always', 'resumed'),
        edge('open.opening', 'open.live', 'always'),
        edge('open.replaying', 'open.live', 'replay.ended'),
        edge('open', 'closed', 'done: run'),
        edge('open', 'failed', 'error: run'),
        edge('open', 'takenOver', 'abandon'),
        edge('open', 'open.diverging', 'diverged'),
        edge('open', 'diverged', 'error: run', 'diverging'),
      ]),
    );
  });

  it('draws the approval deadline as an after transition, and decisions as events', () => {
    const gate = 'open.live.awaitingDecision';
    expect(edges).toEqual(
      expect.arrayContaining([
        edge('open.live.working', gate, 'approval.requested'),
        edge(`${gate}.timed`, 'open.live.working', 'decide', 'and(decisionFits, lastGate)'),
        edge(`${gate}.untimed`, 'open.live.working', 'decide', 'and(decisionFits, lastGate)'),
        // Steps side by side: a decision at one gate leaves the session waiting at the others.
        edge(`${gate}.untimed`, gate, 'decide', 'decisionFits'),
        edge(gate, gate, 'approval.requested'),
        edge(`${gate}.timed`, `${gate}.expired`, 'after approvalDeadline', 'deadlineStopsRun'),
        edge(`${gate}.timed`, 'open.live.working', 'after approvalDeadline', 'lastGate'),
        edge(`${gate}.timed`, gate, 'after approvalDeadline'),
      ]),
    );
  });

  it("takes docs/statecharts.md's notes from the states' descriptions, and refuses a state without one", () => {
    const doc = DIAGRAM_FILES['docs/statecharts.md']!();
    const working = sessionMachine.root.states.open!.states.live!.states.working!;
    expect(doc).toContain(`| \`open.live.working\` | ${working.description} |`);
    expect(doc).toContain(
      '| coordinator (embedded, or `pge worker --role coordinator`) | session → run → step |',
    );
    const bare = createMachine({ id: 'bare', initial: 'a', states: { a: { description: 'A.' }, b: {} } });
    expect(() => statechartsDoc(runMachine, stepMachine, bare)).toThrow(
      /every state of the bare machine needs a description, its note in docs\/statecharts\.md: none for b/,
    );
  });
});

describe('every chart', () => {
  it.each([
    ['session', sessionMachine],
    ['run', runMachine],
    ['step', stepMachine],
  ])('the %s chart has no anonymous guard', (_, chart) => {
    const anonymous = machineGraph(chart).edges.filter(
      (e) => e.guard !== null && /(^|[(, ])guard([), ]|$)/.test(e.guard),
    );
    expect(anonymous).toEqual([]);
  });
});

describe('any machine', () => {
  // Parallel regions, history, delays, higher-order and inline guards, a root event, inline
  // actors, and keys that are Mermaid keywords or collide once sanitised.
  const machine = createMachine({
    id: 'demo',
    initial: 'idle',
    on: { RESET: '#demo' },
    states: {
      idle: {
        on: {
          GO: { target: 'busy', guard: not('ready') },
          NOTE: 'note',
          SKIP: { target: 'a-b', guard: ({ event }) => event.type === 'SKIP' },
        },
        after: { 500: 'busy' },
      },
      note: { type: 'final' },
      'a-b': { on: { NEXT: 'a_b' } },
      a_b: {},
      busy: {
        type: 'parallel',
        invoke: { src: 'load', onDone: { target: 'end', guard: and(['ready', { type: 'fresh' }]) } },
        onDone: 'end',
        states: {
          left: {
            initial: 'one',
            states: { one: { on: { NEXT: 'two' } }, two: { type: 'final' }, back: { type: 'history' } },
          },
          right: {
            initial: 'loading',
            states: {
              loading: { invoke: { id: 'loader', src: fromPromise(async () => 2), onError: 'loading' } },
            },
          },
        },
      },
      end: { type: 'final' },
    },
  }).provide({
    guards: { ready: () => true, fresh: () => true },
    actors: { load: fromPromise(async () => 1) },
  });
  const graph = machineGraph(machine);
  const edge = (source: string, target: string) =>
    graph.edges.filter((e) => e.source === `demo.${source}` && e.target === `demo.${target}`);

  it('labels events, delays, done events and guards readably', () => {
    expect(edge('idle', 'busy').map((e) => [e.label, e.guard])).toEqual([
      ['GO', 'not(ready)'],
      ['after 500ms', null],
    ]);
    expect(edge('idle', 'a-b')).toMatchObject([{ label: 'SKIP', guard: 'guard' }]);
    expect(edge('busy', 'end').map((e) => [e.label, e.guard])).toEqual([
      ['done: busy', null],
      ['done: load', 'and(ready, fresh)'],
    ]);
    expect(edge('busy.right.loading', 'busy.right.loading')).toMatchObject([{ label: 'error: loader' }]);
    expect(graph.nodes.find((n) => n.id === 'demo.busy.right.loading')?.invokes).toEqual(['loader']);
    expect(graph.nodes.find((n) => n.id === 'demo.busy')).toMatchObject({ type: 'parallel', initial: null });
  });

  it('renders parallel regions, history, keywords and colliding keys as valid Mermaid', () => {
    const source = toMermaid(machine);
    expectWellFormedMermaid(source);
    expect(source).toContain('state "busy (invoke: load)" as busy {');
    expect(source).toMatch(/ {4}}\n {4}--\n {4}state "right" as busy_right \{/);
    expect(source).toContain('state "H" as busy_left_back');
    expect(source).toContain('state "note" as note_\n  note_ --> [*]');
    expect(source).toContain('state "a-b" as a_b\n');
    expect(source).toContain('state "a_b" as a_b_2\n');
    // The root's RESET is drawn from each state that is not final, to the root's initial state.
    expect(source).toMatch(/^ {2}idle --> idle : RESET$/m);
    expect(source).toMatch(/^ {2}busy --> idle : RESET$/m);
    expect(source).not.toMatch(/(note_|end_) --> idle : RESET/);
  });

  it('renders parallel states as dashed clusters that enter every region', () => {
    const source = toDot(machine);
    expect(source).toContain(
      'subgraph "cluster_demo.busy" {\n    label="busy\\ninvoke: load";\n    style="rounded,dashed";',
    );
    expect(source).toContain('"demo.busy" -> "demo.busy.left" [lhead="cluster_demo.busy.left"];');
    expect(source).toContain('"demo.busy" -> "demo.busy.right" [lhead="cluster_demo.busy.right"];');
    expect(source).toContain(
      '"demo.busy" -> "demo.end" [label="done: load [and(ready, fresh)]", ltail="cluster_demo.busy"];',
    );
  });
});

describe('pge graph', () => {
  const pge = (args: string[]) => runCli(args, { cwd: ROOT });

  it('prints the step chart as JSON with every state', async () => {
    const r = await pge(['graph', '--machine', 'step', '--format', 'json']);
    expect(r.code).toBe(0);
    const json = JSON.parse(r.stdout) as MachineGraph;
    expect(json.id).toBe('step');
    expect(json.nodes.map((n) => n.id)).toEqual(
      expect.arrayContaining([
        'step.negotiating.proposing',
        'step.negotiating.decided',
        'step.executing',
        'step.evaluating',
        'step.judging',
        'step.executing.firstAttempt',
        'step.executing.refining',
        'step.executing.pivoting',
        'step.passed',
        'step.exhausted',
        'step.stopped',
        'step.failed',
      ]),
    );
    expect(json.nodes.map((n) => n.id)).toEqual(machineGraph(stepMachine).nodes.map((n) => n.id));
    expect(json.edges).toContainEqual({
      source: 'step.judging',
      target: 'step.executing.pivoting',
      event: null,
      label: 'always',
      guard: 'retriesLeft',
    });
  });

  it('prints the session chart', async () => {
    const r = await pge(['graph', '--machine', 'session']);
    expect(r.code).toBe(0);
    expect(r.stdout).toBe(toMermaid(sessionMachine));
    expect(r.stdout).toContain(
      'open_live_awaitingDecision_timed --> open_live_working : after approvalDeadline',
    );
  });

  it('prints the run chart as Mermaid by default, and DOT on request', async () => {
    const mermaid = await pge(['graph']);
    expect(mermaid.code).toBe(0);
    expect(mermaid.stdout).toBe(toMermaid(runMachine));
    const dot = await pge(['graph', '--format', 'dot', '--machine', 'run']);
    expect(dot.stdout).toBe(toDot(runMachine));
  });

  it.each([
    [
      ['graph', '--machine', 'walk'],
      /option '--machine <name>' argument 'walk' is invalid\. Allowed choices are session, run, step\./,
    ],
    [
      ['graph', '--format', 'svg'],
      /option '--format <format>' argument 'svg' is invalid\. Allowed choices are mermaid, dot, json\./,
    ],
    [['graph', '--colour'], /unknown option '--colour'/],
    [['graph', 'run'], /too many arguments for 'graph'/],
  ])('pge %j is a usage error (exit 2)', async (args, message) => {
    const r = await pge(args);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(message);
    expect(r.stderr).toContain("Run 'pge graph --help' for usage.");
    expect(r.stdout).toBe('');
  });

  it('has help with its flags and examples', async () => {
    const r = await pge(['graph', '--help']);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('Usage: pge graph [flags]');
    expect(r.stdout).toContain('--machine session|run|step');
    expect(r.stdout).toContain('--format mermaid|dot|json');
    expect(r.stdout).toMatch(/Examples:\n {2}pge graph/);
    expect((await pge(['--help'])).stdout).toContain('pge graph [flags]');
  });
});
