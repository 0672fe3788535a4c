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
 * Mermaid `stateDiagram-v2` from a machine definition. Compound states are composite states,
 * parallel regions are separated by `--`, `[*] -->` marks initial states and `--> [*]` final
 * ones; invoked actors are written into the state's box.
 *
 * Mermaid places a state in the composite where its id first appears, and its ids are global to
 * the diagram. So every state is declared first, inside its composite, under an id built from its
 * whole path (`planning_calling`: keys repeat across composites, as `gate` and `calling` may); the
 * transitions come after, at the top level, where they move no state.
 */

// Words of the stateDiagram grammar; a state with one of these keys gets an id with a suffix.
const KEYWORDS = new Set([
  'state',
  'note',
  'end',
  'as',
  'direction',
  'class',
  'classdef',
  'style',
  'hide',
  'scale',
]);

/**
 * Mermaid ids: the path of keys below the root, sanitised and unique. The root has no box; it
 * gets an id only for the rare drawing that needs one (see `drawnEdges`).
 */
function mermaidIds(graph: MachineGraph): Map<string, string> {
  const ids = new Map<string, string>();
  const taken = new Set<string>();
  const unique = (stateId: string, base: string) => {
    let id = KEYWORDS.has(base.toLowerCase()) ? `${base}_` : base;
    for (let n = 2; taken.has(id); n++) id = `${base}_${n}`;
    taken.add(id);
    ids.set(stateId, id);
  };
  const paths = new Map<string, string>();
  const [root, ...states] = graph.nodes;
  const clean = (key: string) => key.replace(/[^A-Za-z0-9_]/g, '_');
  for (const node of states) {
    const parentPath = paths.get(node.parent!);
    const path = parentPath ? `${parentPath}_${clean(node.key)}` : clean(node.key);
    paths.set(node.id, path);
    unique(node.id, path);
  }
  unique(root!.id, clean(root!.key));
  return ids;
}

/** Text after a colon runs to the end of the line; `;` would end the statement and `#` start an entity. */
function text(value: string): string {
  return value.replace(/[\r\n;#]+/g, ' ').trim();
}

/** A quoted state label. */
function label(value: string): string {
  return `"${text(value).replace(/"/g, "'")}"`;
}

function notes(node: GraphNode): string {
  return nodeNotes(node).join(', ');
}

/** Renders the statechart of `machine` as Mermaid `stateDiagram-v2` source, with a final newline. */
export function toMermaid(machine: AnyStateMachine): string {
  const graph = machineGraph(machine);
  const ids = mermaidIds(graph);
  const children = childrenOf(graph);
  const idOf = (stateId: string) => ids.get(stateId)!;
  const lines = ['stateDiagram-v2'];

  const declare = (parent: GraphNode, depth: number) => {
    const pad = '  '.repeat(depth);
    if (parent.initial) lines.push(`${pad}[*] --> ${idOf(parent.initial)}`);
    (children.get(parent.id) ?? []).forEach((node, i) => {
      const id = idOf(node.id);
      // A parallel state's children are its regions: Mermaid separates concurrent regions with `--`.
      if (parent.type === 'parallel' && i > 0) lines.push(`${pad}--`);
      const name = node.type === 'history' ? 'H' : node.key;
      if (node.type === 'compound' || node.type === 'parallel') {
        const note = notes(node);
        lines.push(`${pad}state ${label(note ? `${name} (${note})` : name)} as ${id} {`);
        declare(node, depth + 1);
        lines.push(`${pad}}`);
        return;
      }
      lines.push(`${pad}state ${label(name)} as ${id}`);
      const note = notes(node);
      if (note) lines.push(`${pad}${id} : ${text(note)}`);
      if (node.type === 'final') lines.push(`${pad}${id} --> [*]`);
    });
  };
  declare(graph.nodes[0]!, 1);

  for (const edge of drawnEdges(graph)) {
    lines.push(`  ${idOf(edge.source)} --> ${idOf(edge.target)} : ${text(edgeText(edge))}`);
  }
  return `${lines.join('\n')}\n`;
}
