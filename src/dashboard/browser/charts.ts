import type { ChartBox, ChartLayout } from '../chart-layout.js';
import type { RunView } from '../run-view-types.js';
import { byId, el, svg, svgText } from './dom.js';

/**
 * The session, run and step statecharts, drawn from the layouts the server computed
 * (`/api/charts`): boxes, labels and arrows only, with the active state and the path to it
 * highlighted.
 */

/** The three layouts, as `/api/charts` sends them. */
export interface Charts {
  session: ChartLayout;
  run: ChartLayout;
  step: ChartLayout;
}

const isCompound = (box: ChartBox) => box.kind === 'compound' || box.kind === 'parallel';

function drawEdges(
  root: SVGSVGElement,
  layout: ChartLayout,
  onPath: ReadonlySet<string>,
  markerId: string,
): void {
  for (const edge of layout.edges) {
    const from = onPath.has(edge.source) ? ' from-active' : '';
    const path = svg('path', { d: edge.d, class: `edge${from}`, 'marker-end': `url(#${markerId})` });
    const title = svg('title');
    title.textContent = `${edge.labels.join('\n')}  (${edge.source} → ${edge.target})`;
    path.append(title);
    root.append(path);
  }
}

function drawBox(box: ChartBox, active: string | null, onPath: ReadonlySet<string>): SVGGElement {
  const state = box.id === active ? ' active' : onPath.has(box.id) ? ' on-path' : '';
  const g = svg('g', { class: `state ${box.kind}${state}`, 'data-state': box.id });
  const title = svg('title');
  title.textContent = box.id;
  g.append(title, svg('rect', { x: box.x, y: box.y, width: box.w, height: box.h, rx: 6 }));
  const compound = isCompound(box);
  g.append(svgText(box.x + 8, box.y + (compound ? 14 : 20), box.label, 'label'));
  if (box.notes.length > 0)
    g.append(svgText(box.x + 8, box.y + (compound ? 28 : 34), box.notes.join(', '), 'invoke'));
  return g;
}

/** Draws `layout` into `host`, highlighting the state `active` and its ancestors. */
export function drawChart(host: HTMLElement, layout: ChartLayout, active: string | null): void {
  const root = svg('svg', {
    class: 'statechart',
    width: layout.width,
    height: layout.height,
    viewBox: `0 0 ${layout.width} ${layout.height}`,
    role: 'img',
  });
  const markerId = `${host.id}-arrow`;
  const defs = svg('defs');
  const marker = svg('marker', {
    id: markerId,
    viewBox: '0 0 10 10',
    refX: 9,
    refY: 5,
    markerWidth: 7,
    markerHeight: 7,
    orient: 'auto-start-reverse',
  });
  marker.append(svg('path', { d: 'M0,0 L10,5 L0,10 z', class: 'arrowhead' }));
  defs.append(marker);
  root.append(defs);
  const activeBox = layout.boxes.find((b) => b.id === active);
  const onPath = new Set(activeBox ? activeBox.path : []);
  // Compound states first, then the arrows, then the leaves: an arrow passes under a leaf it
  // crosses but stays visible inside the compound state it belongs to.
  for (const box of layout.boxes.filter(isCompound)) root.append(drawBox(box, active, onPath));
  drawEdges(root, layout, onPath, markerId);
  for (const box of layout.boxes.filter((b) => !isCompound(b))) root.append(drawBox(box, active, onPath));
  host.replaceChildren(root);
}

/** The transitions that leave the active state or one of its ancestors, as text. */
function transitionsFrom(layout: ChartLayout, active: string): string[] {
  const box = layout.boxes.find((b) => b.id === active);
  if (!box) return [];
  return layout.edges
    .filter((e) => box.path.includes(e.source))
    .map((e) => `${e.labels.join(' | ')} → ${e.target}`);
}

/** The three charts for `view`, with the step chart of the current step and where each chart can go next. */
export function renderCharts(charts: Charts, view: RunView): void {
  // Null while the run's charts cannot be replayed (its first events are still to come): nothing is highlighted.
  const active = view.active ?? { session: null, run: null, step: null, stepNumber: null };
  drawChart(byId('session-chart'), charts.session, active.session);
  drawChart(byId('run-chart'), charts.run, active.run);
  const step =
    active.stepNumber === null
      ? undefined
      : view.steps.filter((s) => s.stepNumber === active.stepNumber).pop();
  byId('step-chart-title').textContent = step
    ? `Step ${step.stepNumber} statechart: ${step.title}`
    : 'Step statechart (no step yet)';
  drawChart(byId('step-chart'), charts.step, active.step);
  const session = active.session ? transitionsFrom(charts.session, active.session) : [];
  const run = active.run ? transitionsFrom(charts.run, active.run) : [];
  const st = active.step ? transitionsFrom(charts.step, active.step) : [];
  const states = [active.session, active.run, active.step].filter((s) => s !== null);
  byId('next-transitions').replaceChildren(
    el('div', 'active-states', states.length ? `Active: ${states.join(' · ')}` : ''),
    el(
      'div',
      'call-in-flight',
      view.call
        ? `Call in flight: ${view.call.actor} (child actor of ${active.step ?? active.run ?? 'the run'}), served by the ${view.call.role}, request ${view.call.requestId} since ${view.call.since}`
        : '',
    ),
    el('div', null, session.length ? `Session can go: ${session.join('; ')}` : ''),
    el('div', null, run.length ? `Run can go: ${run.join('; ')}` : ''),
    el('div', null, st.length ? `Step can go: ${st.join('; ')}` : ''),
  );
}
