import type { AnyStateMachine } from 'xstate';
import {
  childrenOf,
  drawnEdges,
  edgeText,
  type GraphNode,
  type MachineGraph,
  machineGraph,
  nodeNotes,
  type StateKind,
} from '../graph/machine-graph.js';

/**
 * A statechart laid out for the dashboard: every state a box, compound states holding their
 * children, read from `machineGraph` so it is the chart the code runs. The layout is computed
 * here rather than in the page, which then only draws rectangles, text and paths: no layout
 * engine, no CDN, nothing that needs the network. Top-level states go in one row, final states
 * in a second row below, children of a compound state in a row inside it.
 */

/** One state's box, in SVG user units. */
export interface ChartBox {
  /** xstate's state id, as `ActiveStates` names it. */
  id: string;
  label: string;
  kind: StateKind;
  /** What is shown under its name: the actors it invokes and the model calls it makes (`nodeNotes`). */
  notes: string[];
  /** The ids of the state and its ancestors, so the page can highlight the path to the active state. */
  path: string[];
  x: number;
  y: number;
  w: number;
  h: number;
}

/** The transitions between two boxes, drawn as one curved arrow. */
export interface ChartEdge {
  source: string;
  target: string;
  /** Each transition as the graph export labels it: the event, then the guard in brackets. */
  labels: string[];
  /** The SVG path data of the arrow. */
  d: string;
}

/** A whole chart. */
export interface ChartLayout {
  id: string;
  width: number;
  height: number;
  boxes: ChartBox[];
  edges: ChartEdge[];
}

const CHAR_W = 7;
const LEAF_H = 32;
const INVOKE_H = 14;
const PAD = 10;
const HEADER = 20;
const GAP = 16;
const ROW_GAP = 56;
const MARGIN = 12;

interface Size {
  w: number;
  h: number;
}

/** Where a compound state's children start below its top: under its name, and its notes (the session's `open` invokes the run). */
const headerOf = (node: GraphNode): number => HEADER + (nodeNotes(node).length > 0 ? INVOKE_H : 0);

/** Lays out the statechart of `machine`. */
export function layoutChart(machine: AnyStateMachine): ChartLayout {
  return layoutGraph(machineGraph(machine));
}

/** Lays out a `MachineGraph` (see `layoutChart`). */
export function layoutGraph(graph: MachineGraph): ChartLayout {
  const root = graph.nodes[0]!;
  const children = childrenOf(graph);
  const kids = (node: GraphNode) => children.get(node.id) ?? [];
  const sizes = new Map<string, Size>();
  const measure = (node: GraphNode): Size => {
    const inner = kids(node).map(measure);
    const notes = nodeNotes(node);
    const label = Math.max(node.key.length, notes.join(', ').length) * CHAR_W + 2 * PAD;
    const size =
      inner.length === 0
        ? { w: Math.max(92, label), h: LEAF_H + (notes.length > 0 ? INVOKE_H : 0) }
        : {
            w: Math.max(label, inner.reduce((w, s) => w + s.w, 0) + GAP * (inner.length - 1) + 2 * PAD),
            h: headerOf(node) + Math.max(...inner.map((s) => s.h)) + PAD,
          };
    sizes.set(node.id, size);
    return size;
  };
  const boxes: ChartBox[] = [];
  const place = (node: GraphNode, x: number, y: number, path: string[]) => {
    const size = sizes.get(node.id)!;
    const own = [...path, node.id];
    boxes.push({
      id: node.id,
      label: node.key,
      kind: node.type,
      notes: nodeNotes(node),
      path: own,
      ...size,
      x,
      y,
    });
    let cx = x + PAD;
    for (const child of kids(node)) {
      place(child, cx, y + headerOf(node), own);
      cx += sizes.get(child.id)!.w + GAP;
    }
  };
  const top = kids(root);
  top.forEach(measure);
  const rows = [top.filter((n) => n.type !== 'final'), top.filter((n) => n.type === 'final')];
  let y = MARGIN;
  let width = 0;
  for (const row of rows) {
    let x = MARGIN;
    const height = Math.max(0, ...row.map((n) => sizes.get(n.id)!.h));
    for (const node of row) {
      place(node, x, y, [root.id]);
      x += sizes.get(node.id)!.w + GAP;
    }
    width = Math.max(width, x - GAP + MARGIN);
    y += height + ROW_GAP;
  }
  const byId = new Map(boxes.map((b) => [b.id, b]));
  return { id: graph.id, width, height: y - ROW_GAP + MARGIN, boxes, edges: edgesOf(graph, byId) };
}

/** One arrow per pair of boxes; an arrow within one box, or into or out of its own parent, is not drawn. */
function edgesOf(graph: MachineGraph, byId: ReadonlyMap<string, ChartBox>): ChartEdge[] {
  const edges = new Map<string, ChartEdge>();
  for (const edge of drawnEdges(graph)) {
    const from = byId.get(edge.source);
    const to = byId.get(edge.target);
    if (!from || !to || from.path.includes(to.id) || to.path.includes(from.id)) continue;
    const key = `${from.id}\u0000${to.id}`;
    const known = edges.get(key);
    if (known) known.labels.push(edgeText(edge));
    else edges.set(key, { source: from.id, target: to.id, labels: [edgeText(edge)], d: arrow(from, to) });
  }
  return [...edges.values()];
}

/** Where the line from a box's centre towards (dx, dy) leaves the box. */
function border(box: ChartBox, dx: number, dy: number): [number, number] {
  const cx = box.x + box.w / 2;
  const cy = box.y + box.h / 2;
  const t = Math.min(
    dx === 0 ? Number.POSITIVE_INFINITY : box.w / 2 / Math.abs(dx),
    dy === 0 ? Number.POSITIVE_INFINITY : box.h / 2 / Math.abs(dy),
  );
  return [cx + dx * t, cy + dy * t];
}

/**
 * A quadratic curve between the borders of two boxes, bent to its left, so that the arrows of
 * A→B and B→A do not lie on top of each other.
 */
function arrow(from: ChartBox, to: ChartBox): string {
  const dx = to.x + to.w / 2 - (from.x + from.w / 2);
  const dy = to.y + to.h / 2 - (from.y + from.h / 2);
  const [x1, y1] = border(from, dx, dy);
  const [x2, y2] = border(to, -dx, -dy);
  const bend = 0.15;
  const mx = (x1 + x2) / 2 - (y2 - y1) * bend;
  const my = (y1 + y2) / 2 + (x2 - x1) * bend;
  const r = (n: number) => Math.round(n * 10) / 10;
  return `M${r(x1)},${r(y1)} Q${r(mx)},${r(my)} ${r(x2)},${r(y2)}`;
}
