import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { runMachine } from '../machines/run-machine.js';
import { sessionMachine } from '../machines/session-machine.js';
import { stepMachine } from '../machines/step-machine.js';
import { loadAppScript } from './app-bundle.js';
import { APP_STYLE, PAGE_HTML } from './assets/page.js';
import { layoutChart } from './chart-layout.js';
import type { ChartLayout } from './chart-types.js';
import { handleAction } from './control-http.js';
import type { ControlInfo, ControlledView } from './control-types.js';
import {
  addressedRight,
  admit,
  DASHBOARD_CSP,
  openEventStream,
  securityHeaders,
  send,
  sendJson,
  writeEvent,
} from './http-util.js';
import type { RunControl } from './run-control.js';
import type { RunStore } from './run-store.js';
import type { RunList, RunView } from './run-view-types.js';

/**
 * The dashboard's web server: node:http, one page, its script and style, a JSON API and a
 * server-sent event stream. Everything the page needs comes from this server, so it works with
 * no network at all. It only reads: every method but GET and HEAD is refused, unless `control` is
 * given (`pge dashboard --control`): then a POST to `/api/actions/<name>` that carries the token
 * from the dashboard's own origin acts on a run (`control-http.ts`).
 */

/**
 * How long an API request waits for the runs' charts to be replayed over the events that have
 * arrived: a long backlog (a deployment's runs read back at start) answers with what is replayed so
 * far, and the page is updated as the rest comes.
 */
const SETTLE_WAIT_MS = 2_000;

/** Options of `startDashboard`. */
export interface DashboardOptions {
  store: RunStore;
  /** Address to bind; default 127.0.0.1, this machine only. */
  host?: string;
  /** Port; 0 (the default) picks a free one. */
  port?: number;
  /** Milliseconds to gather changes before pushing a view (default 100). */
  debounceMs?: number;
  /** Acting on runs from the page: how, the token every action must carry, and who acts. Absent: read-only. */
  control?: { control: RunControl; token: string; operator: string };
}

/** A running dashboard. */
export interface Dashboard {
  /** The page's address, e.g. `http://127.0.0.1:4317/`. */
  readonly url: string;
  readonly port: number;
  /** Ends the event streams and stops the server. */
  close(): Promise<void>;
}

/** The session, run and step charts. */
interface ChartLayouts {
  session: ChartLayout;
  run: ChartLayout;
  step: ChartLayout;
}

let laidOut: Promise<ChartLayouts> | undefined;

/**
 * The charts, laid out once per process (ELK takes a few hundred milliseconds for the three): the
 * machines do not change while it runs.
 */
function charts(): Promise<ChartLayouts> {
  laidOut ??= (async () => {
    const [session, run, step] = await Promise.all([
      layoutChart(sessionMachine),
      layoutChart(runMachine),
      layoutChart(stepMachine),
    ]);
    return { session, run, step };
  })();
  return laidOut;
}

/** A path segment decoded; a malformed escape names no run rather than failing the request. */
function decodeOr(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    return '';
  }
}

/** What the server's handlers share: the runs, the page's policy, and how a view is shown. */
interface Site {
  store: RunStore;
  csp: string;
  debounceMs: number;
  runList(): RunList;
  /** A view as the page gets it: with what may be done to its run when the dashboard controls runs. */
  withControl(view: RunView): ControlledView;
  /** How to end each event stream open, for `close`. */
  streams: Set<() => void>;
}

/**
 * Follows the runs on a server-sent event stream: the run list, and the view of the run `wanted`
 * (without one, the most recently updated run), each pushed when it changed, at most once per
 * `debounceMs`.
 */
function streamRuns(site: Site, req: IncomingMessage, res: ServerResponse, wanted: string | null): void {
  const { store } = site;
  openEventStream(res, site.csp);
  const current = () => wanted ?? store.latest();
  let shown = current();
  let listChanged = true;
  let viewChanged = true;
  let timer: NodeJS.Timeout | null = null;
  const flush = () => {
    timer = null;
    if (listChanged) writeEvent(res, 'runs', site.runList());
    const now = current();
    if (viewChanged || now !== shown) {
      shown = now;
      const view = now === null ? undefined : store.view(now);
      if (view) writeEvent(res, 'view', site.withControl(view));
    }
    listChanged = false;
    viewChanged = false;
  };
  const unsubscribe = store.subscribe((runId) => {
    listChanged = true;
    if (runId === null || runId === current()) viewChanged = true;
    timer ??= setTimeout(flush, site.debounceMs);
  });
  // A comment line now and then keeps proxies and idle timeouts from closing the stream.
  const heartbeat = setInterval(() => res.write(': ping\n\n'), 15_000);
  const end = () => {
    unsubscribe();
    clearInterval(heartbeat);
    if (timer) clearTimeout(timer);
    site.streams.delete(end);
    res.end();
  };
  site.streams.add(end);
  req.on('close', end);
  flush();
}

