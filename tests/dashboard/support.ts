import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type BrowserContext, chromium, type Page } from 'playwright-core';
import type { PgeOptions } from '../../src/api/options.js';
import { PlannerGeneratorEvaluator } from '../../src/api/planner-generator-evaluator.js';
import { readLog } from '../../src/persistence/index.js';
import { DemoModel } from '../../src/roles/demo-model.js';
import type { Model, ModelRequest } from '../../src/roles/model.js';
import type { RunEvent } from '../../src/schemas/index.js';
import { watchOutput } from '../support/diagnostics.js';

/**
 * What the dashboard tests share: real runs recorded with the demo model, a real Chromium driven
 * by playwright-core with every request off this machine blocked and recorded, and the CLI run
 * from source.
 */

export const ROOT = join(import.meta.dirname, '..', '..');
export const ARTIFACTS = join(ROOT, '.test-artifacts');
const CHROMIUM = '/usr/bin/chromium';

/** A finished run: its log's text and events. */
export interface RecordedRun {
  path: string;
  text: string;
  events: RunEvent[];
}

/**
 * Runs `task` to its end with `model` in every role (the demo model by default) and reads its log.
 * `options` adds to the run's options; `onEvent` sees each event with the run's `pge`, to interrupt
 * it or decide at its gates as a person would.
 */
export async function recordRun(
  task: string,
  model: Model = new DemoModel(),
  options: Omit<PgeOptions, 'onEvent'> = {},
  onEvent?: (event: RunEvent, pge: PlannerGeneratorEvaluator) => void,
): Promise<RecordedRun> {
  const dir = mkdtempSync(join(tmpdir(), 'pge-dashboard-'));
  const pge: PlannerGeneratorEvaluator = new PlannerGeneratorEvaluator({
    plannerAgent: model,
    generatorAgent: model,
    evaluatorAgent: model,
    workingDirectory: dir,
    ...options,
    ...(onEvent ? { onEvent: (event: RunEvent) => onEvent(event, pge) } : {}),
  });
  try {
    await pge.run(task);
  } finally {
    await pge.close();
  }
  const path = pge.lastResult!.outputPath;
  const text = readFileSync(path, 'utf8');
  return { path, text, events: readLog(text) };
}

/** Markup that would run script if the page ever put model text into the DOM as HTML. */
export const HOSTILE_SCRIPT = '<script>window.__pwned=1</script>';
export const HOSTILE_IMG = '<img src=x onerror="window.__pwned=1">';

/**
 * The demo model with hostile markup in every work output, evaluation summary and finding: what a
 * model that repeats a hostile prompt, or a compromised model server, could answer.
 */
export class HostileModel implements Model {
  readonly name = 'hostile-demo';
  private readonly demo = new DemoModel();

  async complete(request: ModelRequest) {
    const answer = await this.demo.complete(request);
    const content = JSON.parse(answer.content ?? '{}') as Record<string, unknown>;
    if (request.phase === 'work')
      content.output = `${HOSTILE_SCRIPT}\n${HOSTILE_IMG}\n${String(content.output)}`;
    if (request.phase === 'evaluation') {
      content.summary = `${HOSTILE_IMG} ${HOSTILE_SCRIPT} ${String(content.summary)}`;
      content.findings = [...(content.findings as string[]), HOSTILE_IMG];
    }
    return { ...answer, content: JSON.stringify(content) };
  }
}

/** A browser for one test file. */
export interface Browser {
  context: BrowserContext;
  /** Every request to a host other than 127.0.0.1 or localhost; each one was aborted. */
  offMachine: string[];
  /** Every URL the browser asked for. */
  requested: string[];
  close(): Promise<void>;
}

const isLocal = (url: string) => {
  const { protocol, hostname } = new URL(url);
  if (protocol === 'data:' || protocol === 'about:') return true;
  return hostname === '127.0.0.1' || hostname === 'localhost';
};

/**
 * Starts Chromium headless with a fresh profile. Every request is routed: local ones continue,
 * any other is aborted and recorded, unless `allow` fulfils it (a stand-in for a remote page).
 * Without /usr/bin/chromium this throws, so the tests fail rather than skip.
 */
export async function launchBrowser(
  allow: (url: string) => { contentType: string; body: string } | null = () => null,
): Promise<Browser> {
  if (!existsSync(CHROMIUM))
    throw new Error(
      `${CHROMIUM} not found: the dashboard tests drive a real browser. Install it with: apt-get install chromium`,
    );
  const context = await chromium.launchPersistentContext(mkdtempSync(join(tmpdir(), 'pge-chromium-')), {
    executablePath: CHROMIUM,
    headless: true,
    viewport: { width: 1280, height: 900 },
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
  const offMachine: string[] = [];
  const requested: string[] = [];
  await context.route('**/*', async (route) => {
    const url = route.request().url();
    requested.push(url);
    if (isLocal(url)) return route.continue();
    const stand = allow(url);
    if (stand) return route.fulfill({ status: 200, contentType: stand.contentType, body: stand.body });
    offMachine.push(url);
    return route.abort('blockedbyclient');
  });
  return { context, offMachine, requested, close: () => context.close() };
}

/** Opens `url` in a new page; page errors and dialogs are collected, not ignored. */
export async function openPage(browser: Browser, url: string): Promise<{ page: Page; errors: string[] }> {
  const page = await browser.context.newPage();
  const errors: string[] = [];
  page.on('pageerror', (error) => errors.push(String(error)));
  page.on('dialog', (dialog) => {
    errors.push(`dialog: ${dialog.message()}`);
    void dialog.dismiss();
  });
  await page.goto(url);
  return { page, errors };
}

/** Where a screenshot goes: `.test-artifacts/<name>` (git-ignored). */
export function artifact(name: string): string {
  mkdirSync(ARTIFACTS, { recursive: true });
  return join(ARTIFACTS, name);
}

/** `pge …args` from source (no build needed), with its output so far. */
export function startCli(args: readonly string[], env: Record<string, string> = {}) {
  const child: ChildProcess = spawn(
    process.execPath,
    ['--import', 'tsx', join(import.meta.dirname, 'cli-entry.ts'), ...args],
    {
      cwd: ROOT,
      env: { PATH: process.env.PATH ?? '/usr/bin:/bin', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  let stdout = '';
  let stderr = '';
  const watch = watchOutput(`pge ${args.join(' ')} (pid ${child.pid})`);
  child.stdout?.on('data', (d: Buffer) => {
    stdout += d.toString();
  });
  child.stderr?.on('data', (d: Buffer) => {
    stderr += d.toString();
    watch(d.toString());
  });
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  return {
    child,
    stdout: () => stdout,
    stderr: () => stderr,
    exited,
    /** Resolves with the first match of `pattern` in stderr; rejects after `timeoutMs`. */
    async waitFor(pattern: RegExp, timeoutMs = 20_000): Promise<RegExpExecArray> {
      const until = Date.now() + timeoutMs;
      for (;;) {
        const match = pattern.exec(stderr);
        if (match) return match;
        if (Date.now() > until || child.exitCode !== null)
          throw new Error(`no ${pattern} in stderr:\n${stderr}\nstdout:\n${stdout}`);
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    },
  };
}
