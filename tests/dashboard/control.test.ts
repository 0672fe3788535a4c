import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, request as httpRequest, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Page } from 'playwright-core';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { PgeOptions } from '../../src/api/options.js';
import { PlannerGeneratorEvaluator } from '../../src/api/planner-generator-evaluator.js';
import { newToken } from '../../src/dashboard/control-http.js';
import { embeddedHostControl } from '../../src/dashboard/host-control.js';
import { followLog } from '../../src/dashboard/log-follower.js';
import { RunStore } from '../../src/dashboard/run-store.js';
import { startDashboard } from '../../src/dashboard/server.js';
import { readLogFile } from '../../src/persistence/index.js';
import type { RunEvent, RunEventOf } from '../../src/schemas/index.js';
import { type FakeOpenAI, type FakeStep, startFakeOpenAI } from '../support/fake-openai-server.js';
import { answers, schemaOf } from '../support/scripted-deployment.js';
import { type Browser, launchBrowser, openPage, ROOT, startCli } from './support.js';

/**
 * `pge dashboard --control` in a real Chromium, offline: runs started from the page run in the
 * dashboard's process with the real openai SDK against a scripted model server on 127.0.0.1; a
 * person approves, rejects, cancels and forks them by role and name, as a screen reader user
 * would; and a page of another origin, or a request without the token or with a wrong one, acts
 * on nothing.
 */

const OPERATOR = 'ada';
const REASON = 'Add a step on safety first';

let browser: Browser;
let openai: FakeOpenAI;
let dir: string;
/** While true, work is answered after a minute: a run that is busy when it is cancelled. */
let slowWork = false;
const open: { close(): Promise<void> }[] = [];

beforeAll(async () => {
  browser = await launchBrowser();
  openai = await startFakeOpenAI();
  // biome-ignore lint/suspicious/noExplicitAny: the request body as the SDK sent it.
  openai.script((body: any): FakeStep => {
    const schema = schemaOf(body) ?? '';
    const content = answers(9, 3)[schema] ?? {};
    return slowWork && schema === 'pge_work' ? { content, delayMs: 60_000 } : { content };
  });
}, 60_000);
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'pge-control-'));
  slowWork = false;
});
afterEach(async () => {
  for (const o of open.splice(0).reverse()) await o.close();
  rmSync(dir, { recursive: true, force: true });
  expect(browser.offMachine, 'requests that tried to leave the machine').toEqual([]);
  for (const url of browser.requested) expect(['127.0.0.1', 'localhost']).toContain(new URL(url).hostname);
});
afterAll(async () => {
  await browser?.close();
  await openai?.close();
});

const harnessOptions = () => ({
  modelName: 'test-model',
  baseURL: openai.url,
  apiKey: 'sk-test-control',
  workingDirectory: dir,
  maxRetries: 0,
});

/** A dashboard with `--control` that runs what it starts itself; `logs` are followed too. */
async function controlled(logs: string[] = [], options: PgeOptions = harnessOptions()) {
  const store = new RunStore({ replayDelayMs: 10 });
  for (const log of logs) open.push(followLog(log, store, { intervalMs: 40 }));
  const control = await embeddedHostControl(store, options);
  open.push(control);
  const token = newToken();
  const dashboard = await startDashboard({
    store,
    debounceMs: 20,
    control: { control, token, operator: OPERATOR },
  });
  open.push(dashboard);
  return { store, token, base: dashboard.url, url: `${dashboard.url}?token=${token}` };
}

/** The events of the run the page shows, from its log once it has one. */
async function loggedEvents(store: RunStore, runId: string): Promise<RunEvent[]> {
  const first = store.events(runId)[0] as RunEventOf<'run.started'>;
  return readLogFile(first.payload.logPath);
}

