import type { ControlInfo, ControlledView } from '../control-types.js';
import { TOKEN_HEADER } from '../control-types.js';
import type { GateView } from '../run-view-types.js';
import { byId, el, list } from './dom.js';
import { planTables } from './sections.js';

/**
 * The controls of `pge dashboard --control`: approve or reject the gate a run waits at, with what
 * is to be approved beside the buttons; cancel a run; fork an ended run from a step; start a run.
 * The server says whether it controls runs (`/api/control`, absent when read-only: then nothing
 * here is drawn) and what may be done to the run shown (its view's `control`). The token comes
 * from the address the dashboard printed (`?token=…`), which is then taken out of the address bar
 * and kept for this tab only; every action sends it in the `X-PGE-Token` header.
 */

const TOKEN_KEY = 'pge-dashboard-token';
const GATE_NAMES = { plan: 'the plan', contract: 'the contract', step: "the step's result" } as const;

let token = '';
let info: ControlInfo | null = null;
/** What the action panel was drawn for: a new view of the same state keeps what a person typed. */
let drawnFor = '';

/** Takes the token out of the address bar, keeping it for this tab (a reload then still acts). */
function takeToken(): string {
  const url = new URL(window.location.href);
  const given = url.searchParams.get('token');
  if (given !== null) {
    url.searchParams.delete('token');
    history.replaceState(history.state, '', url.pathname + url.search + url.hash);
    sessionStorage.setItem(TOKEN_KEY, given);
    return given;
  }
  return sessionStorage.getItem(TOKEN_KEY) ?? '';
}

/** Says how an action went, where a screen reader announces it. */
function say(text: string, failed = false): void {
  const status = byId('action-status');
  status.textContent = text;
  status.className = failed ? 'failed' : 'done';
}

/** Posts an action; resolves with the run it named, or null once the refusal is shown. */
async function act(name: string, body: object): Promise<string | null> {
  say(`${name}…`);
  try {
    const response = await fetch(`/api/actions/${name}`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', [TOKEN_HEADER]: token },
      body: JSON.stringify(body),
    });
    const answer = (await response.json()) as { runId?: string; message?: string; error?: string };
    if (!response.ok || answer.runId === undefined) {
      say(`${name} refused (${response.status}): ${answer.error ?? 'no reason given'}`, true);
      return null;
    }
    say(answer.message ?? `${name}: done`);
    return answer.runId;
  } catch (error) {
    say(`${name} failed: ${String(error)}`, true);
    return null;
  }
}

/** A labelled control: the label wraps it, so its name is the label's text. */
function field(label: string, control: HTMLElement): HTMLLabelElement {
  const wrap = el('label', 'field');
  wrap.append(el('span', null, label), control);
  return wrap;
}

function numberInput(min: number, step = '1', value = ''): HTMLInputElement {
  const input = el('input');
  input.placeholder = 'default';
  input.type = 'number';
  input.min = String(min);
  input.step = step;
  input.value = value;
  return input;
}

/** A number field's value, or undefined when empty. */
function numberOf(input: HTMLInputElement): number | undefined {
  return input.value.trim() === '' ? undefined : Number(input.value);
}

function button(text: string, onClick: () => void, cls = ''): HTMLButtonElement {
  const b = el('button', cls, text);
  b.type = 'button';
  b.addEventListener('click', onClick);
  return b;
}

/** The panel of one gate: what is to be approved, a reason, Approve and Reject. */
function gatePanel(view: ControlledView, gate: GateView): HTMLElement {
  const box = el('div', 'gate');
  box.dataset.request = gate.requestId;
  const where = gate.stepNumber === null ? '' : ` of step ${gate.stepNumber}`;
  const heading = el('h3', null, `Waiting for your decision on ${GATE_NAMES[gate.gate]}${where}`);
  // A group named by its heading: with two steps at their gates, a screen reader says which step
  // each Approve, Reject and Reason belongs to.
  heading.id = `gate-${gate.requestId}`;
  box.setAttribute('role', 'group');
  box.setAttribute('aria-labelledby', heading.id);
  box.append(heading);
  // The plan's tables say all its summary does; a contract or a result is shown as the run put it.
  if (gate.gate === 'plan' && view.plan) box.append(...planTables(view.plan));
  else box.append(el('pre', 'text gate-summary', gate.summary));
  if (gate.gate === 'step') {
    const step = [...view.steps].reverse().find((s) => s.stepNumber === gate.stepNumber);
    const attempt = step?.attempts.find((a) => a.attempt === gate.attempt);
    // The gate comes after the evaluation and before the harness's verdict: its scores are judged once decided.
    if (attempt?.summary != null)
      box.append(el('p', 'evaluation', `Evaluation of attempt ${attempt.attempt}: ${attempt.summary}`));
    if (attempt?.findings.length) box.append(el('div', 'muted', 'Findings'), list(attempt.findings));
  }
  const reason = el('textarea');
  reason.rows = 2;
  const decide = (decision: 'approve' | 'reject') => {
    const text = reason.value.trim();
    if (decision === 'reject' && text === '') {
      say('Give a reason to reject: the run takes it back to the planner or the generator.', true);
      reason.focus();
      return;
    }
    void act('decide', {
      runId: view.runId,
      gate: gate.gate,
      requestId: gate.requestId,
      decision,
      reason: decision === 'reject' ? text : null,
    });
  };
  box.append(field('Reason (needed to reject)', reason), el('div', 'buttons'));
  box.lastElementChild!.append(
    button('Approve', () => decide('approve'), 'primary'),
    button('Reject', () => decide('reject')),
  );
  return box;
}

