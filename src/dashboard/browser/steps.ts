import type { AttemptView, StepView } from '../run-view-types.js';
import { byId, type Cell, details, el, list, num, pill, svg, svgText, table, usd } from './dom.js';

/**
 * The steps of a run: contract rounds, retry decisions, and each attempt with its scores drawn
 * against the thresholds, its findings, feedback and output.
 */

/** One bar per criterion: the score against its threshold (a line), or a grey bar for no score. */
function scoreChart(attempt: AttemptView): SVGSVGElement {
  const rowH = 24;
  const labelW = 170;
  const barW = 300;
  const top = 6;
  const root = svg('svg', {
    class: 'scores',
    width: labelW + barW + 130,
    height: top + rowH * attempt.scores.length + 4,
    role: 'img',
    'data-attempt': attempt.attempt,
  });
  attempt.scores.forEach((s, i) => {
    const y = top + i * rowH;
    const g = svg('g', { class: 'score-row', 'data-criterion': s.criterion });
    g.append(svgText(0, y + 15, s.criterion, 'criterion'));
    g.append(svg('rect', { x: labelW, y: y + 3, width: barW, height: 16, class: 'track' }));
    const cls = s.score === null ? 'missing' : s.passed ? 'pass' : 'fail';
    const w = s.score === null ? barW : (s.score / 10) * barW;
    g.append(svg('rect', { x: labelW, y: y + 3, width: w, height: 16, class: `bar ${cls}` }));
    const tx = labelW + (s.threshold / 10) * barW;
    g.append(svg('line', { x1: tx, x2: tx, y1: y, y2: y + 22, class: 'threshold' }));
    g.append(svgText(labelW + barW + 8, y + 15, s.score === null ? 'no score' : num(s.score), 'score'));
    g.append(svgText(labelW + barW + 62, y + 15, `≥ ${num(s.threshold)}`, 'threshold-value'));
    root.append(g);
  });
  return root;
}

function renderAttempt(step: StepView, attempt: AttemptView): HTMLDivElement {
  const box = el('div', 'attempt');
  const head = el('h3');
  head.append(el('span', null, `Attempt ${attempt.attempt} `), pill(attempt.verdict ?? 'running'));
  if (attempt.reason)
    head.append(el('span', 'muted', ` ${attempt.reason}, weighted mean ${num(attempt.weightedMean)}`));
  box.append(head);
  if (attempt.scores.length > 0) box.append(scoreChart(attempt));
  if (attempt.workProblem) box.append(el('p', 'problem', `Invalid work: ${attempt.workProblem}`));
  if (attempt.evaluationProblem)
    box.append(el('p', 'problem', `Invalid evaluation: ${attempt.evaluationProblem}`));
  if (attempt.summary !== null) box.append(el('p', 'summary', `Evaluation: ${attempt.summary}`));
  if (attempt.findings.length) box.append(el('div', 'muted', 'Findings'), list(attempt.findings));
  if (attempt.feedback.length) box.append(el('div', 'muted', 'Actionable feedback'), list(attempt.feedback));
  if (attempt.output !== null) {
    const key = `${step.stepNumber}.${attempt.attempt}.output`;
    box.append(details(key, 'Work output', el('pre', 'text output', attempt.output)));
  }
  return box;
}

function contractRounds(step: StepView): HTMLTableElement {
  const rows = step.rounds.map((r): Cell[] => {
    const proposal = el('div');
    proposal.append(el('strong', null, r.title), list(r.acceptanceCriteria));
    const review = r.review
      ? pill(r.review.status, r.review.status === 'approved' ? 'pass' : 'fail')
      : 'waiting';
    const amendments = r.review?.amendments.length ? list(r.review.amendments) : '—';
    return [r.round, proposal, review, amendments];
  });
  return table(['Round', 'Proposal', 'Review', 'Amendments'], rows);
}

function renderStep(step: StepView): HTMLDivElement {
  const box = el('div', 'step');
  box.dataset.step = String(step.stepNumber);
  const head = el('h3');
  head.append(el('span', null, `Step ${step.stepNumber}: ${step.title} `), pill(step.status));
  if (step.keptFrom === null) {
    const { calls, costUsd } = step.usage;
    head.append(
      el('span', 'muted step-cost', ` ${calls} model ${calls === 1 ? 'call' : 'calls'}, ${usd(costUsd)}`),
    );
  }
  box.append(head);
  if (step.keptFrom !== null)
    box.append(el('p', 'kept', `Kept from run ${step.keptFrom}, where it passed: not run again.`));
  if (step.rounds.length) box.append(el('div', 'muted', 'Contract rounds'), contractRounds(step));
  if (step.contract) {
    const { imposed, outstanding } = step.contract;
    const text = imposed
      ? `Contract imposed at the round limit, with ${outstanding.length} outstanding amendments.`
      : 'Contract agreed.';
    box.append(el('p', null, text));
  }
  if (step.decisions.length) {
    const decisions = step.decisions.map(
      (d) =>
        `${d.signal} → attempt ${d.nextAttempt} (weighted mean ${num(d.previousMean)} → ${num(d.lastMean)})`,
    );
    box.append(el('div', 'muted', 'Retry decisions'), list(decisions, 'plain decisions'));
  }
  for (const attempt of step.attempts) box.append(renderAttempt(step, attempt));
  return box;
}

/** The steps section: one block per step run. */
export function renderSteps(steps: readonly StepView[]): void {
  const section = byId('steps');
  if (steps.length === 0) section.replaceChildren();
  else section.replaceChildren(el('h2', null, 'Steps'), ...steps.map(renderStep));
}