async function until(
  check: () => boolean | Promise<boolean>,
  what: string,
  timeoutMs = 20_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

/** Starts a run from the page's form, waiting at `gates`; resolves with its id once the page shows it. */
async function startFromPage(page: Page, task: string, gates: string[] = []): Promise<string> {
  const before = await page.locator('body').getAttribute('data-run');
  await page.getByLabel('Task', { exact: true }).fill(task);
  await page.getByLabel('Max steps', { exact: true }).fill('3');
  for (const gate of gates) await page.getByLabel(gate, { exact: true }).check();
  await page.getByRole('button', { name: 'Start run' }).click();
  await until(async () => {
    const shown = await page.locator('body').getAttribute('data-run');
    return shown !== null && shown !== before;
  }, 'the page to show the new run');
  return (await page.locator('body').getAttribute('data-run'))!;
}

const plans = () => openai.completions().filter((r) => schemaOf(r.body) === 'pge_plan');

describe('dashboard --control in a browser', () => {
  it('takes the token out of the address bar, and approves a run waiting at its plan gate, from the keyboard', async () => {
    const { url, store } = await controlled();
    const { page, errors } = await openPage(browser, url);
    await page.getByRole('button', { name: 'Start run' }).waitFor();
    expect(page.url()).not.toContain('token');

    const runId = await startFromPage(page, 'Write a three-part guide to tea', ['the plan']);
    const approve = page.getByRole('button', { name: 'Approve' });
    await approve.waitFor();
    // What is being approved is beside the buttons: the plan's steps and its rubric.
    const gate = page.locator('#control .gate');
    expect(await gate.locator('.step-title').allTextContents()).toEqual(['Step 1', 'Step 2', 'Step 3']);
    expect(await gate.locator('table').count()).toBe(2);
    expect(await gate.textContent()).toContain('accuracy');
    expect(store.view(runId)?.gates.map((g) => g.gate)).toEqual(['plan']);

    await approve.focus();
    await page.keyboard.press('Enter');
    await page.locator('#run-status', { hasText: 'passed' }).waitFor({ timeout: 20_000 });
    const logged = await loggedEvents(store, runId);
    // Who started it, and who decided, are in the log.
    const started = logged[0] as RunEventOf<'run.started'>;
    expect(started.payload.startedBy).toBe(OPERATOR);
    expect(readFileSync(started.payload.logPath, 'utf8')).toContain(`- **Started by**: ${OPERATOR}\n`);
    expect(await page.locator('#overview').textContent()).toContain(`Started by${OPERATOR}`);
    const decided = logged.filter((e) => e.type === 'approval.decided');
    expect(decided.map((e) => e.payload)).toEqual([
      expect.objectContaining({ gate: 'plan', decision: 'approve', by: OPERATOR, reason: null }),
    ]);
    expect(errors).toEqual([]);
  });

  it('lists the runs waiting for a person first, filters them by status, and acts on the one chosen', async () => {
    // Priced as gpt-4.1 is, so that the list has costs to show.
    const { url } = await controlled([], {
      ...harnessOptions(),
      prices: { 'test-model': { inputPerMTok: 2, outputPerMTok: 8 } },
    });
    const { page, errors } = await openPage(browser, url);
    await page.setViewportSize({ width: 1280, height: 900 });
    // The waiting run is the older: it comes first all the same.
    const waitingId = await startFromPage(page, 'Write a three-part guide to tea', ['the plan']);
    await page.getByRole('button', { name: 'Approve' }).waitFor();
    await page.getByLabel('the plan', { exact: true }).uncheck();
    const passedId = await startFromPage(page, 'Write a guide to moss');
    await page.locator('#run-status', { hasText: 'passed' }).waitFor({ timeout: 20_000 });
    const rows = page.locator('#runs tr[data-run]');
    const listed = () =>
      rows.evaluateAll((r) => r.map((x) => (x as unknown as { dataset: { run: string } }).dataset.run));
    await expect.poll(listed).toEqual([waitingId, passedId]);
    const cells = (runId: string) => page.locator(`#runs tr[data-run="${runId}"] td`).allTextContents();
    expect((await cells(waitingId)).slice(0, 3)).toEqual([
      'waiting at the plan gate',
      `Write a three-part guide to tea${waitingId}`,
      '0 / 3',
    ]);
    expect((await cells(passedId)).slice(0, 3)).toEqual([
      'passed',
      `Write a guide to moss${passedId}`,
      '3 / 3',
    ]);
    expect((await cells(passedId))[3]).toMatch(/^\$0\.0[0-9]{2}[1-9]$/);
    expect((await cells(waitingId))[5]).toMatch(/^\d+\.\d s so far$/);
    expect((await cells(passedId))[5]).toMatch(/^\d+\.\d s$/);

    const filter = page.getByLabel('Filter by status', { exact: true });
    expect(await filter.locator('option').allTextContents()).toEqual([
      'all (2)',
      'waiting (1)',
      'passed (1)',
    ]);
    await filter.selectOption('waiting');
    await expect.poll(listed).toEqual([waitingId]);
    await filter.selectOption('passed');
    await expect.poll(listed).toEqual([passedId]);
    await filter.selectOption('');
    await expect.poll(listed).toEqual([waitingId, passedId]);
    if (process.env.PGE_UPDATE_SCREENSHOTS === '1')
      await page.locator('#runs').screenshot({ path: join(ROOT, 'docs', 'dashboard-runs.png') });

    // Chosen from the list, the waiting run is shown with what is to be approved, and approved there.
    await page.getByRole('link', { name: 'Write a three-part guide to tea' }).click();
    await expect.poll(() => page.locator('body').getAttribute('data-run')).toBe(waitingId);
    const approve = page.getByRole('button', { name: 'Approve' });
    await approve.waitFor();
    if (process.env.PGE_UPDATE_SCREENSHOTS === '1')
      await page.screenshot({
        path: join(ROOT, 'docs', 'dashboard-approval.png'),
        clip: { x: 0, y: 0, width: 1280, height: 900 },
      });
    // Once decided, it leaves the waiting runs; the filter chosen stays, with none in it.
    await filter.selectOption('waiting');
    await approve.click();
    await page.locator('#run-status', { hasText: 'passed' }).waitFor({ timeout: 20_000 });
    await expect.poll(() => page.locator('#run-list').textContent()).toContain('No run is waiting.');
    expect(await filter.locator('option').allTextContents()).toEqual([
      'all (2)',
      'passed (2)',
      'waiting (0)',
    ]);
    expect(errors).toEqual([]);
  }, 60_000);

  it('sends a rejection’s reason to the planner, then approves the new plan', async () => {
    const { url, store } = await controlled();
    const { page, errors } = await openPage(browser, url);
    const asked = plans().length;
    const runId = await startFromPage(page, 'Write a guide to knots', ['the plan']);
    const first = await page.locator('#control .gate').getAttribute('data-request');

    await page.getByLabel('Reason (needed to reject)').fill(REASON);
    await page.getByRole('button', { name: 'Reject' }).click();
    // The scripted model server sees the reason in the planner's next request.
    await until(() => plans().length === asked + 2, 'the replan request');
    expect(JSON.stringify(plans().at(-1)!.body.messages)).toContain(REASON);

    await until(
      async () => (await page.locator('#control .gate').getAttribute('data-request')) !== first,
      'the gate of the new plan',
    );
    await page.getByRole('button', { name: 'Approve' }).click();
    await page.locator('#run-status', { hasText: 'passed' }).waitFor({ timeout: 20_000 });
    const decided = (await loggedEvents(store, runId)).filter((e) => e.type === 'approval.decided');
    expect(decided.map((e) => [e.payload.decision, e.payload.reason, e.payload.by])).toEqual([
      ['reject', REASON, OPERATOR],
      ['approve', null, OPERATOR],
    ]);
    expect(errors).toEqual([]);
  });

  it("shows a step's result and its evaluation at the step gate, and approves each step", async () => {
    const { url, store } = await controlled();
    const { page, errors } = await openPage(browser, url);
    const runId = await startFromPage(page, 'Write a guide to ferns', ["each step's result"]);
    let last: string | null = null;
    for (const stepNumber of [1, 2, 3]) {
      await until(async () => {
        const shown = await page
          .locator('#control .gate')
          .getAttribute('data-request', { timeout: 100 })
          .catch(() => null);
        return shown !== null && shown !== last;
      }, `the gate of step ${stepNumber}`);
      const gate = page.locator('#control .gate');
      last = await gate.getAttribute('data-request');
      expect(await gate.locator('h3').textContent()).toBe(
        `Waiting for your decision on the step's result of step ${stepNumber}`,
      );
      // The result as the run put it, and what the evaluator said of it.
      expect(await gate.locator('pre').textContent()).toBe('the work');
      expect(await gate.locator('p.evaluation').textContent()).toBe('Evaluation of attempt 1: s');
      // Each gate is a group named by its heading, so a screen reader says whose Approve it is.
      await page
        .getByRole('group', { name: `Waiting for your decision on the step's result of step ${stepNumber}` })
        .getByRole('button', { name: 'Approve' })
        .click();
    }
    await page.locator('#run-status', { hasText: 'passed' }).waitFor({ timeout: 20_000 });
    const decided = (await loggedEvents(store, runId)).filter((e) => e.type === 'approval.decided');
    expect(decided.map((e) => [e.payload.gate, e.payload.by])).toEqual([
      ['step', OPERATOR],
      ['step', OPERATOR],
      ['step', OPERATOR],
    ]);
    expect(errors).toEqual([]);
  });

  it('cancels a running run: its log ends cancelled, by the operator', async () => {
    slowWork = true;
    const { url, store } = await controlled();
    const { page, errors } = await openPage(browser, url);
    const works = () => openai.completions().filter((r) => schemaOf(r.body) === 'pge_work');
    const before = works().length;
    const runId = await startFromPage(page, 'Write a long report');
    await until(() => works().length > before, 'the run to be at work');

    await page.getByLabel('Reason for cancelling (optional)').fill('wrong task');
    await page.getByRole('button', { name: 'Cancel run' }).click();
    await page.locator('#run-status', { hasText: 'failed' }).waitFor({ timeout: 20_000 });
    const closing = (await loggedEvents(store, runId)).at(-1)!;
    expect(closing.type).toBe('run.failed');
    expect((closing as RunEventOf<'run.failed'>).payload).toMatchObject({
      reason: 'cancelled',
      cancelled: { by: OPERATOR, reason: 'wrong task' },
    });
    // The call in flight was cancelled on the wire too.
    await until(() => works().at(-1)!.abortedAt !== null, 'the model server to see the abort');
    expect(await page.getByRole('button', { name: 'Cancel run' }).count()).toBe(0);
    expect(errors).toEqual([]);
  });

  it('forks a finished run from step 2 with other settings: a new run, with no new plan', async () => {
    const parent = new PlannerGeneratorEvaluator({ ...harnessOptions(), maxSteps: 3 });
    await parent.run('Write a three-part guide to bread');
    await parent.close();
    const parentLog = parent.lastResult!.outputPath;
    const { url, store } = await controlled([parentLog]);
    const { page, errors } = await openPage(browser, url);
    await page.getByRole('button', { name: 'Fork' }).waitFor();
    const parentId = (await page.locator('body').getAttribute('data-run'))!;
    const asked = plans().length;

    await page.getByLabel('Fork from step').fill('2');
    await page.getByLabel('Retries per step (fork)').fill('1');
    await page.getByRole('button', { name: 'Fork' }).click();
    await until(async () => (await page.locator('body').getAttribute('data-run')) !== parentId, 'the fork');
    const forkId = (await page.locator('body').getAttribute('data-run'))!;
    await page.locator('#run-status', { hasText: 'passed' }).waitFor({ timeout: 20_000 });
    const started = store.events(forkId)[0] as RunEventOf<'run.started'>;
    expect(started.payload.parent).toEqual({ runId: parentId, logPath: parentLog, fromStep: 2 });
    expect(started.payload.settings.maxRetriesPerStep).toBe(1);
    expect(started.payload.startedBy).toBe(OPERATOR);
    expect((store.events(parentId)[0] as RunEventOf<'run.started'>).payload.startedBy).toBeUndefined();
    expect(plans().length).toBe(asked);
    expect(errors).toEqual([]);
  });
});

describe('the runs of the working directory', () => {
  it('lists the runs whose logs were there before the dashboard opened', async () => {
    const earlier = new PlannerGeneratorEvaluator({ ...harnessOptions(), maxSteps: 3 });
    await earlier.run('Write a three-part guide to tea');
    await earlier.close();
    const runId = earlier.lastResult!.runId;
    // No log followed: the host reads its working directory's logs.
    const { store } = await controlled();
    await until(() => store.view(runId)?.status === 'passed', 'the earlier run to be listed');
    expect(store.events(runId)).toEqual(await readLogFile(earlier.lastResult!.outputPath));
  });
});

describe('the gates a run waits at', () => {
  it('lists the undecided one, and none once the run has ended', async () => {
    const store = new RunStore({ replayDelayMs: 10 });
    const control = await embeddedHostControl(store, harnessOptions());
    open.push(control);
    const { runId } = await control.start({ task: 'Write a guide to clouds', approve: ['plan'] }, OPERATOR);
    await until(() => store.view(runId)?.gates.length === 1, 'the plan gate');
    expect(control.abilitiesFor(store.view(runId)!)).toEqual({ act: true, fork: false });
    await control.cancel({ runId, reason: null }, OPERATOR);
    await until(() => store.view(runId)?.status === 'failed', 'the run to end');
    expect(store.view(runId)!.gates).toEqual([]);
    // Ended, with its log here: it can be forked, no longer decided or cancelled.
    expect(control.abilitiesFor(store.view(runId)!)).toEqual({ act: false, fork: true });
    await expect(control.cancel({ runId, reason: null }, OPERATOR)).rejects.toThrow(
      /has ended|is not going on/,
    );
  });

  it('refuses a run started in the name of nobody, before anything is asked', async () => {
    const pge = new PlannerGeneratorEvaluator(harnessOptions());
    const asked = openai.completions().length;
    await expect(pge.run('Write a line', { startedBy: '' })).rejects.toThrow('startedBy must be a name');
    await expect(pge.run('Write a line', { startedBy: 'x'.repeat(201) })).rejects.toThrow('startedBy');
    expect(openai.completions().length).toBe(asked);
    await pge.close();
  });
});

describe('dashboard --control refuses what does not come from its page', () => {
  let hostile: Server | null = null;
  afterEach(async () => {
    hostile?.closeAllConnections();
    await new Promise((resolve) => hostile?.close(resolve) ?? resolve(undefined));
    hostile = null;
  });

  it('acts on nothing for another origin, a missing token or a wrong one', async () => {
    const { url, base, token, store } = await controlled();
    const { page } = await openPage(browser, url);
    const runId = await startFromPage(page, 'Write a guide to maps', ['the plan']);
    await page.getByRole('button', { name: 'Approve' }).waitFor();
    const gate = store.view(runId)!.gates[0]!;
    const body = JSON.stringify({
      runId,
      gate: 'plan',
      requestId: gate.requestId,
      decision: 'reject',
      reason: 'x',
    });
    const origin = base.slice(0, -1);
    // node:http, not fetch: fetch would not send a Host of one's choosing.
    const post = (headers: Record<string, string>, data = body) =>
      new Promise<number>((resolve, reject) => {
        const request = httpRequest(`${base}api/actions/decide`, {
          method: 'POST',
          headers: { 'Content-Type': 'application/json', ...headers },
        });
        request.on('response', (res) => {
          res.resume();
          resolve(res.statusCode ?? 0);
        });
        request.on('error', reject);
        request.end(data);
      });

    // From outside a browser, which can set any header.
    expect(await post({})).toBe(403);
    expect(await post({ Origin: origin })).toBe(403);
    expect(await post({ Origin: origin, 'X-PGE-Token': `${token}x` })).toBe(403);
    expect(await post({ Origin: origin, 'X-PGE-Token': token.slice(1) })).toBe(403);
    expect(await post({ Origin: 'http://evil.example', 'X-PGE-Token': token })).toBe(403);
    expect(await post({ Origin: 'null', 'X-PGE-Token': token })).toBe(403);
    expect(await post({ 'Sec-Fetch-Site': 'cross-site', 'X-PGE-Token': token })).toBe(403);
    expect(await post({ Host: 'evil.example', 'X-PGE-Token': token })).toBe(421);
    expect(await post({ Cookie: `token=${token}` })).toBe(403);
    // With the token, from its own origin, a body that is not the action's JSON does nothing either.
    const own = { Origin: origin, 'X-PGE-Token': token };
    expect(await post({ ...own, 'Content-Type': 'text/plain' })).toBe(415);
    expect(await post(own, '{"runId":')).toBe(400);
    expect(await post(own, JSON.stringify({ runId, gate: 'plan', decision: 'approve' }))).toBe(400);
    // A rejection without a reason: the planner would get none.
    expect(await post(own, JSON.stringify({ ...JSON.parse(body), decision: 'reject', reason: null }))).toBe(
      400,
    );
    expect(await post(own, JSON.stringify({ task: 'x'.repeat(1024 * 1024 + 1) }))).toBe(413);
    expect(await post(own, JSON.stringify({ ...JSON.parse(body), requestId: 'another' }))).toBe(409);

    // From a page of another origin in the same browser, even one that knows the token.
    hostile = createServer((_req, res) => {
      res.writeHead(200, { 'Content-Type': 'text/html' });
      res.end(`<!doctype html><body><form id="f" method="POST" action="${base}api/actions/decide" enctype="text/plain">
<input name='{"x":"' value='"}'></form><script>
window.results = [];
const target = ${JSON.stringify(`${base}api/actions/decide`)};
const body = ${JSON.stringify(body)};
(async () => {
  for (const init of [
    { method: 'POST', headers: { 'Content-Type': 'application/json', 'X-PGE-Token': ${JSON.stringify(token)} }, body },
    { method: 'POST', mode: 'no-cors', headers: { 'Content-Type': 'text/plain' }, body },
    { method: 'POST', mode: 'no-cors', credentials: 'include', body },
  ]) {
    try { const r = await fetch(target, init); window.results.push(r.type + ' ' + r.status); }
    catch (e) { window.results.push('blocked: ' + e.message); }
  }
  window.done = true;
})();
</script></body>`);
    });
    await new Promise<void>((resolve) => hostile!.listen(0, '127.0.0.1', resolve));
    const evil = `http://localhost:${(hostile.address() as AddressInfo).port}/`;
    // What the attacker's page sent to the dashboard, and every answer it could observe.
    const sent: string[] = [];
    const statuses: number[] = [];
    const attacker = await browser.context.newPage();
    attacker.on('request', (r) => {
      if (r.url().startsWith(`${base}api/`)) sent.push(`${r.method()} ${r.headers()['content-type'] ?? ''}`);
    });
    attacker.on('response', (r) => {
      if (r.url().startsWith(`${base}api/`)) statuses.push(r.status());
    });
    await attacker.goto(evil);
    await attacker.waitForFunction(() => (globalThis as unknown as { done?: boolean }).done === true);
    const results = await attacker.evaluate(() => (globalThis as unknown as { results: string[] }).results);
    // None of the three fetches gets an answer it may read: no CORS header is ever sent.
    expect(results).toEqual(Array(3).fill('blocked: Failed to fetch'));
    // A form post, with no script at all: the page shows the dashboard's refusal.
    await Promise.all([
      attacker.waitForEvent('response'),
      attacker.locator('#f').evaluate((f) => (f as unknown as { submit(): void }).submit()),
    ]);
    expect(await attacker.textContent('body')).toContain('Forbidden: requests from http://localhost:');
    // All four reached the dashboard; the answers the browser let through are refusals.
    expect(sent).toHaveLength(4);
    expect(sent.every((s) => s.startsWith('POST '))).toBe(true);
    expect(statuses.length).toBeGreaterThan(0);
    expect(statuses.every((s) => s === 403)).toBe(true);
    await attacker.close();

    // Nothing happened: the run still waits at the same gate, undecided.
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(store.events(runId).some((e) => e.type === 'approval.decided')).toBe(false);
    expect(store.view(runId)!.gates.map((g) => g.requestId)).toEqual([gate.requestId]);
    // And the page itself still can.
    await page.getByRole('button', { name: 'Approve' }).click();
    await page.locator('#run-status', { hasText: 'passed' }).waitFor({ timeout: 20_000 });
  });

  it('without --control: POST is 405 and the page has no controls', async () => {
    const parent = new PlannerGeneratorEvaluator({ ...harnessOptions(), maxSteps: 1 });
    await parent.run('Write a line');
    await parent.close();
    const store = new RunStore();
    open.push(followLog(parent.lastResult!.outputPath, store, { intervalMs: 40 }));
    const dashboard = await startDashboard({ store, debounceMs: 20 });
    open.push(dashboard);
    for (const action of ['decide', 'cancel', 'start', 'fork']) {
      const answer = await fetch(`${dashboard.url}api/actions/${action}`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ task: 'x' }),
      });
      expect(answer.status, action).toBe(405);
    }
    expect((await fetch(`${dashboard.url}api/control`)).status).toBe(404);
    const { page, errors } = await openPage(browser, dashboard.url);
    await page.locator('#run-status', { hasText: 'passed' }).waitFor();
    expect(await page.getByRole('button').count()).toBe(0);
    expect(await page.locator('#start-run').isHidden()).toBe(true);
    expect(await page.locator('#control').isHidden()).toBe(true);
    expect(errors).toEqual([]);
  });
});

