import { appendFileSync, copyFileSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Locator, Page } from 'playwright-core';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { publishEvent } from '../../src/bus/channels.js';
import { NatsBus } from '../../src/bus/nats-bus.js';
import { replayActiveStates } from '../../src/dashboard/active-state.js';
import { followLog } from '../../src/dashboard/log-follower.js';
import { followNats } from '../../src/dashboard/nats-source.js';
import { RunStore } from '../../src/dashboard/run-store.js';
import { buildRunView } from '../../src/dashboard/run-view.js';
import type { StepState } from '../../src/dashboard/run-view-types.js';
import { startDashboard } from '../../src/dashboard/server.js';
import { renderLog } from '../../src/persistence/index.js';
import type { RunEvent } from '../../src/schemas/index.js';
import { startNatsServer } from '../support/nats-server.js';
import {
  artifact,
  type Browser,
  HOSTILE_IMG,
  HOSTILE_SCRIPT,
  HostileModel,
  launchBrowser,
  openPage,
  type RecordedRun,
  ROOT,
  recordRun,
} from './support.js';

/**
 * The dashboard in a real Chromium, offline: every request that leaves 127.0.0.1 is blocked and
 * recorded, and a test fails if there was one. A run in progress (a recorded demo run's log,
 * written again in chunks with pauses), a finished run, and a run whose model answered with
 * markup. `PGE_UPDATE_SCREENSHOTS=1` also writes docs/dashboard.png from the finished run.
 */

let browser: Browser;
let demo: RecordedRun;
const open: { close(): Promise<void> }[] = [];

beforeAll(async () => {
  browser = await launchBrowser();
  demo = await recordRun('Write a short guide to brewing green tea');
}, 60_000);
afterEach(async () => {
  for (const o of open.splice(0).reverse()) await o.close();
  expect(browser.offMachine, 'requests that tried to leave the machine').toEqual([]);
});
afterAll(async () => {
  await browser?.close();
});

/** A dashboard following the log at `path`; resolves with its URL. */
async function dashboardFor(path: string): Promise<string> {
  const store = new RunStore();
  const follower = followLog(path, store, { intervalMs: 40 });
  open.push(follower);
  const dashboard = await startDashboard({ store, debounceMs: 20 });
  open.push(dashboard);
  return dashboard.url;
}

/**
 * The text of the highlighted state in a chart, or '' when none is; in the step chart, that of
 * every step running (` | ` between them).
 */
async function activeState(page: Page, chart: 'session-chart' | 'run-chart' | 'step-chart'): Promise<string> {
  return (await page.locator(`#${chart} .state.active text.label`).allTextContents()).join(' | ');
}

/** The ids of the states highlighted in a chart: the active one and its ancestors. */
async function highlighted(
  page: Page,
  chart: 'session-chart' | 'run-chart' | 'step-chart',
): Promise<string[]> {
  return page
    .locator(`#${chart} .state.active, #${chart} .state.on-path`)
    .evaluateAll((boxes) => boxes.map((b) => b.getAttribute('data-state') ?? ''));
}

/**
 * What is wider than its place: each chart against the box it is drawn in and the window, and,
 * unless `chartsOnly`, the whole page against the window. Empty when everything fits.
 */
async function overflow(page: Page, chartsOnly = false): Promise<string[]> {
  return page.locator('html').evaluate((root, only) => {
    const found: string[] = [];
    const { scrollWidth, clientWidth } = root;
    if (!only && scrollWidth > clientWidth)
      found.push(`the page is ${scrollWidth} px wide in a ${clientWidth} px window`);
    for (const chart of root.querySelectorAll('svg.statechart')) {
      const { width, right } = chart.getBoundingClientRect();
      const room = chart.parentElement!.getBoundingClientRect().width;
      const name = chart.getAttribute('data-chart');
      if (width > room + 0.5) found.push(`${name} is ${width} px wide in ${room} px`);
      if (right > clientWidth) found.push(`${name} ends at ${right} px in a ${clientWidth} px window`);
    }
    return found;
  }, chartsOnly);
}

/** Moves the pointer onto the middle of an arrow's line, as a person pointing at it would. */
async function pointAt(page: Page, arrow: Locator): Promise<void> {
  await arrow.scrollIntoViewIfNeeded();
  const line = arrow.locator('path.line');
  const { x, y } = await line.evaluate((path) => {
    const point = path.getPointAtLength(path.getTotalLength() / 2);
    const m = path.getScreenCTM()!;
    return { x: point.x * m.a + m.e, y: point.y * m.d + m.f };
  });
  await page.mouse.move(x, y);
}

