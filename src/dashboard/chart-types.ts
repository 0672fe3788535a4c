import type { StateKind } from '../graph/machine-graph.js';

/**
 * The shape of a statechart as the dashboard's server lays it out (`chart-layout.ts`) and the page
 * draws it (`browser/charts.ts`): boxes and arrows in SVG user units, nothing left to compute. A
 * module of types only, so that the page's project does not compile the layout engine.
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

/** The transitions from one box to another, drawn as one arrow. */
export interface ChartEdge {
  source: string;
  target: string;
  /** Each transition as the graph export labels it: the event, then the guard in brackets. */
  labels: string[];
  /** The SVG path data of the arrow: straight segments, from the source's border to the target's. */
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
