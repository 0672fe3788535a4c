/**
 * The names `pge graph` accepts. Kept free of imports so that the help can list them without
 * loading the machines.
 */

/**
 * The statecharts that can be exported: the session (a run's life on its coordinator), the run it
 * invokes, and the step the run invokes once per plan step.
 */
export const MACHINE_NAMES = ['session', 'run', 'step'] as const;
/** A statechart by name. */
export type MachineName = (typeof MACHINE_NAMES)[number];

/** The output formats: Mermaid `stateDiagram-v2`, Graphviz DOT, or nodes and edges as JSON. */
export const GRAPH_FORMATS = ['mermaid', 'dot', 'json'] as const;
/** An output format by name. */
export type GraphFormat = (typeof GRAPH_FORMATS)[number];
