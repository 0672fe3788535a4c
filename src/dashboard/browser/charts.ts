import type { ChartBox, ChartLayout } from '../chart-types.js';
import type { ActiveStates, CallView, RunView, StepState } from '../run-view-types.js';
import { followPointer, TIP_ATTRIBUTE } from './chart-tip.js';
import { byId, el, svg, svgText } from './dom.js';

/**
 * The session, run and step statecharts, drawn from the layouts the server computed
 * (`/api/charts`): boxes, labels and arrows only, with the active state and the path to it
 * highlighted. Steps run side by side, so the one step chart highlights the state of every step
 * running, each marked with the steps that stand in it.
 */

/** The three layouts, as `/api/charts` sends them. */
export interface Charts {
  session: ChartLayout;
  run: ChartLayout;
  step: ChartLayout;
}

const isCompound = (box: ChartBox) => box.kind === 'compound' || box.kind === 'parallel';

/** A state's name in a chart, without the machine's (`negotiating.proposing`). */
const stateName = (id: string) => id.slice(id.indexOf('.') + 1);

function drawEdges(root: SVGSVGElement, layout: ChartLayout, markerId: string): void {
  for (const edge of layout.edges) {
    const route = `${stateName(edge.source)} → ${stateName(edge.target)}`;
    const g = svg('g', {
      class: 'edge',
      'data-source': edge.source,
      role: 'img',
      'aria-label': `${route}: ${edge.labels.join('; ')}`,
      [TIP_ATTRIBUTE]: [...edge.labels, route].join('\n'),
    });
    // A wide invisible stroke under the line: a one-pixel line is hard to point at.
    g.append(
      svg('path', { d: edge.d, class: 'hit' }),
      svg('path', { d: edge.d, class: 'line', 'marker-end': `url(#${markerId})` }),
    );
    root.append(g);
  }
}

/** The states highlighted in a chart, each with its mark (which steps stand there) or null. */
type Highlights = ReadonlyMap<string, string | null>;

function drawBox(box: ChartBox): SVGGElement {
  const g = svg('g', { class: `state ${box.kind}`, 'data-state': box.id, role: 'img' });
  const title = svg('title');
  title.textContent = box.id;
  g.append(title, svg('rect', { x: box.x, y: box.y, width: box.w, height: box.h, rx: 6 }));
  const compound = isCompound(box);
  g.append(svgText(box.x + 8, box.y + (compound ? 14 : 20), box.label, 'label'));
  if (box.notes.length > 0)
    g.append(svgText(box.x + 8, box.y + (compound ? 28 : 34), box.notes.join(', '), 'invoke'));
  return g;
}

/** The width of a character of a step's mark (10 px, bold), generously. */
const MARK_CHAR_W = 6.5;

/**
 * A step's mark (`step 1`, `steps 1, 2`): a badge on the top border of its state's box, at the
 * right, drawn over whatever passes there so that it stays readable.
 */
function drawMark(box: ChartBox, mark: string): SVGGElement {
  const w = mark.length * MARK_CHAR_W + 10;
  const x = box.x + box.w - w - 6;
  const y = box.y - 8;
  const g = svg('g', { class: 'step-mark' });
  g.append(
    svg('rect', { x, y, width: w, height: 15, rx: 7.5, class: 'step-mark-badge' }),
    svgText(x + w / 2, y + 11, mark, 'step-mark'),
  );
  return g;
}

/** The chart of `layout`, its states not highlighted; pointing at an arrow shows its transitions. */
function buildChart(host: HTMLElement, layout: ChartLayout): SVGSVGElement {
  // The layout's own size, and no wider than the page (`max-width: 100%` in the stylesheet):
  // scaled down to fit a narrow window, never scaled up.
  const root = svg('svg', {
    class: 'statechart',
    'data-chart': layout.id,
    width: layout.width,
    height: layout.height,
    viewBox: `0 0 ${layout.width} ${layout.height}`,
    role: 'group',
  });
  const heading = host.closest('[aria-labelledby]')?.getAttribute('aria-labelledby');
  if (heading) root.setAttribute('aria-labelledby', heading);
  const markerId = `${host.id}-arrow`;
  const defs = svg('defs');
  const marker = svg('marker', {
    id: markerId,
    viewBox: '0 0 10 10',
    refX: 9,
    refY: 5,
    // In user units, not stroke widths: the arrowhead keeps its size on a highlighted arrow.
    markerUnits: 'userSpaceOnUse',
    markerWidth: 7,
    markerHeight: 7,
    orient: 'auto-start-reverse',
  });
  marker.append(svg('path', { d: 'M0,0 L10,5 L0,10 z', class: 'arrowhead' }));
  defs.append(marker);
  root.append(defs);
  // Compound states first, then the arrows, then the leaves: the arrows stay visible inside the
  // compound states they cross into or out of.
  for (const box of layout.boxes.filter(isCompound)) root.append(drawBox(box));
  drawEdges(root, layout, markerId);
  for (const box of layout.boxes.filter((b) => !isCompound(b))) root.append(drawBox(box));
  followPointer(root);
  return root;
}