function cancelPanel(view: ControlledView): HTMLElement {
  const box = el('div', 'cancel');
  const reason = el('input');
  box.append(
    field('Reason for cancelling (optional)', reason),
    button(
      'Cancel run',
      () => {
        void act('cancel', { runId: view.runId, reason: reason.value.trim() || null });
      },
      'danger',
    ),
  );
  return box;
}

function forkPanel(view: ControlledView, follow: (runId: string) => void): HTMLElement {
  const box = el('form', 'fork');
  const steps = view.plan?.steps.length ?? 1;
  const from = numberInput(1, '1', String(Math.min(2, steps)));
  from.max = String(steps);
  from.required = true;
  const retries = numberInput(0);
  const budget = numberInput(0.0001, 'any');
  box.append(
    el('h3', null, 'Fork this run'),
    field('Fork from step', from),
    field('Retries per step (fork)', retries),
    field('Budget in USD (fork)', budget),
    el('button', 'primary', 'Fork'),
  );
  box.addEventListener('submit', (e) => {
    e.preventDefault();
    const settings = { maxRetriesPerStep: numberOf(retries), maxCostUsd: numberOf(budget) };
    void act('fork', { runId: view.runId, fromStep: Number(from.value), settings }).then(
      (runId) => runId && follow(runId),
    );
  });
  return box;
}

/** The actions on the run shown, drawn again only when what may be done to it changes. */
export function renderControl(view: ControlledView, follow: (runId: string) => void): void {
  if (info === null || view.control === undefined) return;
  const { act: acting, fork } = view.control;
  const gates = acting ? view.gates : [];
  const key = JSON.stringify([view.runId, acting, fork, gates.map((g) => g.requestId)]);
  if (key === drawnFor) return;
  drawnFor = key;
  const section = byId('control');
  const parts: HTMLElement[] = [];
  for (const gate of gates) parts.push(gatePanel(view, gate));
  if (acting) parts.push(cancelPanel(view));
  if (fork && info.abilities.fork) parts.push(forkPanel(view, follow));
  section.hidden = parts.length === 0;
  section.replaceChildren(el('h2', null, `Act on this run (as ${info.operator})`), ...parts);
}

/** The form that starts a run. */
function startForm(abilities: ControlInfo['abilities'], follow: (runId: string) => void): HTMLElement {
  const form = el('form', 'start');
  const task = el('textarea');
  task.rows = 3;
  task.required = true;
  const model = el('input');
  model.placeholder = abilities.model ?? '';
  const steps = numberInput(1);
  const retries = numberInput(0);
  const budget = numberInput(0.0001, 'any');
  const gates = (['plan', 'contract', 'step'] as const).map((gate) => {
    const box = el('input');
    box.type = 'checkbox';
    box.value = gate;
    return box;
  });
  const waits = el('fieldset');
  waits.append(el('legend', null, 'Wait for my approval of'));
  gates.forEach((box, i) => {
    waits.append(field(['the plan', 'each contract', "each step's result"][i]!, box));
  });
  form.append(
    el('h2', null, `Start a run (${abilities.where === 'nats' ? 'on the deployment' : 'in this dashboard'})`),
  );
  form.append(field('Task', task));
  // On NATS the workers hold the models: the form names none.
  if (abilities.model !== null) {
    model.disabled = abilities.model.includes('demo');
    form.append(field('Model', model));
  }
  form.append(
    field('Max steps', steps),
    field('Retries per step', retries),
    field('Budget in USD', budget),
    waits,
    el('button', 'primary', 'Start run'),
  );
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const body = {
      task: task.value,
      ...(model.value.trim() && !model.disabled ? { model: model.value.trim() } : {}),
      maxSteps: numberOf(steps),
      maxRetriesPerStep: numberOf(retries),
      maxCostUsd: numberOf(budget),
      approve: gates.filter((g) => g.checked).map((g) => g.value),
    };
    void act('start', body).then((runId) => runId && follow(runId));
  });
  return form;
}

/**
 * Asks the server whether it controls runs; if it does, draws the start form and resolves with
 * true. A read-only dashboard answers 404, and the page stays as it is.
 */
export async function initControl(follow: (runId: string) => void): Promise<boolean> {
  token = takeToken();
  const response = await fetch('/api/control');
  if (!response.ok) return false;
  info = (await response.json()) as ControlInfo;
  const start = byId('start-run');
  start.replaceChildren(startForm(info.abilities, follow));
  start.hidden = false;
  byId('action-status').hidden = false;
  return true;
}
