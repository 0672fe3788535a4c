import type { RunView, Usage } from '../run-view-types.js';
import { byId, type Cell, el, facts, num, pill, secs, svg, table, usd } from './dom.js';

/** The run's overview, plan, usage by phase and by step, and event timeline. */

export function renderOverview(view: RunView): void {
  const status = pill(view.status);
  status.id = 'run-status';
  const t = view.totals;
  const { outcome, models } = view;
  byId('overview').replaceChildren(
    el('h2', null, 'Run'),
    facts([
      ['Task', view.task],
      ['Run id', view.runId],
      [
        'Job',
        view.job && (view.job.run > 1 || view.job.id !== view.runId)
          ? `run ${view.job.run} of job ${view.job.id}${view.job.continues ? `, continuing run ${view.job.continues}` : ''}`
          : null,
      ],
      ['Status', status],
      ['Outcome', outcome ? outcome.summary : null],
      ['Stopped because', outcome?.reason ? `${outcome.reason}: ${outcome.message}` : null],
      ['Started', view.startedAt],
      ['Started by', view.startedBy],
      ['Duration', secs(view.durationMs)],
      ['Model calls', `${t.calls} (${secs(t.latencyMs)} in calls)`],
      [
        'Tokens',
        `${t.promptTokens + t.completionTokens} (${t.promptTokens} prompt, ${t.completionTokens} completion)`,
      ],
      ['Cost', usd(t.costUsd)],
      [
        'Models',
        models
          ? `planner ${models.planner}, generator ${models.generator}, evaluator ${models.evaluator}`
          : null,
      ],
    ]),
  );
}

/** The plan's steps and its rubric, as tables: in the plan section, and next to a plan gate's buttons. */
export function planTables(plan: NonNullable<RunView['plan']>): HTMLElement[] {
  const steps = plan.steps.map((s, i): Cell[] => {
    const cell = el('div');
    cell.append(el('strong', 'step-title', s.title), el('div', 'muted', s.description));
    return [i + 1, cell, s.dependsOn.join(', ') || '—', pill(s.status)];
  });
  const criteria = plan.criteria.map((c): Cell[] => [c.name, c.weight, num(c.threshold), c.description]);
  return [
    el('p', 'scope', plan.scope),
    table(['#', 'Step', 'Depends on', 'Status'], steps),
    el('h3', null, 'Criteria'),
    table(['Criterion', 'Weight', 'Threshold', 'Description'], criteria, [false, false, true, false]),
  ];
}

export function renderPlan(view: RunView): void {
  const section = byId('plan');
  const plan = view.plan;
  if (!plan) section.replaceChildren();
  else
    section.replaceChildren(
      el('h2', null, plan.replan > 0 ? `Plan (replan ${plan.replan})` : 'Plan'),
      ...planTables(plan),
    );
}

function usageBar(value: number, max: number): SVGSVGElement {
  const root = svg('svg', { width: 120, height: 12, class: 'usage' });
  root.append(svg('rect', { x: 0, y: 2, width: 120, height: 8, class: 'track' }));
  root.append(
    svg('rect', { x: 0, y: 2, width: max > 0 ? (value / max) * 120 : 0, height: 8, class: 'bar pass' }),
  );
  return root;
}

/** A line of a usage table: its label, the calls' counts, cost and time, and a bar of the time (none when `maxMs` is null). */
function usageRow(label: string, u: Usage, maxMs: number | null): Cell[] {
  const bar = maxMs === null ? '' : usageBar(u.latencyMs, maxMs);
  return [label, u.calls, u.promptTokens, u.completionTokens, usd(u.costUsd), secs(u.latencyMs), bar];
}

export function renderPhases(view: RunView): void {
  const maxMs = Math.max(...view.phases.map((p) => p.latencyMs));
  const rows = view.phases.map((p) => usageRow(p.phase, p, maxMs));
  rows.push(usageRow('total', view.totals, null));
  const headers = ['Phase', 'Calls', 'Prompt tokens', 'Completion tokens', 'Cost', 'Time in calls', ''];
  const numeric = [false, true, true, true, true, true, false];
  const section = byId('phases');
  section.replaceChildren(el('h2', null, 'Usage by phase'), table(headers, rows, numeric));
  if (view.steps.length === 0) return;
  // Each run of a step (a step run again after a replan has a line of its own); the plan's calls are the run's.
  const stepMs = Math.max(...view.steps.map((s) => s.usage.latencyMs));
  const stepRows = view.steps.map((s) => usageRow(`${s.stepNumber}. ${s.title}`, s.usage, stepMs));
  const byStep = table(['Step', ...headers.slice(1)], stepRows, numeric);
  byStep.classList.add('by-step');
  section.append(el('h2', null, 'Usage by step'), byStep);
}

export function renderTimeline(view: RunView): void {
  const section = byId('timeline');
  const old = section.querySelector('ol');
  // Follow the end of the timeline only when the user had not scrolled up to read.
  const atEnd = !old || old.scrollTop + old.clientHeight >= old.scrollHeight - 4;
  const ol = el('ol');
  for (const e of view.timeline) {
    const li = el('li');
    li.dataset.type = e.type;
    li.append(
      el('span', 'seq', `#${e.seq}`),
      el('span', 'ts', e.ts.slice(11, 23)),
      el('span', 'text', e.text),
    );
    ol.append(li);
  }
  section.replaceChildren(el('h2', null, `Timeline (${view.timeline.length} events)`), ol);
  if (atEnd) ol.scrollTop = ol.scrollHeight;
}
