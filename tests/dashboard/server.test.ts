import { appendFileSync, mkdtempSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeAll, describe, expect, inject, it } from 'vitest';
import { publishEvent } from '../../src/bus/channels.js';
import { NatsBus } from '../../src/bus/nats-bus.js';
import { followLog, followLogDir } from '../../src/dashboard/log-follower.js';
import { followNats } from '../../src/dashboard/nats-source.js';
import { RunStore } from '../../src/dashboard/run-store.js';
import type { RunSummary, RunView } from '../../src/dashboard/run-view-types.js';
import { type Dashboard, startDashboard } from '../../src/dashboard/server.js';
import { startNatsServer } from '../support/nats-server.js';
import { type RecordedRun, recordRun, startCli } from './support.js';

/**
 * The dashboard over HTTP, as a browser or curl meets it: what it binds, which methods it takes,
 * the headers it sends, its JSON and its event stream; the log follower on a log being written;
 * the NATS source on a real nats-server; and `pge dashboard` as a process.
 */

let demo: RecordedRun;
const open: { close(): Promise<void> }[] = [];
beforeAll(async () => {
  demo = await recordRun('Plan a picnic');
});
afterEach(async () => {
  for (const o of open.splice(0).reverse()) await o.close();
});

async function serve(store: RunStore, host?: string): Promise<Dashboard> {
  const dashboard = await startDashboard({ store, debounceMs: 20, ...(host ? { host } : {}) });
  open.push(dashboard);
  return dashboard;
}

function storeWith(run: RecordedRun): RunStore {
  const store = new RunStore();
  store.replace(run.events[0]!.runId, run.events);
  return store;
}

interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
}

