import elkjs, { type ElkExtendedEdge, type ElkNode } from 'elkjs/lib/elk.bundled.js';
import type { AnyStateMachine } from 'xstate';
import {
  childrenOf,
  drawnEdges,
  edgeText,
  type GraphNode,
  type MachineGraph,
  machineGraph,
  nodeNotes,
} from '../graph/machine-graph.js';
import type { ChartBox, ChartEdge, ChartLayout } from './chart-types.js';

/**
 * A statechart laid out for the dashboard: every state a box, compound states holding their
 * children, read from `machineGraph` so it is the chart the code runs. The layout is ELK's
 * layered algorithm (elkjs, as Stately's own editor uses), run here in the server process: the
 * page only draws rectangles, text and paths, with no layout engine, no CDN, nothing that needs
 * the network. Compound states are laid out with their children in one pass
 * (`INCLUDE_CHILDREN`), so an arrow into a nested state is routed with the rest, and arrows are
 * orthogonal, routed between the boxes rather than across them.
 */

/** The width of a character of the 12 px system font, generously: a label must fit its box. */
const CHAR_W = 7;
const LEAF_H = 32;
const NOTES_H = 14;
const PAD = 10;
/** A compound state's name, drawn at its top left, above its children. */
const HEADER = 22;

/**
 * ELK's settings for every chart. Top to bottom, as a statechart is read; the spacing leaves
 * room between rows for a step's mark above its box (`step 1`).
 */
const LAYOUT_OPTIONS = {
  'elk.algorithm': 'layered',
  'elk.direction': 'DOWN',
  'elk.hierarchyHandling': 'INCLUDE_CHILDREN',
  'elk.edgeRouting': 'ORTHOGONAL',
  // The states in the order the machine declares them: the initial state first, and an arrow
  // back to an earlier state (a retry, a new round) is the one drawn against the flow.
  'elk.layered.considerModelOrder.strategy': 'NODES_AND_EDGES',
  'elk.layered.cycleBreaking.strategy': 'MODEL_ORDER',
  'elk.layered.spacing.nodeNodeBetweenLayers': '36',
  'elk.spacing.nodeNode': '24',
  'elk.spacing.edgeNode': '12',
  'elk.spacing.edgeEdge': '8',
  'elk.layered.spacing.edgeNodeBetweenLayers': '12',
  'elk.padding': '[top=16,left=12,bottom=12,right=12]',
  // Global coordinates for boxes and arrows alike: the page draws them all in one SVG.
  'elk.json.shapeCoords': 'ROOT',
  'elk.json.edgeCoords': 'ROOT',
} as const;

/**
 * What a compound state's own layout needs besides the root's. ELK lays out each compound
 * state's children as a graph of their own, with the options set on it; elkjs 0.12.1 fails on
 * the model-order options there, and depth-first cycle breaking keeps the states in the order of
 * their flow (`proposing`, `reviewing`, `decided`: the arrow back from `decided` is the one
 * reversed).
 */
const CHILD_OPTIONS = { 'elk.layered.cycleBreaking.strategy': 'DEPTH_FIRST' } as const;

/**
 * elkjs's bundled build: it lays out in this thread, with no worker and no file to load. It is a
 * CommonJS module whose types declare an ES default export; Node hands an ES import the
 * constructor itself, which elkjs also sets as its own `default`, the one spelling both agree on.
 */
const elk = new elkjs.default();

/** Where a compound state's children start below its top: under its name, and its notes (the session's `open` invokes the run). */
const headerOf = (node: GraphNode): number => HEADER + (nodeNotes(node).length > 0 ? NOTES_H : 0);

/** The width its name and notes need. */
const textWidth = (node: GraphNode): number =>
  Math.max(node.key.length, nodeNotes(node).join(', ').length) * CHAR_W + 2 * PAD;

/** Lays out the statechart of `machine`. */
export function layoutChart(machine: AnyStateMachine): Promise<ChartLayout> {
  return layoutGraph(machineGraph(machine));
}

