import type { ControlledView } from '../control-types.js';
import type { RunList } from '../run-view-types.js';
import { type Charts, renderCharts } from './charts.js';
import { initControl, renderControl } from './control.js';
import { byId } from './dom.js';
import { initRunList, renderRunList } from './run-list.js';
import { renderOverview, renderPhases, renderPlan, renderTimeline } from './sections.js';
import { renderSteps } from './steps.js';

/**
 * The dashboard's browser script, served as `/app.js` (bundled into dist/dashboard/app.js by
 * `npm run build`, or in memory when pge runs from its sources: `app-bundle.ts`). It renders the
 * `RunView` objects the server pushes over server-sent events and the chart layouts from
 * `/api/charts`; all the meaning of events is worked out on the server (`run-view.ts`).
 */

let charts: Charts | null = null;
let selected = '';
let source: EventSource | null = null;
let lastView: ControlledView | null = null;
let lastList: RunList | null = null;

function render(view: ControlledView): void {
  lastView = view;
  byId('empty').hidden = true;
  renderOverview(view);
  renderControl(view, follow);
  if (charts) renderCharts(charts, view);
  renderPlan(view);
  renderSteps(view.steps);
  renderPhases(view);
  renderTimeline(view);
  document.body.dataset.run = view.runId;
  document.body.dataset.status = view.status;
  if (lastList) showList(lastList);
}

/** The run list, with the run the page shows marked. */
function showList(data: RunList): void {
  lastList = data;
  renderRunList(data, lastView?.runId ?? null, selected !== '', follow);
}

/** The run the address names (`?run=<id>`); `''`: none, the latest run is shown. */
const runInAddress = (): string => new URL(window.location.href).searchParams.get('run') ?? '';

/**
 * Shows run `runId` (one picked in the list, or just started or forked); `''`: the latest run. The
 * address says which, so that the browser's Back goes to the run shown before.
 */
function follow(runId: string): void {
  if (runId !== runInAddress()) {
    const url = new URL(window.location.href);
    if (runId === '') url.searchParams.delete('run');
    else url.searchParams.set('run', runId);
    history.pushState(null, '', url.pathname + url.search + url.hash);
  }
  selected = runId;
  connect();
}

/** Follows the selected run (or the latest) on the server's event stream, replacing any stream open. */
function connect(): void {
  source?.close();
  const stream = new EventSource(`/events${selected ? `?run=${encodeURIComponent(selected)}` : ''}`);
  source = stream;
  const status = byId('connection');
  stream.addEventListener('open', () => {
    status.textContent = 'live';
    status.className = 'pill passed';
  });
  stream.addEventListener('error', () => {
    status.textContent = 'reconnecting…';
    status.className = 'pill failed';
  });
  stream.addEventListener('runs', (e) => showList(JSON.parse((e as MessageEvent<string>).data) as RunList));
  stream.addEventListener('view', (e) =>
    render(JSON.parse((e as MessageEvent<string>).data) as ControlledView),
  );
}

async function loadCharts(): Promise<void> {
  const response = await fetch('/api/charts');
  charts = (await response.json()) as Charts;
  if (lastView) renderCharts(charts, lastView);
}

function start(): void {
  initRunList(() => {
    if (lastList) showList(lastList);
  });
  selected = runInAddress();
  window.addEventListener('popstate', () => {
    selected = runInAddress();
    connect();
  });
  // Without the layouts the page still shows everything but the charts: report, do not stop.
  loadCharts().catch((error: unknown) => console.error('pge dashboard: no chart layouts:', error));
  // A read-only dashboard answers 404: the page then has no controls at all.
  initControl(follow)
    .then((controlling) => {
      if (controlling && lastView) renderControl(lastView, follow);
    })
    .catch((error: unknown) => console.error('pge dashboard: no controls:', error));
  connect();
}

if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
else start();
