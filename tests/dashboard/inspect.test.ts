import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { InspectionEvent } from 'xstate';
import { PlannerGeneratorEvaluator } from '../../src/api/planner-generator-evaluator.js';
import { startInspectorBridge } from '../../src/dashboard/inspector-bridge.js';
import { ConfigurationError } from '../../src/errors.js';
import { DemoModel } from '../../src/roles/demo-model.js';
import { artifact, type Browser, launchBrowser, openPage, startCli } from './support.js';

/**
 * `--inspect` without stately.ai: the harness hands XState's inspection events of the run and
 * step machines to the function attached; the bridge turns them into Stately's events (with
 * `@statelyai/inspect` itself) and hands them to the inspector frame. In the browser a stand-in
 * page answers for https://stately.ai/inspect: it says it is connected, as Stately's inspector
 * does, and records what it is sent. Nothing else may leave the machine.
 */

function demoHarness(): PlannerGeneratorEvaluator {
  const model = new DemoModel();
  return new PlannerGeneratorEvaluator({
    plannerAgent: model,
    generatorAgent: model,
    evaluatorAgent: model,
    workingDirectory: mkdtempSync(join(tmpdir(), 'pge-inspect-')),
  });
}

/** The id of the machine an actor runs, or null for actors that are not machines (promises). */
const machineOf = (actor: unknown) => (actor as { logic?: { id?: string } }).logic?.id ?? null;

/** Stands in for Stately's inspector: announces itself to its parent and keeps what it receives. */
const FAKE_STATELY = `<!doctype html><html><body><script>
window.received = [];
window.addEventListener('message', function (e) { window.received.push(e.data); });
parent.postMessage({ type: '@statelyai.connected' }, '*');
</script></body></html>`;

let browser: Browser;
beforeAll(async () => {
  browser = await launchBrowser((url) =>
    new URL(url).origin === 'https://stately.ai' ? { contentType: 'text/html', body: FAKE_STATELY } : null,
  );
}, 60_000);
afterAll(async () => {
  await browser?.close();
});

describe('attachInspector', () => {
  it('hands the actor and snapshot events of the run and step machines to the inspector', async () => {
    const pge = demoHarness();
    const seen: InspectionEvent[] = [];
    pge.attachInspector((event) => seen.push(event));
    try {
      await pge.run('Write a haiku about tea');
      expect(() => pge.attachInspector(() => {})).toThrow(ConfigurationError);
    } finally {
      await pge.close();
    }
    const actors = seen.filter((e) => e.type === '@xstate.actor').map((e) => machineOf(e.actorRef));
    expect(actors).toContain('run');
    expect(actors.filter((id) => id === 'step')).toHaveLength(4);
    const values = (machine: string) =>
      seen
        .filter((e) => e.type === '@xstate.snapshot' && machineOf(e.actorRef) === machine)
        .map((e) => JSON.stringify((e as { snapshot: { value?: unknown } }).snapshot.value));
    expect(values('run')).toContain(JSON.stringify({ stepping: 'waiting' }));
    expect(values('run').at(-1)).toBe(JSON.stringify('completed'));
    // The demo refines and pivots: the step is seen in each attempt's state while the generator works.
    // `judging` is a decision taken within one macrostep (eventless transitions): it has no snapshot.
    for (const state of [
      { executing: 'firstAttempt' },
      { executing: 'refining' },
      { executing: 'pivoting' },
      'evaluating',
      'passed',
    ])
      expect(values('step')).toContain(JSON.stringify(state));
    // Every model call is a child actor the inspector sees, named after the call.
    const calls = seen
      .filter((e) => e.type === '@xstate.actor' && machineOf(e.actorRef) === null)
      .map((e) => (e.actorRef as { src?: unknown }).src);
    expect(new Set(calls)).toEqual(
      new Set(['plan', 'proposeContract', 'reviewContract', 'doWork', 'evaluateWork']),
    );
    // After close() the next run starts a new runtime, so an inspector can be attached again.
    pge.attachInspector(() => {});
  });
});

describe('inspector bridge', () => {
  it('serves on loopback and gives Stately-format events of the run to the inspector frame', async () => {
    const bridge = await startInspectorBridge();
    expect(bridge.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/$/);
    const { page, errors } = await openPage(browser, bridge.url);
    await bridge.connected;
    const pge = demoHarness();
    pge.attachInspector(bridge.inspect);
    try {
      await pge.run('Write a haiku about tea');
    } finally {
      await pge.close();
    }
    await bridge.close();
    const frame = page.frame({ url: /^https:\/\/stately\.ai\// })!;
    await expect
      .poll(
        async () =>
          (await frame.evaluate(() => (globalThis as unknown as { received: unknown[] }).received)).length,
      )
      .toBeGreaterThan(50);
    const received = (await frame.evaluate(
      () => (globalThis as unknown as { received: unknown[] }).received,
    )) as { type: string; definition?: string; snapshot?: { value?: unknown; status?: string } }[];
    const definitions = received
      .filter((e) => e.type === '@xstate.actor' && e.definition)
      .map((e) => (JSON.parse(e.definition!) as { id?: string }).id);
    expect(definitions).toContain('run');
    expect(definitions).toContain('step');
    expect(received.some((e) => e.type === '@xstate.snapshot' && e.snapshot?.value === 'completed')).toBe(
      true,
    );
    await page.locator('#status', { hasText: 'The run has ended' }).waitFor();
    await page.screenshot({ path: artifact('inspector-bridge.png') });
    expect(errors).toEqual([]);
    expect(browser.offMachine).toEqual([]);
  });

  it('pge demo --inspect waits for the inspector, runs, and exits 0', async () => {
    const cli = startCli(['demo', '--inspect', '--working-dir', mkdtempSync(join(tmpdir(), 'pge-inspect-'))]);
    const [, url] = await cli.waitFor(/inspector at (http:\/\/127\.0\.0\.1:\d+\/)/);
    expect(cli.stderr()).toContain('needs internet');
    // Nothing runs before the inspector connects.
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(cli.stdout()).toBe('');
    const { page } = await openPage(browser, url!);
    expect(await cli.exited).toBe(0);
    expect(cli.stdout()).toContain('4/4 steps passed');
    const frame = page.frame({ url: /^https:\/\/stately\.ai\// })!;
    const received = (await frame.evaluate(
      () => (globalThis as unknown as { received: unknown[] }).received,
    )) as {
      type: string;
    }[];
    expect(received.filter((e) => e.type === '@xstate.actor').length).toBeGreaterThan(3);
    expect(browser.offMachine).toEqual([]);
  });

  it('refuses --inspect for a run on NATS', async () => {
    const cli = startCli(['run', 'a task', '--inspect', '--nats', 'nats://127.0.0.1:1'], {
      OPENAI_API_KEY: 'sk-test',
    });
    expect(await cli.exited).toBe(2);
    expect(cli.stderr()).toContain('--inspect needs the run in this process');
  });
});