describe('pge dashboard --control', () => {
  it('prints its URL with a token once, starts a demo run with a gate and records the operator’s decision', async () => {
    const cli = startCli([
      'dashboard',
      '--control',
      '--demo',
      '--operator',
      'grace',
      '--port',
      '0',
      '--working-dir',
      dir,
    ]);
    try {
      const [, base, token] = await cli.waitFor(
        /(http:\/\/127\.0\.0\.1:\d+\/)\?token=([\w-]{43}) \(control: acting as grace/,
      );
      expect(cli.stderr().match(/token=/g)).toHaveLength(1);
      const act = async (name: string, body: object) => {
        const answer = await fetch(`${base}api/actions/${name}`, {
          method: 'POST',
          headers: { 'Content-Type': 'application/json', 'X-PGE-Token': token!, Origin: base!.slice(0, -1) },
          body: JSON.stringify(body),
        });
        return { status: answer.status, body: (await answer.json()) as { runId: string; error?: string } };
      };
      // The demo model answers every run: a run cannot name another.
      expect((await act('start', { task: 'Write a haiku', model: 'gpt-x' })).status).toBe(409);
      const started = await act('start', { task: 'Write a haiku', approve: ['plan'] });
      expect(started.status).toBe(200);
      const { runId } = started.body;
      type View = { gates: { requestId: string }[]; status: string; control: { act: boolean } };
      const view = async () => (await (await fetch(`${base}api/runs/${runId}`)).json()) as View;
      await until(async () => (await view()).gates?.length === 1, 'the plan gate');
      const { requestId } = (await view()).gates[0]!;
      expect(
        (await act('decide', { runId, gate: 'plan', requestId, decision: 'approve', reason: null })).status,
      ).toBe(200);
      await until(async () => (await view()).status === 'passed', 'the run to pass');
      const logged = await readLogFile(join(dir, `pge_shared_state_${runId}.md`));
      expect(logged.find((e) => e.type === 'approval.decided')?.payload).toMatchObject({
        decision: 'approve',
        by: 'grace',
      });
    } finally {
      cli.child.kill('SIGTERM');
      expect(await cli.exited).toBe(0);
    }
  });

  it('refuses the control flags without --control', async () => {
    const cli = startCli(['dashboard', '--log', join(dir, 'x.md'), '--operator', 'grace', '--port', '0']);
    expect(await cli.exited).toBe(2);
    expect(cli.stderr()).toContain('--operator needs --control');
  });
});
