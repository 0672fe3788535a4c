import type { AnyStateMachine } from 'xstate';
import {
  childrenOf,
  drawnEdges,
  edgeText,
  type GraphNode,
  type MachineGraph,
  machineGraph,
  nodeNotes,
} from './machine-graph.js';

/**
 * Graphviz DOT from a machine definition. Node ids are xstate's state ids. A compound or parallel
 * state is a cluster, and inside it a small dot under the state's own id stands for the state: it
 * is the initial pseudo-state, and transitions to or from the state attach to it, clipped at the
 * cluster's border (`compound=true` with `lhead`/`ltail`). Final states have a double border.
 */

/** A DOT double-quoted string. */
function quote(value: string): string {
  return `"${value.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\r?\n/g, '\\n')}"`;
}

/** The root is the whole digraph, not a cluster. */
const isCluster = (node: GraphNode) =>
  node.parent !== null && (node.type === 'compound' || node.type === 'parallel');

function clusterId(node: GraphNode): string {
  return quote(`cluster_${node.id}`);
}

function nodeLine(node: GraphNode): string {
  const lines = [node.type === 'history' ? 'H' : node.key, ...nodeNotes(node)];
  const attributes = [`label=${quote(lines.join('\n'))}`];
  if (node.type === 'final') attributes.push('peripheries=2');
  if (node.type === 'history') attributes.push('shape=circle');
  return `${quote(node.id)} [${attributes.join(', ')}];`;
}

/** Whether `id` is `ancestor` or below it. */
function within(graph: MachineGraph, id: string, ancestor: string): boolean {
  const parents = new Map(graph.nodes.map((n) => [n.id, n.parent]));
  for (let at: string | null | undefined = id; at; at = parents.get(at)) if (at === ancestor) return true;
  return false;
}

/** Renders the statechart of `machine` as a Graphviz `digraph`, with a final newline. */
export function toDot(machine: AnyStateMachine): string {
  const graph = machineGraph(machine);
  const children = childrenOf(graph);
  const byId = new Map(graph.nodes.map((n) => [n.id, n]));
  const root = graph.nodes[0]!;
  const lines = [
    `digraph ${quote(graph.id)} {`,
    '  compound=true;',
    '  fontname="Helvetica";',
    '  node [shape=box, style=rounded, fontname="Helvetica", fontsize=11];',
    '  edge [fontname="Helvetica", fontsize=9];',
  ];

  /** The point that stands for a compound or parallel state, and the arrows it starts. */
  const entry = (node: GraphNode, pad: string) => {
    lines.push(`${pad}${quote(node.id)} [shape=point, width=0.12, label=""];`);
    // A compound state enters its initial child; a parallel state enters every region.
    const entered =
      node.type === 'parallel'
        ? (children.get(node.id) ?? []).map((c) => c.id)
        : node.initial
          ? [node.initial]
          : [];
    for (const target of entered) {
      const lhead = isCluster(byId.get(target)!) ? ` [lhead=${clusterId(byId.get(target)!)}]` : '';
      lines.push(`${pad}${quote(node.id)} -> ${quote(target)}${lhead};`);
    }
  };

  const declare = (parent: GraphNode, depth: number) => {
    const pad = '  '.repeat(depth);
    for (const node of children.get(parent.id) ?? []) {
      if (!isCluster(node)) {
        lines.push(`${pad}${nodeLine(node)}`);
        continue;
      }
      const note = nodeNotes(node)
        .map((line) => `\n${line}`)
        .join('');
      lines.push(`${pad}subgraph ${clusterId(node)} {`);
      lines.push(`${pad}  label=${quote(`${node.key}${note}`)};`);
      lines.push(`${pad}  style=${node.type === 'parallel' ? '"rounded,dashed"' : 'rounded'};`);
      entry(node, `${pad}  `);
      declare(node, depth + 1);
      lines.push(`${pad}}`);
    }
  };
  entry(root, '  ');
  declare(root, 1);

  for (const edge of drawnEdges(graph)) {
    const attributes = [`label=${quote(edgeText(edge))}`];
    const source = byId.get(edge.source)!;
    const target = byId.get(edge.target)!;
    // Graphviz cannot clip at a cluster that holds the other end too (it warns and ignores it).
    if (isCluster(source) && !within(graph, target.id, source.id))
      attributes.push(`ltail=${clusterId(source)}`);
    if (isCluster(target) && !within(graph, source.id, target.id))
      attributes.push(`lhead=${clusterId(target)}`);
    lines.push(`  ${quote(edge.source)} -> ${quote(edge.target)} [${attributes.join(', ')}];`);
  }
  lines.push('}');
  return `${lines.join('\n')}\n`;
}
