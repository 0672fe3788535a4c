import type { AnyStateMachine } from 'xstate';
import type { GraphFormat } from './graph-choices.js';
import { toJson } from './machine-graph.js';
import { toDot } from './to-dot.js';
import { toMermaid } from './to-mermaid.js';

/** One entry point for the three renderings of a statechart. */

const RENDERERS: Record<GraphFormat, (machine: AnyStateMachine) => string> = {
  mermaid: toMermaid,
  dot: toDot,
  json: toJson,
};

/** The statechart of `machine` in `format`: Mermaid `stateDiagram-v2`, Graphviz DOT or JSON. */
export function exportGraph(machine: AnyStateMachine, format: GraphFormat): string {
  return RENDERERS[format](machine);
}
