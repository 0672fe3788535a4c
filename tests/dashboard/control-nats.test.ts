import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { RunEvent, RunEventOf } from '../../src/schemas/index.js';
import { stepsAskedSince } from '../support/continue-fixtures.js';
import {
  closedRun,
  passingAnswer,
  schemaOf,
  startDeployment,
  submitRun,
  type TestDeployment,
  until,
} from '../support/deployment.js';
import { type PgeProcess, startPge } from '../support/processes.js';
import { taskHas } from '../support/scripted-deployment.js';
import { storedEvents } from '../support/stored-events.js';
import { type Browser, launchBrowser, openPage } from './support.js';

/**
 * `pge dashboard --control --nats` on a deployment of real `pge worker` processes and a secured
 * nats-server: the dashboard reads and acts with the `client` credential alone. A run started from
 * the page's form waits at its plan gate, is approved from the page and passes; a busy run is
 * cancelled from the page; the run that passed is forked from its step 2 from the page (the
 * deployment's coordinator reads it from the stream, and no model is asked about step 1 again); and
 * the server refused nothing the dashboard did.
 */

const SLOW = 'a task whose work takes a minute';
const OPERATOR = 'lin';

let d: TestDeployment;
let browser: Browser;
let dashboard: PgeProcess;
let url = '';

beforeAll(async () => {
  d = await startDeployment();
  d.openai.script((body) =>
    passingAnswer(body, taskHas(body, SLOW) && schemaOf(body) === 'pge_work' ? 60_000 : 0),
  );
  await d.worker('coordinator');
  for (const role of ['planner', 'generator', 'evaluator'] as const) await d.worker(role);
  dashboard = startPge(
    [
      'dashboard',
      '--control',
      '--nats',
      d.nats.url,
      '--creds',
      d.nats.creds.client,
      '--port',
      '0',
      '--operator',
      OPERATOR,
    ],
    {},
  );
  await dashboard.waitFor(/\?token=/, 30_000);
  url = /(http:\/\/127\.0\.0\.1:\d+\/\?token=[\w-]+)/.exec(dashboard.stderr())![1]!;
  browser = await launchBrowser();
}, 90_000);

afterEach(() => {
  expect(browser.offMachine, 'requests that tried to leave the machine').toEqual([]);
});

afterAll(async () => {
  await browser?.close();
  expect(await dashboard?.stop('SIGTERM')).toBe(0);
  // Nothing the dashboard did was refused: the client credential may read and act as it does.
  const { refusals } = await d.close();
  expect(refusals).toEqual([]);
}, 60_000);

/** The events of run `runId` as the deployment stored them. */
const eventsOf = (runId: string): Promise<RunEvent[]> => storedEvents(d.client, `pge.run.${runId}.evt.>`);

type Page = Awaited<ReturnType<typeof openPage>>['page'];

/** Clicks the button `name` and resolves with the run the page shows next (one it started or forked). */
async function nextRunShown(page: Page, name: string): Promise<string> {
  const before = await page.locator('body').getAttribute('data-run');
  await page.getByRole('button', { name }).click();
  return until(
    () => page.locator('body').getAttribute('data-run'),
    (shown): shown is string => shown !== null && shown !== before,
    'the page to show the new run',
  ) as Promise<string>;
}

async function startFromPage(page: Page, task: string, gates: string[]) {
  await page.getByLabel('Task', { exact: true }).fill(task);
  for (const gate of gates) await page.getByLabel(gate, { exact: true }).check();
  return nextRunShown(page, 'Start run');
}