function judged(events: readonly RunEvent[]) {
  return events.filter(
    (e): e is Extract<RunEvent, { type: 'step.attempt.judged' }> => e.type === 'step.attempt.judged',
  );
}

describe('dashboard in a browser', () => {
  it('follows a run while its log is written: the plan appears and the active state moves', async () => {
    const path = join(mkdtempSync(join(tmpdir(), 'pge-live-')), 'live.md');
    const url = await dashboardFor(path);
    const { page, errors } = await openPage(browser, url);
    await page.locator('#empty').waitFor();

    // Replay the log in 60 chunks, 60 ms apart, cut anywhere: a run of about four seconds.
    const chunk = Math.ceil(demo.text.length / 60);
    let written = false;
    const writing = (async () => {
      writeFileSync(path, '');
      for (let at = 0; at < demo.text.length; at += chunk) {
        appendFileSync(path, demo.text.slice(at, at + chunk));
        await new Promise((resolve) => setTimeout(resolve, 60));
      }
      written = true;
    })();

    await page.locator('#plan .step-title').first().waitFor({ timeout: 10_000 });
    // Two reads of the highlighted step state while the run goes on: they must differ.
    let first = '';
    while (first === '') {
      expect(written, 'no step state was highlighted during the run').toBe(false);
      await page.waitForTimeout(20);
      first = await activeState(page, 'step-chart');
    }
    let second = first;
    while (second === first || second === '') {
      expect(written, `the highlighted step state stayed "${first}" for the whole run`).toBe(false);
      await page.waitForTimeout(50);
      second = await activeState(page, 'step-chart');
    }
    expect(await page.locator('body').getAttribute('data-status')).toBe('running');
    expect(second).not.toBe(first);
    // The session of a run going on is live: between calls, or waiting for one's result.
    expect(await highlighted(page, 'session-chart')).toContain('session.open.live');
    await writing;

    await page.locator('body[data-status="passed"]').waitFor({ timeout: 10_000 });
    const plan = demo.events.find((e) => e.type === 'plan.created')!;
    const titles = await page.locator('#plan .step-title').allTextContents();
    expect(titles).toEqual(plan.payload.plan.steps.map((s) => s.title));
    expect(await activeState(page, 'run-chart')).toBe('completed');
    expect(await activeState(page, 'session-chart')).toBe('closed');
    expect(await page.locator('#problems').isHidden()).toBe(true);
    await page.screenshot({ path: artifact('dashboard-live.png'), fullPage: true });
    expect(errors).toEqual([]);
  });

  it('highlights the session where the run stands: waiting at a gate, for a result, closed', async () => {
    const gated = await recordRun('Write a short guide', undefined, { approve: ['plan'] }, (e, pge) => {
      if (e.type !== 'approval.requested') return;
      setTimeout(() => pge.approve(e.runId, e.payload.gate, { decision: 'approve', by: 'tester' }), 5);
    });
    const upTo = (type: RunEvent['type']) =>
      gated.events.slice(0, gated.events.findIndex((e) => e.type === type) + 1);
    const path = join(mkdtempSync(join(tmpdir(), 'pge-session-')), 'gated.md');
    writeFileSync(path, renderLog(upTo('approval.requested')));
    const url = await dashboardFor(path);
    const { page, errors } = await openPage(browser, url);
    const session = page.locator('#session-chart .state.active');
    await expect
      .poll(() => session.getAttribute('data-state'))
      .toBe('session.open.live.awaitingDecision.untimed');
    expect(await highlighted(page, 'session-chart')).toEqual([
      'session.open',
      'session.open.live',
      'session.open.live.awaitingDecision',
      'session.open.live.awaitingDecision.untimed',
    ]);
    expect(await activeState(page, 'run-chart')).toBe('awaitingApproval');
    expect(await page.locator('#next-transitions .active-states').textContent()).toBe(
      'Active: session.open.live.awaitingDecision.untimed · run.planning.awaitingApproval',
    );
    await page.screenshot({ path: artifact('dashboard-gate.png'), fullPage: true });

    writeFileSync(path, renderLog(upTo('step.work.requested')));
    // The plan's first two steps run side by side: one of them makes the first work request.
    await expect.poll(() => activeState(page, 'step-chart')).toContain('firstAttempt');
    expect(await session.getAttribute('data-state')).toBe('session.open.live.working');
    writeFileSync(path, gated.text);
    await expect.poll(() => session.getAttribute('data-state')).toBe('session.closed');
    expect(await page.locator('body').getAttribute('data-status')).toBe('passed');
    expect(errors).toEqual([]);
  });

  it('highlights the state of every step running, each marked with its steps', async () => {
    // The demo's first two steps run side by side: its log cut where they stand in different states.
    let cut = 0;
    let steps: StepState[] = [];
    while (steps.length === 0 && cut < demo.events.length) {
      cut += 1;
      const active = (await replayActiveStates(demo.events.slice(0, cut))).active;
      if (active?.steps.length === 2 && active.steps[0]!.step !== active.steps[1]!.step) steps = active.steps;
    }
    expect(steps.map((s) => s.stepNumber)).toEqual([1, 2]);
    const path = join(mkdtempSync(join(tmpdir(), 'pge-side-')), 'side.md');
    writeFileSync(path, renderLog(demo.events.slice(0, cut)));
    const url = await dashboardFor(path);
    const { page, errors } = await openPage(browser, url);
    const marks = page.locator('#step-chart .state.active text.step-mark');
    await expect.poll(() => marks.count()).toBe(2);
    const chart = page.getByRole('figure', { name: /^Steps 1 and 2 statechart/ });
    for (const { step, stepNumber } of steps) {
      const box = page.locator(`#step-chart .state.active[data-state="${step}"]`);
      expect(await box.locator('text.step-mark').textContent()).toBe(`step ${stepNumber}`);
      // A screen reader hears the same: the state, that it is active, and which step stands there.
      const name = await box.getAttribute('aria-label');
      expect(name).toMatch(
        new RegExp(`^${step.split('.').at(-1)}( \\(invoke: \\w+\\))?, active, step ${stepNumber}$`),
      );
      expect(await chart.getByRole('img', { name: name!, exact: true }).count()).toBe(1);
    }
    // Each mark a badge of its own, inside the chart: neither covers the other.
    const within = (await chart.locator('svg.statechart').boundingBox())!;
    const [a, b] = await Promise.all((await marks.all()).map(async (m) => (await m.boundingBox())!));
    for (const mark of [a!, b!]) {
      expect(mark.x).toBeGreaterThanOrEqual(within.x);
      expect(mark.y).toBeGreaterThanOrEqual(within.y);
      expect(mark.x + mark.width).toBeLessThanOrEqual(within.x + within.width);
    }
    const apart =
      a!.x + a!.width <= b!.x ||
      b!.x + b!.width <= a!.x ||
      a!.y + a!.height <= b!.y ||
      b!.y + b!.height <= a!.y;
    expect(apart, 'the two steps’ marks overlap').toBe(true);
    expect(await page.locator('#next-transitions .active-states').textContent()).toMatch(
      new RegExp(` · step 1: ${steps[0]!.step} · step 2: ${steps[1]!.step}$`),
    );
    expect(await page.locator('#step-chart-title').textContent()).toBe(
      'Steps 1 and 2 statechart: Outline the deliverable; Gather the sources',
    );
    await page.screenshot({ path: artifact('dashboard-side-by-side.png'), fullPage: true });

    // Both just started: one state, marked with both.
    const started = demo.events.filter((e) => e.type === 'step.started')[1]!;
    writeFileSync(path, renderLog(demo.events.slice(0, started.seq)));
    await expect.poll(() => marks.allTextContents()).toEqual(['steps 1, 2']);
    expect(await activeState(page, 'step-chart')).toBe('proposing');
    expect(errors).toEqual([]);
  });

  it('fits the charts to a 1400 px window and shows an arrow’s transitions where it is pointed at', async () => {
    const url = await dashboardFor(demo.path);
    const { page, errors } = await openPage(browser, url);
    await page.setViewportSize({ width: 1400, height: 1000 });
    await page.locator('body[data-status="passed"]').waitFor();
    const step = page.getByRole('figure', { name: /^Step \d+ statechart/ });
    const evaluating = step.getByRole('img', { name: /^evaluating \(invoke: evaluateWork\)/ });
    await evaluating.scrollIntoViewIfNeeded();
    expect(await overflow(page)).toEqual([]);
    // Every state of every chart inside the window, from left to right: `evaluating` and the
    // states after it were cut off by the right edge of a 1400 px window before.
    const states = page.locator('svg.statechart g.state > rect');
    expect(await states.count()).toBe(15 + 16 + 19);
    for (const box of await states.all()) {
      const { x, width } = (await box.boundingBox())!;
      expect(x).toBeGreaterThanOrEqual(0);
      expect(x + width).toBeLessThanOrEqual(1400);
    }

    // Pointing at the arrow from evaluating to judging shows its event and guard.
    const arrow = step.getByRole('img', { name: /^evaluating → judging: / });
    expect(await arrow.getAttribute('aria-label')).toBe(
      'evaluating → judging: done: evaluateWork [evaluationInvalid]; done: evaluateWork',
    );
    const tip = page.getByRole('tooltip');
    expect(await tip.isHidden()).toBe(true);
    await pointAt(page, arrow);
    await expect.poll(() => tip.isVisible()).toBe(true);
    expect(await tip.textContent()).toBe(
      'done: evaluateWork [evaluationInvalid]\ndone: evaluateWork\nevaluating → judging',
    );
    expect(await arrow.getAttribute('class')).toContain('pointed');
    const shown = (await tip.boundingBox())!;
    expect(shown.x + shown.width).toBeLessThanOrEqual(1400);
    await page.mouse.move(2, 2);
    await expect.poll(() => tip.isHidden()).toBe(true);

    // In a narrow window the charts are scaled down to its width, not cut off. (The score bars
    // and tables below them are not yet made to fit one: the page as a whole is not checked.)
    await page.setViewportSize({ width: 640, height: 900 });
    expect(await overflow(page, true)).toEqual([]);
    const chart = (await step.locator('svg.statechart').boundingBox())!;
    expect(chart.width).toBeLessThan(640);
    await page.screenshot({ path: artifact('dashboard-narrow.png'), fullPage: true });
    expect(errors).toEqual([]);
  });

  it('shows a finished run with the score of every criterion of every attempt', async () => {
    const url = await dashboardFor(demo.path);
    const { page, errors } = await openPage(browser, url);
    await page.locator('body[data-status="passed"]').waitFor();
    for (const event of judged(demo.events)) {
      const { stepNumber, attempt, scores } = event.payload;
      const chart = page.locator(
        `#steps .step[data-step="${stepNumber}"] svg.scores[data-attempt="${attempt}"]`,
      );
      expect(await chart.locator('text.score').allTextContents()).toEqual(scores.map((s) => String(s.score)));
      expect(await chart.locator('text.threshold-value').allTextContents()).toEqual(
        scores.map((s) => `≥ ${s.threshold}`),
      );
    }
    const decisions = await page.locator('#steps .decisions li').allTextContents();
    expect(decisions.join('\n')).toMatch(/^refine → attempt 2/m);
    expect(decisions.join('\n')).toMatch(/^pivot → attempt 3/m);
    expect(await page.locator('#phases td').first().textContent()).toBe('plan');
    expect(await activeState(page, 'session-chart')).toBe('closed');
    expect(await page.locator('#timeline li').count()).toBe(demo.events.length);
    await page.screenshot({ path: artifact('dashboard-finished.png'), fullPage: true });
    if (process.env.PGE_UPDATE_SCREENSHOTS === '1') {
      await page.screenshot({
        path: artifact('dashboard.png'),
        fullPage: true,
        clip: { x: 0, y: 0, width: 1280, height: 2000 },
      });
      copyFileSync(artifact('dashboard.png'), join(ROOT, 'docs', 'dashboard.png'));
    }
    expect(errors).toEqual([]);
  });

  it('shows hostile model text as text and runs none of it', async () => {
    const hostile = await recordRun(`Summarise this page: ${HOSTILE_IMG}`, new HostileModel());
    const url = await dashboardFor(hostile.path);
    const { page, errors } = await openPage(browser, url);
    await page.locator('body[data-status="passed"]').waitFor();
    await page.locator('#steps details summary').first().click();

    const outputs = await page.locator('#steps pre.output').allTextContents();
    expect(outputs.length).toBeGreaterThan(0);
    for (const output of outputs) expect(output).toContain(`${HOSTILE_SCRIPT}\n${HOSTILE_IMG}`);
    const summaries = await page.locator('#steps p.summary').allTextContents();
    for (const summary of summaries) expect(summary).toContain(`${HOSTILE_IMG} ${HOSTILE_SCRIPT}`);
    expect(await page.locator('#overview').textContent()).toContain(HOSTILE_IMG);

    expect(
      await page.evaluate(() => (globalThis as unknown as { __pwned?: unknown }).__pwned),
    ).toBeUndefined();
    expect(await page.locator('main script, main img, main iframe').count()).toBe(0);
    // An <img src=x> that had become an element would have asked for /x.
    expect(browser.requested.filter((u) => new URL(u).pathname === '/x')).toEqual([]);
    await page.screenshot({ path: artifact('dashboard-hostile.png'), fullPage: true });
    expect(errors).toEqual([]);
  });

  it('lists the runs seen on NATS and shows the one selected', async () => {
    // A server of its own: the dashboard lists every run a server holds, and this page shows two.
    const nats = await startNatsServer();
    open.push({ close: () => nats.stop() });
    const store = new RunStore();
    open.push(await followNats({ servers: nats.url }, store));
    const dashboard = await startDashboard({ store, debounceMs: 20 });
    open.push(dashboard);
    const { page, errors } = await openPage(browser, dashboard.url);
    const other = await recordRun('Plan a dinner for six');
    const bus = await NatsBus.connect({ servers: nats.url });
    open.push(bus);
    for (const event of demo.events) await publishEvent(bus, event);
    await page.locator('body[data-status="passed"]').waitFor();
    // A run's link keeps the keyboard's focus while the list is drawn again at each event of another run.
    const demoLink = page.getByRole('link', { name: 'Write a short guide to brewing green tea' });
    await demoLink.focus();
    for (const event of other.events) await publishEvent(bus, event);

    // Two runs in the list, both ended, the most recently updated first; it is shown until one is chosen.
    const rows = page.locator('#runs table.runs tr[data-run]');
    await expect.poll(() => rows.count()).toBe(2);
    const runIds = [other.events[0]!.runId, demo.events[0]!.runId];
    expect(
      await rows.evaluateAll((r) => r.map((x) => (x as unknown as { dataset: { run: string } }).dataset.run)),
    ).toEqual(runIds);
    await expect.poll(() => page.locator('body').getAttribute('data-run')).toBe(runIds[0]);
    expect(await page.locator(`#runs tr[data-run="${runIds[0]}"]`).getAttribute('aria-current')).toBe('true');
    expect(await page.evaluate('document.activeElement?.getAttribute("data-run")')).toBe(runIds[1]);
    await page.keyboard.press('Enter');
    await expect.poll(() => page.locator('body').getAttribute('data-run')).toBe(runIds[1]);
    await expect
      .poll(() => page.locator(`#runs tr[data-run="${runIds[1]}"]`).getAttribute('aria-current'))
      .toBe('true');
    expect(await page.locator('#overview').textContent()).toContain(
      'Write a short guide to brewing green tea',
    );
    // Each row gives the run at a glance: status, task, steps passed of total, cost, start, duration.
    const cells = await page.locator(`#runs tr[data-run="${runIds[1]}"] td`).allTextContents();
    const view = buildRunView(runIds[1]!, demo.events);
    expect(cells[0]).toBe('passed');
    expect(cells[1]).toBe(`Write a short guide to brewing green tea${runIds[1]}`);
    expect(cells[2]).toBe(`${view.plan!.steps.length} / ${view.plan!.steps.length}`);
    expect(cells[3]).toBe(`$${view.totals.costUsd.toFixed(4)}`);
    expect(cells[5]).toBe(`${(view.durationMs! / 1000).toFixed(1)} s`);
    // The address names the run shown: Back and Forward go between runs, and it can be opened as it is.
    expect(new URL(page.url()).searchParams.get('run')).toBe(runIds[1]);
    await page.goBack();
    await expect.poll(() => page.locator('body').getAttribute('data-run')).toBe(runIds[0]);
    await page.goForward();
    await expect.poll(() => page.locator('body').getAttribute('data-run')).toBe(runIds[1]);
    const opened = await openPage(browser, `${dashboard.url}?run=${runIds[1]}`);
    await expect.poll(() => opened.page.locator('body').getAttribute('data-run')).toBe(runIds[1]);
    expect(opened.errors).toEqual([]);
    // Back to following the latest run.
    await page.getByRole('link', { name: 'Follow the latest run' }).click();
    await expect.poll(() => page.locator('body').getAttribute('data-run')).toBe(runIds[0]);
    expect(new URL(page.url()).searchParams.has('run')).toBe(false);
    expect(errors).toEqual([]);
  });
});