/** One raw request, with any method and Host header (fetch would not send a foreign Host). */
function call(url: string, method = 'GET', headers: Record<string, string> = {}): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method, headers }, (res) => {
      let body = '';
      res.on('data', (chunk: Buffer) => {
        body += chunk.toString();
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

/** Reads server-sent events from `url` until `done` says enough; returns them by name. */
async function readStream(
  url: string,
  done: (events: { name: string; data: unknown }[]) => boolean,
): Promise<{ name: string; data: unknown }[]> {
  const controller = new AbortController();
  const res = await fetch(url, { signal: controller.signal });
  expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  const events: { name: string; data: unknown }[] = [];
  let buffer = '';
  while (!done(events)) {
    const { value, done: ended } = await reader.read();
    if (ended) break;
    buffer += decoder.decode(value, { stream: true });
    let at = buffer.indexOf('\n\n');
    while (at >= 0) {
      const block = buffer.slice(0, at);
      buffer = buffer.slice(at + 2);
      const name = /^event: (.+)$/m.exec(block)?.[1];
      const data = /^data: (.+)$/m.exec(block)?.[1];
      if (name && data) events.push({ name, data: JSON.parse(data) });
      at = buffer.indexOf('\n\n');
    }
  }
  controller.abort();
  return events;
}

describe('HTTP', () => {
  it('binds 127.0.0.1 and serves the page, its assets and the run as JSON', async () => {
    const dashboard = await serve(storeWith(demo));
    expect(dashboard.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/$/);
    const page = await call(dashboard.url);
    expect(page.status).toBe(200);
    expect(page.body).toContain('<script src="/app.js" defer></script>');
    for (const asset of ['app.js', 'app.css', 'api/charts'])
      expect((await call(dashboard.url + asset)).status).toBe(200);
    const runs = JSON.parse((await call(`${dashboard.url}api/runs`)).body) as { runs: RunSummary[] };
    expect(runs.runs).toEqual([expect.objectContaining({ runId: demo.events[0]!.runId, status: 'passed' })]);
    // `?status=` keeps the runs in one of the statuses named.
    const only = async (status: string) =>
      (JSON.parse((await call(`${dashboard.url}api/runs?status=${status}`)).body) as { runs: RunSummary[] })
        .runs;
    expect(await only('passed,waiting')).toEqual(runs.runs);
    expect(await only('waiting')).toEqual([]);
    const view = JSON.parse((await call(`${dashboard.url}api/runs/${runs.runs[0]!.runId}`)).body) as RunView;
    expect(view.steps).toHaveLength(4);
    expect((await call(`${dashboard.url}api/runs/nope`)).status).toBe(404);
    expect((await call(`${dashboard.url}api/runs/%E0%A4%A`)).status).toBe(404);
    expect((await call(`${dashboard.url}etc/passwd`)).status).toBe(404);
  });

  it('refuses every method but GET and HEAD', async () => {
    const dashboard = await serve(storeWith(demo));
    for (const method of ['POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS']) {
      for (const path of ['', 'api/runs', 'events']) {
        const answer = await call(dashboard.url + path, method);
        expect(answer.status, `${method} /${path}`).toBe(405);
        expect(answer.headers.allow).toBe('GET, HEAD');
      }
    }
    const head = await call(dashboard.url, 'HEAD');
    expect(head.status).toBe(200);
    expect(head.body).toBe('');
  });

  it('sends a Content-Security-Policy that allows no inline script and no other origin', async () => {
    const dashboard = await serve(storeWith(demo));
    for (const path of ['', 'app.js', 'api/runs', 'nothing-here']) {
      const csp = String((await call(dashboard.url + path)).headers['content-security-policy']);
      expect(csp).toContain("default-src 'self'");
      expect(csp).toContain("script-src 'self'");
      expect(csp).not.toMatch(/unsafe-inline|unsafe-eval|https?:|\*/);
    }
    const page = await call(dashboard.url);
    expect(page.headers['x-content-type-options']).toBe('nosniff');
    // No inline script, style or remote resource in the page itself.
    expect(page.body).not.toMatch(/<script>|<style|style=|https?:\/\//);
  });

  it('answers only requests addressed to loopback (no DNS rebinding)', async () => {
    const dashboard = await serve(storeWith(demo));
    expect((await call(`${dashboard.url}api/runs`, 'GET', { Host: 'evil.example:80' })).status).toBe(421);
    expect(
      (await call(`${dashboard.url}api/runs`, 'GET', { Host: `localhost:${dashboard.port}` })).status,
    ).toBe(200);
  });

  it('streams the run list and the run, then each change', async () => {
    const store = new RunStore();
    const dashboard = await serve(store);
    const runId = demo.events[0]!.runId;
    store.replace(runId, demo.events.slice(0, 10));
    setTimeout(() => store.replace(runId, demo.events), 200);
    const events = await readStream(`${dashboard.url}events`, (seen) =>
      seen.some((e) => e.name === 'view' && (e.data as RunView).status === 'passed'),
    );
    const views = events.filter((e) => e.name === 'view').map((e) => e.data as RunView);
    expect(views[0]!.timeline).toHaveLength(10);
    expect(views.at(-1)!.timeline).toHaveLength(demo.events.length);
    expect(events[0]!.name).toBe('runs');
  });
});

describe('following a log', () => {
  it('shows a log as it is written, torn writes included, with no problem reported', async () => {
    const path = join(mkdtempSync(join(tmpdir(), 'pge-follow-')), 'live.md');
    const store = new RunStore();
    const follower = followLog(path, store, { intervalMs: 10 });
    open.push(follower);
    await follower.ready;
    const seen: number[] = [];
    store.subscribe((runId) => {
      if (runId) seen.push(store.view(runId)!.timeline.length);
    });
    const chunk = Math.ceil(demo.text.length / 40);
    writeFileSync(path, '');
    for (let at = 0; at < demo.text.length; at += chunk) {
      appendFileSync(path, demo.text.slice(at, at + chunk));
      await new Promise((resolve) => setTimeout(resolve, 25));
    }
    await expect.poll(() => seen.at(-1), { timeout: 5_000 }).toBe(demo.events.length);
    expect(seen.length).toBeGreaterThan(5);
    expect(seen).toEqual([...seen].sort((a, b) => a - b));
    expect(store.problems).toEqual([]);
  });

  it('reports a log that stays damaged', async () => {
    const path = join(mkdtempSync(join(tmpdir(), 'pge-follow-')), 'damaged.md');
    writeFileSync(path, demo.text.replace('"type":"plan.created"', '"type":"plan.forged"'));
    const store = new RunStore();
    open.push(followLog(path, store, { intervalMs: 10, settleMs: 200 }));
    await expect.poll(() => store.problems.join('\n'), { timeout: 5_000 }).toMatch(/damaged\.md:\d+/);
    expect(store.list()[0]?.events).toBeLessThan(demo.events.length);
  });
});

describe('following a directory of logs', () => {
  it('shows every log there, and each log a run creates later; passes over other files', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'pge-follow-dir-'));
    writeFileSync(join(dir, 'pge_shared_state_earlier.md'), demo.text);
    writeFileSync(join(dir, 'notes.md'), '# Notes\n\nnot a log\n');
    const store = new RunStore();
    const follower = followLogDir(dir, store, { intervalMs: 10 });
    open.push(follower);
    await follower.ready;
    const runId = demo.events[0]!.runId;
    await expect.poll(() => store.list().map((r) => r.runId), { timeout: 5_000 }).toEqual([runId]);
    // A run that starts later: its log appears, empty at first, then written.
    const later = demo.text.replaceAll(runId, 'later-run');
    const path = join(dir, 'pge_shared_state_later-run.md');
    writeFileSync(path, '');
    await new Promise((resolve) => setTimeout(resolve, 50));
    appendFileSync(path, later);
    await expect
      .poll(() => store.view('later-run')?.timeline.length, { timeout: 5_000 })
      .toBe(demo.events.length);
    expect(store.list()).toHaveLength(2);
    expect(store.problems).toEqual([]);
  });
});

describe('following NATS', () => {
  it('shows every run published on the bus, each in the run list', async () => {
    const natsUrl = inject('natsUrl');
    const store = new RunStore();
    const source = await followNats({ servers: natsUrl }, store);
    open.push(source);
    const other = await recordRun('Plan a dinner');
    const bus = await NatsBus.connect({ servers: natsUrl });
    open.push(bus);
    for (const event of [...demo.events, ...other.events]) await publishEvent(bus, event);
    await expect
      .poll(() => store.list().map((r) => [r.runId, r.events]), { timeout: 10_000 })
      .toEqual(
        expect.arrayContaining([
          [demo.events[0]!.runId, demo.events.length],
          [other.events[0]!.runId, other.events.length],
        ]),
      );
    expect(store.view(other.events[0]!.runId)!.status).toBe('passed');
  });
});

describe('following NATS through an outage', () => {
  it('shows a run that began before it joined from its first event, and loses none across a server restart', async () => {
    const server = await startNatsServer();
    try {
      const run = await recordRun('Plan a garden');
      const runId = run.events[0]!.runId;
      const half = Math.floor(run.events.length / 2);
      const bus = await NatsBus.connect({ servers: server.url, onHandlerError: () => undefined });
      open.push(bus);
      for (const event of run.events.slice(0, half)) await publishEvent(bus, event);
      const store = new RunStore();
      open.push(await followNats({ servers: server.url }, store));
      await publishEvent(bus, run.events[half]!);
      await server.restart(300);
      for (const event of run.events.slice(half + 1)) await publishEvent(bus, event);
      await expect
        .poll(() => store.list().map((r) => [r.runId, r.events]), { timeout: 15_000 })
        .toEqual([[runId, run.events.length]]);
      expect(store.view(runId)!.status).toBe('passed');
      expect(store.problems).toEqual([]);
    } finally {
      for (const o of open.splice(0).reverse()) await o.close();
      await server.stop();
    }
  }, 30_000);
});

describe('pge dashboard', () => {
  it('serves a log until SIGTERM, then exits 0', async () => {
    const cli = startCli(['dashboard', '--log', demo.path, '--port', '0']);
    const [, url] = await cli.waitFor(/pge dashboard: (http:\/\/127\.0\.0\.1:\d+\/)/);
    await expect
      .poll(
        async () => (JSON.parse((await call(`${url}api/runs`)).body) as { runs: RunSummary[] }).runs.length,
      )
      .toBe(1);
    cli.child.kill('SIGTERM');
    expect(await cli.exited).toBe(0);
  });

  /** Starts `pge dashboard …args`, waits until it lists exactly the demo run, and stops it with SIGTERM. */
  async function listsTheDemoRun(args: string[]): Promise<void> {
    const cli = startCli(['dashboard', ...args, '--port', '0']);
    const [, url] = await cli.waitFor(/pge dashboard: (http:\/\/127\.0\.0\.1:\d+\/)/);
    await expect
      .poll(async () =>
        (JSON.parse((await call(`${url}api/runs`)).body) as { runs: RunSummary[] }).runs.map((r) => r.runId),
      )
      .toEqual([demo.events[0]!.runId]);
    cli.child.kill('SIGTERM');
    expect(await cli.exited).toBe(0);
  }

  it('follows a log given bare, as one given with --log', async () => {
    await listsTheDemoRun([demo.path]);
  });

  it('without a source, serves every run whose log is in the working directory', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'pge-dashboard-dir-'));
    writeFileSync(join(dir, 'pge_shared_state_earlier.md'), demo.text);
    await listsTheDemoRun(['--working-dir', dir]);
  });

  it('exits 2 on a port that is taken', async () => {
    const dashboard = await serve(new RunStore());
    const taken = startCli(['dashboard', '--log', demo.path, '--port', String(dashboard.port)]);
    expect(await taken.exited).toBe(2);
    expect(taken.stderr()).toContain(`cannot listen on 127.0.0.1:${dashboard.port}`);
  });
});