describe('dashboard --control on NATS', () => {
  it('starts a run from the form, approves its plan from the page, and the run passes', async () => {
    const { page, errors } = await openPage(browser, url);
    await page.getByRole('button', { name: 'Start run' }).waitFor();
    // The workers hold the models: the form names none.
    expect(await page.getByLabel('Model').count()).toBe(0);
    const runId = await startFromPage(page, 'Write a guide to rivers', ['the plan']);
    // The deployment's run list has it, waiting, first: it needs a person.
    const first = page.locator('#runs tr[data-run]').first();
    await expect.poll(() => first.getAttribute('data-run')).toBe(runId);
    await expect.poll(() => first.locator('td').first().textContent()).toBe('waiting at the plan gate');
    // A decision names the request it decides: one on another request of the same gate settles nothing.
    const { origin, searchParams } = new URL(url);
    const stale = await fetch(`${origin}/api/actions/decide`, {
      method: 'POST',
      headers: {
        'Content-Type': 'application/json',
        'X-PGE-Token': searchParams.get('token')!,
        Origin: origin,
      },
      body: JSON.stringify({
        runId,
        gate: 'plan',
        requestId: `${runId}-earlier`,
        decision: 'approve',
        reason: null,
      }),
    });
    expect(stale.status).toBe(409);
    expect(await stale.text()).toContain(`does not wait at request ${runId}-earlier`);
    expect((await eventsOf(runId)).filter((e) => e.type === 'approval.decided')).toEqual([]);
    await page.getByRole('button', { name: 'Approve' }).click();
    await page.locator('#run-status', { hasText: 'passed' }).waitFor({ timeout: 30_000 });
    const stored = await eventsOf(runId);
    expect((stored[0] as RunEventOf<'run.started'>).payload.startedBy).toBe(OPERATOR);
    const decided = stored.filter((e) => e.type === 'approval.decided');
    expect(decided.map((e) => [e.payload.decision, e.payload.by])).toEqual([['approve', OPERATOR]]);
    expect(errors).toEqual([]);
  });

  it('forks the run that passed from its step 2: the fork names its parent and asks nothing about step 1', async () => {
    const { page, errors } = await openPage(browser, url);
    const parent = await startFromPage(page, 'Write a guide to lakes', []);
    await page.locator('#run-status', { hasText: 'passed' }).waitFor({ timeout: 30_000 });
    const since = d.openai.completions().length;
    await page.getByLabel('Fork from step', { exact: true }).fill('2');
    await page.getByLabel('Retries per step (fork)', { exact: true }).fill('2');
    const fork = await nextRunShown(page, 'Fork');
    await page.locator('#run-status', { hasText: 'passed' }).waitFor({ timeout: 30_000 });
    const stored = await closedRun(d.client, fork);
    const started = stored[0] as RunEventOf<'run.started'>;
    expect(started.payload).toMatchObject({
      task: 'Write a guide to lakes',
      startedBy: OPERATOR,
      parent: { runId: parent, fromStep: 2 },
    });
    expect(started.payload.settings.maxRetriesPerStep).toBe(2);
    // No planner call, no call about step 1: only steps 2 and 3 were asked about.
    expect(stepsAskedSince(d.openai, since)).toEqual([2, 3]);
    expect(errors).toEqual([]);
  });

  it('cancels a busy run from the page: its closing event names the operator', async () => {
    const { page, errors } = await openPage(browser, url);
    const runId = await startFromPage(page, SLOW, []);
    await until(
      async () => (await eventsOf(runId)).some((e) => e.type === 'step.work.requested'),
      (found) => found,
      'the run to be at work',
      30_000,
    );
    // A run still going is not offered for a fork.
    expect(await page.getByRole('button', { name: 'Fork' }).count()).toBe(0);
    await page.getByRole('button', { name: 'Cancel run' }).click();
    await page.locator('#run-status', { hasText: 'failed' }).waitFor({ timeout: 30_000 });
    const closing = (await closedRun(d.client, runId)).at(-1) as RunEventOf<'run.failed'>;
    expect(closing.payload).toMatchObject({ reason: 'cancelled', cancelled: { by: OPERATOR, reason: null } });
    expect(errors).toEqual([]);
  });

  it('lists a run that waits at its plan gate since before the page opened, and approves it', async () => {
    // Submitted before this dashboard starts: waiting at its gate, the run sends no event at all.
    const runId = await submitRun(d.client, 'Write a guide to canals', { approve: ['plan'] });
    await until(
      async () => (await eventsOf(runId)).some((e) => e.type === 'approval.requested'),
      (found) => found,
      'the run to wait at its plan gate',
      30_000,
    );
    const late = startPge(
      ['dashboard', '--control', '--nats', d.nats.url, '--creds', d.nats.creds.client, '--port', '0'],
      {},
    );
    try {
      await late.waitFor(/\?token=/, 30_000);
      const lateUrl = new URL(/(http:\/\/127\.0\.0\.1:\d+\/\?token=[\w-]+)/.exec(late.stderr())![1]!);
      const get = async (path: string) => (await fetch(`${lateUrl.origin}${path}`)).json();
      const listed = await until(
        () => get('/api/runs?status=waiting') as Promise<{ runs: { runId: string; waitingAt: string }[] }>,
        (list) => list.runs.some((r) => r.runId === runId),
        'the late dashboard to list the waiting run',
        30_000,
      );
      expect(listed.runs.find((r) => r.runId === runId)?.waitingAt).toBe('plan');
      const view = (await get(`/api/runs/${runId}`)) as { gates: { requestId: string }[] };
      const decided = await fetch(`${lateUrl.origin}/api/actions/decide`, {
        method: 'POST',
        headers: {
          'Content-Type': 'application/json',
          'X-PGE-Token': lateUrl.searchParams.get('token')!,
          Origin: lateUrl.origin,
        },
        body: JSON.stringify({
          runId,
          gate: 'plan',
          requestId: view.gates[0]!.requestId,
          decision: 'approve',
          reason: null,
        }),
      });
      expect(decided.status).toBe(200);
      const stored = await closedRun(d.client, runId);
      expect(stored.at(-1)).toMatchObject({ type: 'run.completed', payload: { passed: true } });
    } finally {
      expect(await late.stop('SIGTERM')).toBe(0);
    }
  }, 120_000);
});
