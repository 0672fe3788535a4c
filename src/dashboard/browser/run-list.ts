import type { RunList, RunSummary } from '../run-view-types.js';
import { byId, type Cell, el, list, pill, secs, table, usd } from './dom.js';

/**
 * The run list: every run the dashboard knows at a glance (status, task, steps passed of total,
 * cost, start and duration), the runs waiting for a person first, as the server orders them. A
 * status filter narrows it; choosing a run's task shows that run below (its link, `?run=<id>`,
 * can be bookmarked).
 */

/** The status the list is narrowed to; empty for every run. */
let filter = '';

/**
 * A link to a run's page (`?run=<id>`): a plain click shows it here without a reload, and one with
 * a modifier (a new tab, a new window) does what the browser does with a link.
 */
function runLink(href: string, text: string, go: () => void): HTMLAnchorElement {
  const a = el('a', null, text);
  a.href = href;
  a.addEventListener('click', (event) => {
    if (event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
    event.preventDefault();
    go();
  });
  return a;
}

/** A run's duration: from its events once it has ended, else how long it has been going. */
function duration(run: RunSummary): string {
  if (run.durationMs !== null) return secs(run.durationMs);
  if (run.startedAt === null) return '—';
  return `${secs(Date.now() - Date.parse(run.startedAt))} so far`;
}

/** A start time as the reader's clock says it: the time for today's runs, else the date too. */
function started(iso: string | null): string {
  if (iso === null) return '—';
  const at = new Date(iso);
  return at.toDateString() === new Date().toDateString() ? at.toLocaleTimeString() : at.toLocaleString();
}

/** The status filter's choices: every status in the list with its count, and the chosen one even at 0. */
function renderFilter(runs: readonly RunSummary[]): void {
  const select = byId<HTMLSelectElement>('status-filter');
  const counts = new Map<string, number>();
  for (const run of runs) counts.set(run.status, (counts.get(run.status) ?? 0) + 1);
  if (filter !== '' && !counts.has(filter)) counts.set(filter, 0);
  const all = el('option', null, `all (${runs.length})`);
  all.value = '';
  const options = [...counts].map(([status, n]) => {
    const option = el('option', null, `${status} (${n})`);
    option.value = status;
    return option;
  });
  select.replaceChildren(all, ...options);
  select.value = filter;
}

/**
 * Renders the list. `shown` is the run the page shows (marked as current), `choose` is called
 * with the run a person picks, and `''` to follow the latest run again.
 */
export function renderRunList(
  data: RunList,
  shown: string | null,
  choosing: boolean,
  choose: (runId: string) => void,
): void {
  renderFilter(data.runs);
  const runs = data.runs.filter((r) => filter === '' || r.status === filter);
  const rows = runs.map((run): Cell[] => {
    const status = pill(run.status);
    const state = run.waitingAt === null ? status : el('span');
    if (run.waitingAt !== null) state.append(status, el('span', 'muted', ` at the ${run.waitingAt} gate`));
    const pick = runLink(`?run=${encodeURIComponent(run.runId)}`, run.task || run.runId, () =>
      choose(run.runId),
    );
    pick.title = `Show run ${run.runId}`;
    pick.dataset.run = run.runId;
    const task = el('div');
    task.append(pick, el('div', 'muted run-id', run.runId));
    return [
      state,
      task,
      run.stepsTotal === null ? '—' : `${run.stepsPassed} / ${run.stepsTotal}`,
      usd(run.costUsd),
      started(run.startedAt),
      duration(run),
    ];
  });
  const t = table(['Status', 'Task', 'Steps passed', 'Cost', 'Started', 'Duration'], rows, [
    false,
    false,
    true,
    true,
    false,
    true,
  ]);
  t.classList.add('runs');
  // The table's rows follow its header row, one per run, in the list's order.
  runs.forEach((run, i) => {
    const row = t.rows[i + 1]!;
    row.dataset.run = run.runId;
    row.dataset.status = run.status;
    if (run.runId === shown) row.setAttribute('aria-current', 'true');
  });
  const latest = runLink('?', 'Follow the latest run', () => choose(''));
  latest.dataset.run = '';
  latest.hidden = !choosing;
  const body =
    runs.length > 0 ? t : el('p', 'muted', data.runs.length > 0 ? `No run is ${filter}.` : 'No run yet.');
  // The list is drawn again at every change of any run: the link that had the keyboard's focus keeps it.
  const holder = byId('run-list');
  const focused = holder.contains(document.activeElement)
    ? (document.activeElement as HTMLElement).dataset.run
    : undefined;
  holder.replaceChildren(body, latest);
  if (focused !== undefined)
    holder.querySelector<HTMLElement>(`a[data-run="${CSS.escape(focused)}"]`)?.focus();
  const problems = byId('problems');
  problems.hidden = data.problems.length === 0;
  problems.replaceChildren(el('h2', null, 'Problems'), list(data.problems));
}

/** Re-renders the list with the status a person picks in the filter. */
export function initRunList(rerender: () => void): void {
  const select = byId<HTMLSelectElement>('status-filter');
  select.addEventListener('change', () => {
    filter = select.value;
    rerender();
  });
}
