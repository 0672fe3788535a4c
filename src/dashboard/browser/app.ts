import type { RunList, RunView } from '../run-view-types.js';
import { type Charts, renderCharts } from './charts.js';
import { byId } from './dom.js';
import { renderOverview, renderPhases, renderPlan, renderRuns, renderTimeline } from './sections.js';
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
let lastView: RunView | null = null;

function render(view: RunView): void {
  lastView = view;
  byId('empty').hidden = true;
  renderOverview(view);
  if (charts) renderCharts(charts, view);
  renderPlan(view);
  renderSteps(view.steps);
  renderPhases(view);
  renderTimeline(view);
  document.body.dataset.run = view.runId;
  document.body.dataset.status = view.status;
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
  stream.addEventListener('runs', (e) =>
    renderRuns(JSON.parse((e as MessageEvent<string>).data) as RunList, selected),
  );
  stream.addEventListener('view', (e) => render(JSON.parse((e as MessageEvent<string>).data) as RunView));
}

async function loadCharts(): Promise<void> {
  const response = await fetch('/api/charts');
  charts = (await response.json()) as Charts;
  if (lastView) renderCharts(charts, lastView);
}

function start(): void {
  const select = byId<HTMLSelectElement>('run-select');
  select.addEventListener('change', () => {
    selected = select.value;
    connect();
  });
  // Without the layouts the page still shows everything but the charts: report, do not stop.
  loadCharts().catch((error: unknown) => console.error('pge dashboard: no chart layouts:', error));
  connect();
}

if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
else start();