/** Highlights each state of `active` and its ancestors in `root`, and the arrows that leave them. */
function highlight(root: SVGSVGElement, layout: ChartLayout, active: Highlights): void {
  const onPath = new Set(layout.boxes.filter((b) => active.has(b.id)).flatMap((b) => b.path));
  const boxes = new Map(layout.boxes.map((b) => [b.id, b]));
  for (const g of root.querySelectorAll<SVGGElement>('g.state')) {
    const id = g.getAttribute('data-state') ?? '';
    const box = boxes.get(id);
    if (!box) continue;
    const state = active.has(id) ? 'active' : onPath.has(id) ? 'on-path' : null;
    g.setAttribute('class', `state ${box.kind}${state ? ` ${state}` : ''}`);
    g.querySelector('g.step-mark')?.remove();
    const mark = active.get(id);
    if (mark) g.append(drawMark(box, mark));
    const notes = box.notes.length > 0 ? ` (${box.notes.join(', ')})` : '';
    g.setAttribute(
      'aria-label',
      `${box.label}${notes}${state ? `, ${state.replace('-', ' ')}` : ''}${mark ? `, ${mark}` : ''}`,
    );
  }
  for (const g of root.querySelectorAll<SVGGElement>('g.edge'))
    g.classList.toggle('from-active', onPath.has(g.getAttribute('data-source') ?? ''));
}

/**
 * Draws `layout` into `host`, highlighting each state of `active` and its ancestors; a state
 * given a mark carries it (`step 1`). The chart is built once and highlighted again on each update,
 * so that an arrow's tooltip stays up while the run moves.
 */
export function drawChart(host: HTMLElement, layout: ChartLayout, active: Highlights): void {
  let root = host.querySelector<SVGSVGElement>('svg.statechart');
  if (root?.getAttribute('data-chart') !== layout.id) {
    root = buildChart(host, layout);
    host.replaceChildren(root);
  }
  highlight(root, layout, active);
}

/** `state` highlighted with no mark, or nothing when it is null. */
const only = (state: string | null): Highlights => new Map(state === null ? [] : [[state, null]]);

/** The transitions that leave the active state or one of its ancestors, as text. */
function transitionsFrom(layout: ChartLayout, active: string): string[] {
  const box = layout.boxes.find((b) => b.id === active);
  if (!box) return [];
  return layout.edges
    .filter((e) => box.path.includes(e.source))
    .map((e) => `${e.labels.join(' | ')} → ${e.target}`);
}

/**
 * The steps to show in the step chart: every step running; when none runs (between steps, or the
 * run has ended), the latest step, where it ended.
 */
function shownSteps(active: ActiveStates): StepState[] {
  if (active.steps.length > 0) return active.steps;
  return active.step === null || active.stepNumber === null
    ? []
    : [{ step: active.step, stepNumber: active.stepNumber }];
}

/** Each state the steps stand in, marked with the steps there (`step 1`, `steps 1, 2`). */
function stepHighlights(steps: readonly StepState[]): Highlights {
  const numbers = new Map<string, number[]>();
  for (const { step, stepNumber } of steps) numbers.set(step, [...(numbers.get(step) ?? []), stepNumber]);
  return new Map(
    [...numbers].map(([state, n]) => [state, `${n.length === 1 ? 'step' : 'steps'} ${n.join(', ')}`]),
  );
}

/** The step chart's title: the steps it shows, by number and title (`Steps 1 and 2 statechart: …; …`). */
function stepChartTitle(steps: readonly StepState[], view: RunView): string {
  if (steps.length === 0) return 'Step statechart (no step yet)';
  const numbers = steps.map((s) => s.stepNumber);
  const titles = numbers.map((n) => view.steps.filter((s) => s.stepNumber === n).pop()?.title ?? '');
  const last = numbers.pop();
  const which = numbers.length === 0 ? `Step ${last}` : `Steps ${numbers.join(', ')} and ${last}`;
  return `${which} statechart: ${titles.join('; ')}`;
}

/**
 * A call in flight, as the child actor of the chart state that made it: the run's (the plan), or
 * its step's.
 */
function callLine(call: CallView, active: ActiveStates | null, steps: readonly StepState[]): string {
  const step = steps.find((s) => s.stepNumber === call.stepNumber);
  const caller = call.stepNumber === null ? active?.run : step && `step ${step.stepNumber}: ${step.step}`;
  return `Call in flight: ${call.actor} (child actor of ${caller ?? 'the run'}), served by the ${call.role}, request ${call.requestId} since ${call.since}`;
}

/** The three charts for `view`, with the state of every step running and where each chart can go next. */
export function renderCharts(charts: Charts, view: RunView): void {
  // Null while the run's charts cannot be replayed (its first events are still to come): nothing is highlighted.
  const active = view.active;
  const steps = active ? shownSteps(active) : [];
  drawChart(byId('session-chart'), charts.session, only(active?.session ?? null));
  drawChart(byId('run-chart'), charts.run, only(active?.run ?? null));
  byId('step-chart-title').textContent = stepChartTitle(steps, view);
  drawChart(byId('step-chart'), charts.step, stepHighlights(steps));
  const session = active ? transitionsFrom(charts.session, active.session) : [];
  const run = active ? transitionsFrom(charts.run, active.run) : [];
  const states = active
    ? [active.session, active.run, ...steps.map((s) => `step ${s.stepNumber}: ${s.step}`)]
    : [];
  byId('next-transitions').replaceChildren(
    el('div', 'active-states', states.length ? `Active: ${states.join(' · ')}` : ''),
    ...view.calls.map((call) => el('div', 'call-in-flight', callLine(call, active, steps))),
    el('div', null, session.length ? `Session can go: ${session.join('; ')}` : ''),
    el('div', null, run.length ? `Run can go: ${run.join('; ')}` : ''),
    ...steps.map(({ step, stepNumber }) => {
      const next = transitionsFrom(charts.step, step);
      return el('div', null, next.length ? `Step ${stepNumber} can go: ${next.join('; ')}` : '');
    }),
  );
}
