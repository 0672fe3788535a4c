import type { AnyStateMachine, AnyStateNode, AnyTransitionDefinition } from 'xstate';
import { type DirectedGraphNode, toDirectedGraph } from 'xstate/graph';

/**
 * A statechart as plain data, read from the machine definition itself: xstate's `toDirectedGraph`
 * gives the state tree and the event transitions; the eventless (`always`) transitions, initial
 * states, invoked actors (model calls among them) and descriptions come from the same `StateNode`s. The Mermaid, DOT and JSON exports
 * are renderings of this one structure, so they cannot disagree about the chart.
 */

/** The kinds of state node, as xstate names them. */
export type StateKind = 'atomic' | 'compound' | 'parallel' | 'final' | 'history';

/** One state node. `id` is xstate's (`step.negotiating.proposing`), unique within the machine. */
export interface GraphNode {
  id: string;
  /** Its key in its parent (`proposing`); the machine's id for the root. */
  key: string;
  /** The parent's id; null for the root. */
  parent: string | null;
  type: StateKind;
  /** The child entered by default (compound states only). */
  initial: string | null;
  /** The actors this state invokes while it is active, by `src` (see `invokeName`): model calls included. */
  invokes: string[];
  /** What happens in the state, in words: its `description` in the machine; null when it has none. */
  description: string | null;
}

/** What a reader is told inside a state's box: `invoke: runStep`, `invoke: doWork`. */
export function nodeNotes(node: GraphNode): string[] {
  return node.invokes.map((src) => `invoke: ${src}`);
}

/** One transition to one target (a transition with several targets gives several). */
export interface GraphEdge {
  source: string;
  /** For a transition with no target (actions only), the source itself. */
  target: string;
  /** The event as xstate sees it (`xstate.done.actor.0.run.planning.calling`); null when eventless. */
  event: string | null;
  /** The event as a reader says it: `interrupt`, `always`, `done: plan`, `error: doWork`, `after 500ms`. */
  label: string;
  /** The guard's name; `guard` for an anonymous inline function; null when unguarded. */
  guard: string | null;
}

/** A whole statechart: its state nodes in document order, the root first, and its transitions. */
export interface MachineGraph {
  id: string;
  nodes: GraphNode[];
  edges: GraphEdge[];
}

/** xstate's higher-order guards (`not`, `and`, `or`) are functions carrying their operands. */
const HIGHER_ORDER_GUARDS = new Set(['not', 'and', 'or']);

/**
 * The guard as a reader names it. Named guards (`'overBudget'`, `{ type: 'overBudget' }`) by
 * name; `not(x)`, `and(x, y)`, `or(x, y)` spelled out; an inline function by its own name, which
 * for an arrow function written as `guard: (…) => …` is `guard`.
 */
export function guardName(guard: unknown): string | null {
  if (guard === undefined || guard === null) return null;
  if (typeof guard === 'string') return guard;
  if (typeof guard === 'function') {
    const fn = guard as { name?: string; guards?: unknown[] };
    if (fn.name && HIGHER_ORDER_GUARDS.has(fn.name) && Array.isArray(fn.guards))
      return `${fn.name}(${fn.guards.map((g) => guardName(g) ?? 'guard').join(', ')})`;
    return fn.name && /^[A-Za-z_$][\w$]*$/.test(fn.name) ? fn.name : 'guard';
  }
  if (typeof guard === 'object' && 'type' in guard) return String(guard.type);
  return 'guard';
}

/**
 * An invoked actor as a reader names it: its `src` when the actor is named in `setup({ actors })`;
 * inline logic gets a synthetic `src` (`xstate.invoke.0.…`), so then its `id`, if one was given.
 */
function invokeName(invoke: { id: string; src: unknown }): string {
  if (typeof invoke.src === 'string' && !invoke.src.startsWith('xstate.invoke.')) return invoke.src;
  return /^\d+\./.test(invoke.id) ? 'actor' : invoke.id;
}

/** The actor a state invoked under `invokeId`, as its done and error events name it. */
function actorName(source: AnyStateNode, invokeId: string): string {
  const invoke = source.invoke.find((i) => i.id === invokeId);
  return invokeName(invoke ?? { id: invokeId, src: null });
}

/**
 * The event of a transition as a reader says it. xstate's built-in events carry generated ids
 * (`xstate.done.actor.0.step.executing`); the label names the actor or state instead.
 */