/**
 * `/api/runs`: the run list, once the runs' charts have been replayed over every event that has
 * arrived (or `SETTLE_WAIT_MS`); `?status=waiting,running`: only the runs in one of those statuses.
 */
async function answerRunList(site: Site, url: URL, res: ServerResponse): Promise<void> {
  await site.store.settled(SETTLE_WAIT_MS);
  const statuses = url.searchParams.get('status')?.split(',').filter(Boolean) ?? [];
  const list = site.runList();
  if (statuses.length > 0) list.runs = list.runs.filter((r) => statuses.includes(r.status));
  sendJson(res, 200, list, site.csp);
}

/** `/api/runs/<id>`: the run's view, once replayed like the list. */
async function answerRunView(site: Site, runId: string, res: ServerResponse): Promise<void> {
  await site.store.settled(SETTLE_WAIT_MS);
  const view = site.store.view(runId);
  if (view) sendJson(res, 200, site.withControl(view), site.csp);
  else sendJson(res, 404, { error: 'no such run' }, site.csp);
}

/** Listens on `host:port` (0: a free one); resolves with the port once it does. */
async function listen(server: Server, port: number, host: string): Promise<number> {
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  return (server.address() as AddressInfo).port;
}

/** Starts the dashboard; resolves once it listens. */
export async function startDashboard(options: DashboardOptions): Promise<Dashboard> {
  const { store, control } = options;
  const host = options.host ?? '127.0.0.1';
  const layouts = await charts();
  const script = await loadAppScript();
  const csp = DASHBOARD_CSP;
  const site: Site = {
    store,
    csp,
    debounceMs: options.debounceMs ?? 100,
    runList: () => ({ runs: store.list(), problems: store.problems }),
    withControl: (view) => (control ? { ...view, control: control.control.abilitiesFor(view) } : view),
    streams: new Set(),
  };
  const files = new Map([
    ['/', ['text/html', PAGE_HTML]],
    ['/index.html', ['text/html', PAGE_HTML]],
    ['/app.js', ['text/javascript', script]],
    ['/app.css', ['text/css', APP_STYLE]],
  ] as const);

  async function route(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://dashboard.invalid');
    const path = url.pathname;
    if (control && req.method === 'POST' && path.startsWith('/api/actions/')) {
      if (!addressedRight(req, res, host, csp)) return;
      return handleAction(req, res, path.slice('/api/actions/'.length), { ...control, csp });
    }
    if (!admit(req, res, host, csp)) return;
    const file = files.get(path as '/');
    if (file) {
      send(res, 200, file[0], file[1], csp);
    } else if (path === '/api/charts') {
      sendJson(res, 200, layouts, csp);
    } else if (path === '/api/control' && control) {
      const info: ControlInfo = { operator: control.operator, abilities: control.control.abilities };
      sendJson(res, 200, info, csp);
    } else if (path === '/api/runs') {
      await answerRunList(site, url, res);
    } else if (path.startsWith('/api/runs/')) {
      await answerRunView(site, decodeOr(path.slice('/api/runs/'.length)), res);
    } else if (path === '/favicon.ico') {
      // No icon: an empty answer, so the browser neither asks again nor logs an error.
      res.writeHead(204, securityHeaders(csp)).end();
    } else if (path === '/events') {
      streamRuns(site, req, res, url.searchParams.get('run') || null);
    } else {
      send(res, 404, 'text/plain', 'Not Found\n', csp);
    }
  }

  const server = createServer((req, res) => {
    route(req, res).catch((error: unknown) => {
      // A defect in building a view must not take the dashboard down for the other runs.
      if (!res.headersSent) send(res, 500, 'text/plain', `Internal error: ${String(error)}\n`, csp);
      else res.end();
    });
  });
  const port = await listen(server, options.port ?? 0, host);
  const shownHost = host.includes(':') ? `[${host}]` : host;
  return {
    url: `http://${shownHost}:${port}/`,
    port,
    async close() {
      for (const end of [...site.streams]) end();
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
    },
  };
}