/** Lays out a `MachineGraph` (see `layoutChart`). */
export async function layoutGraph(graph: MachineGraph): Promise<ChartLayout> {
  const root = graph.nodes[0]!;
  const children = childrenOf(graph);
  const kids = (node: GraphNode) => children.get(node.id) ?? [];
  const paths = new Map<string, string[]>([[root.id, [root.id]]]);
  const nodes = new Map<string, GraphNode>();
  const elkNode = (node: GraphNode, parentPath: string[]): ElkNode => {
    const path = [...parentPath, node.id];
    paths.set(node.id, path);
    nodes.set(node.id, node);
    const inner = kids(node);
    if (inner.length === 0)
      return {
        id: node.id,
        width: Math.max(92, textWidth(node)),
        height: LEAF_H + (nodeNotes(node).length > 0 ? NOTES_H : 0),
      };
    return {
      id: node.id,
      children: inner.map((child) => elkNode(child, path)),
      edges: [],
      layoutOptions: {
        ...CHILD_OPTIONS,
        'elk.padding': `[top=${headerOf(node) + PAD},left=${PAD},bottom=${PAD},right=${PAD}]`,
        'elk.nodeSize.constraints': 'MINIMUM_SIZE',
        'elk.nodeSize.minimum': `(${textWidth(node)}, ${headerOf(node) + PAD})`,
      },
    };
  };
  const top: ElkNode = {
    id: root.id,
    layoutOptions: { ...LAYOUT_OPTIONS },
    children: kids(root).map((node) => elkNode(node, [root.id])),
    edges: [],
  };
  const edges = edgesOf(graph, paths);
  placeEdges(top, edges, paths);
  const laid = await elk.layout(top);
  const boxes: ChartBox[] = [];
  const collect = (node: ElkNode) => {
    for (const child of node.children ?? []) {
      const state = nodes.get(child.id)!;
      boxes.push({
        id: state.id,
        label: state.key,
        kind: state.type,
        notes: nodeNotes(state),
        path: paths.get(state.id)!,
        x: round(child.x ?? 0),
        y: round(child.y ?? 0),
        w: round(child.width ?? 0),
        h: round(child.height ?? 0),
      });
      collect(child);
    }
  };
  collect(laid);
  const routed = new Map<string, ElkExtendedEdge>();
  const gather = (node: ElkNode) => {
    for (const edge of node.edges ?? []) routed.set(edge.id, edge);
    node.children?.forEach(gather);
  };
  gather(laid);
  return {
    id: graph.id,
    width: round(laid.width ?? 0),
    height: round(laid.height ?? 0),
    boxes,
    edges: edges.map((edge) => ({ ...edge, d: pathData(routed.get(edge.id)!) })),
  };
}

const round = (n: number) => Math.round(n * 10) / 10;

interface PendingEdge extends Omit<ChartEdge, 'd'> {
  id: string;
}

/**
 * One arrow per pair of boxes. A transition from a state to itself is not drawn, nor one into or
 * out of its own parent. The root's targetless transitions (the step's `company` and
 * `budget.others`, which only update its context) are among the first: `drawnEdges` would draw
 * them from every top-level state to the initial one, as if they restarted the chart.
 */
function edgesOf(graph: MachineGraph, paths: ReadonlyMap<string, string[]>): PendingEdge[] {
  const edges = new Map<string, PendingEdge>();
  const moving = graph.edges.filter((edge) => edge.source !== edge.target);
  for (const edge of drawnEdges({ ...graph, edges: moving })) {
    const from = paths.get(edge.source);
    const to = paths.get(edge.target);
    if (!from || !to || from.includes(edge.target) || to.includes(edge.source)) continue;
    const key = `${edge.source}\u0000${edge.target}`;
    const known = edges.get(key);
    if (known) known.labels.push(edgeText(edge));
    else
      edges.set(key, {
        id: `e${edges.size}`,
        source: edge.source,
        target: edge.target,
        labels: [edgeText(edge)],
      });
  }
  return [...edges.values()];
}

/** Puts each edge in the deepest state that holds both its ends, where ELK expects it. */
function placeEdges(top: ElkNode, edges: readonly PendingEdge[], paths: ReadonlyMap<string, string[]>): void {
  const byId = new Map<string, ElkNode>();
  const index = (node: ElkNode) => {
    byId.set(node.id, node);
    node.children?.forEach(index);
  };
  index(top);
  for (const edge of edges) {
    const from = paths.get(edge.source)!;
    const to = paths.get(edge.target)!;
    let common = 0;
    while (common < from.length - 1 && common < to.length - 1 && from[common + 1] === to[common + 1])
      common += 1;
    byId.get(from[common]!)!.edges!.push({ id: edge.id, sources: [edge.source], targets: [edge.target] });
  }
}

/** The route ELK gave an edge, as SVG path data: its start, its bends and its end. */
function pathData(edge: ElkExtendedEdge): string {
  return (edge.sections ?? [])
    .map((s) => [s.startPoint, ...(s.bendPoints ?? []), s.endPoint])
    .map((points) => points.map((p, i) => `${i === 0 ? 'M' : 'L'}${round(p.x)},${round(p.y)}`).join(' '))
    .join(' ');
}