export function eventLabel(
  eventType: string,
  source: AnyStateNode,
  keys: ReadonlyMap<string, string>,
): string {
  if (eventType === '') return 'always';
  const actor = /^xstate\.(done|error)\.actor\.(.+)$/.exec(eventType);
  if (actor) return `${actor[1]}: ${actorName(source, actor[2]!)}`;
  const snapshot = /^xstate\.snapshot\.(.+)$/.exec(eventType);
  if (snapshot) return `snapshot: ${actorName(source, snapshot[1]!)}`;
  const state = /^xstate\.done\.state\.(.+)$/.exec(eventType);
  if (state) return `done: ${keys.get(state[1]!) ?? state[1]}`;
  const after = /^xstate\.after\.([^.]+)\./.exec(eventType);
  if (after) return `after ${after[1]}${/^\d+$/.test(after[1]!) ? 'ms' : ''}`;
  return eventType;
}

function nodeOf(node: AnyStateNode): GraphNode {
  const initial = node.type === 'compound' ? (node.initial?.target[0]?.id ?? null) : null;
  return {
    id: node.id,
    key: node.parent ? node.key : node.id,
    parent: node.parent?.id ?? null,
    type: node.type,
    initial,
    invokes: node.invoke.map(invokeName),
    description: node.description ?? null,
  };
}

function edgeOf(
  source: AnyStateNode,
  target: AnyStateNode,
  transition: AnyTransitionDefinition,
  keys: ReadonlyMap<string, string>,
): GraphEdge {
  return {
    source: source.id,
    target: target.id,
    event: transition.eventType === '' ? null : transition.eventType,
    label: eventLabel(transition.eventType, source, keys),
    guard: guardName(transition.guard),
  };
}

/** The statechart of `machine` as plain data: every state node and every transition. */
export function machineGraph(machine: AnyStateMachine): MachineGraph {
  const nodes: DirectedGraphNode[] = [];
  const collect = (node: DirectedGraphNode) => {
    nodes.push(node);
    node.children.forEach(collect);
  };
  collect(toDirectedGraph(machine));
  const keys = new Map(nodes.map((n) => [n.id, n.stateNode.key as string]));
  const edges = nodes.flatMap(({ stateNode, edges: evented }) => {
    // `toDirectedGraph` covers `on`, invoke `onDone`/`onError` and `after`, but not `always`.
    const eventless = (stateNode.always ?? []).flatMap((t) =>
      (t.target?.length ? t.target : [stateNode]).map((target) => edgeOf(stateNode, target, t, keys)),
    );
    return [...eventless, ...evented.map((e) => edgeOf(stateNode, e.target, e.transition, keys))];
  });
  return { id: machine.id, nodes: nodes.map((n) => nodeOf(n.stateNode)), edges };
}

/** Each state's children, in document order, by the parent's id. */
export function childrenOf(graph: MachineGraph): Map<string, GraphNode[]> {
  const children = new Map<string, GraphNode[]>();
  for (const node of graph.nodes) {
    if (node.parent === null) continue;
    children.set(node.parent, [...(children.get(node.parent) ?? []), node]);
  }
  return children;
}

/**
 * The edges as a diagram draws them. A diagram has no box for the root, so a transition of the
 * root (`on: { interrupt: … }` at the top of the machine) is drawn from each top-level state that
 * is not final: in a final top-level state the machine is done and takes no more events, so the
 * drawing means exactly what the machine does. A transition to the root is drawn to the state
 * that re-entering the root enters, its initial state.
 */
export function drawnEdges(graph: MachineGraph): GraphEdge[] {
  const root = graph.nodes[0]!;
  const topLevel = childrenOf(graph).get(root.id) ?? [];
  const sources = topLevel.filter((n) => n.type !== 'final').map((n) => n.id);
  return graph.edges.flatMap((edge) => {
    const target = edge.target === root.id ? (root.initial ?? edge.target) : edge.target;
    const from = edge.source === root.id ? sources : [edge.source];
    return from.map((source) => ({ ...edge, source, target }));
  });
}

/** The label of an edge in a diagram: the event, then the guard in brackets, as in UML. */
export function edgeText(edge: GraphEdge): string {
  return edge.guard === null ? edge.label : `${edge.label} [${edge.guard}]`;
}

/** The statechart as JSON: `{ id, nodes, edges }` (see `MachineGraph`), indented, with a final newline. */
export function toJson(machine: AnyStateMachine): string {
  return `${JSON.stringify(machineGraph(machine), null, 2)}\n`;
}
