import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createInspector, type StatelyInspectionEvent } from '@statelyai/inspect';
import type { InspectionEvent } from 'xstate';
import { admit, openEventStream, send, writeEvent } from './http-util.js';

/**
 * `--inspect`: a run's actors, live in Stately's inspector. `@statelyai/inspect` turns XState's
 * inspection events into Stately's; this bridge serves a page on 127.0.0.1 that frames Stately's
 * inspector UI (from stately.ai: it needs internet) and hands it those events with `postMessage`,
 * as the package's own `@statelyai/inspect/server` bridge does. The events go from this process to
 * the browser only, over a server-sent event stream: no relay server sees the run, and nothing
 * listens beyond loopback (the package's server binds every interface, and its Sky inspector
 * sends the run to a hosted relay and keeps the process alive).
 */

/** Stately's inspector UI, which the bridge page frames. */
export const STATELY_INSPECTOR_URL = 'https://stately.ai/inspect';

/** Options of `startInspectorBridge`. */
export interface InspectorBridgeOptions {
  /** Default 127.0.0.1. */
  host?: string;
  /** Default 0: any free port. */
  port?: number;
  /** The inspector UI to frame; default `STATELY_INSPECTOR_URL`. */
  inspectorUrl?: string;
}

/** A running bridge. */
export interface InspectorBridge {
  /** The page to open in a browser. */
  readonly url: string;
  /** XState's `inspect` option: pass it to `createActor` (or `PlannerGeneratorEvaluator.attachInspector`). */
  readonly inspect: (event: InspectionEvent) => void;
  /** Resolves when the inspector UI in a browser has connected and is ready for events. */
  readonly connected: Promise<void>;
  /** Tells the page that the run is over, then stops the server. */
  close(): Promise<void>;
}

/** Depth past which nested data is elided, as the package's own serializers do (default 10). */
const MAX_DEPTH = 10;
/** Events other than actor registrations replayed to an inspector that connects late. */
const MAX_REPLAY = 2_000;

/**
 * A JSON-safe copy: cycles and depth cut off, functions named, `toJSON` honoured (XState's
 * snapshots and actor refs define it, which keeps machines and parents out of the copy).
 */
function plain(value: unknown, depth = 0, ancestors: object[] = []): unknown {
  if (typeof value === 'function') return { type: value.name };
  if (typeof value === 'bigint') return value.toString();
  if (value === null || typeof value !== 'object') return value;
  if (ancestors.includes(value)) return '[Circular]';
  if (depth >= MAX_DEPTH) return '[Object]';
  const json = (value as { toJSON?: unknown }).toJSON;
  if (typeof json === 'function') return plain(json.call(value), depth, ancestors);
  const inside = [...ancestors, value];
  if (Array.isArray(value)) return value.map((item) => plain(item, depth + 1, inside) ?? null);
  return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, plain(v, depth + 1, inside)]));
}

/** The bridge page: the inspector in a frame, and the script that feeds it. */
function bridgePage(inspectorUrl: string): string {
  const src = inspectorUrl.replace(/&/g, '&amp;').replace(/"/g, '&quot;').replace(/</g, '&lt;');
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>pge: Stately inspector</title>
<link rel="stylesheet" href="/bridge.css"><script src="/bridge.js" defer></script></head>
<body><p id="status">Loading Stately's inspector from stately.ai (needs internet)…</p>
<iframe id="inspector" title="Stately inspector" data-src="${src}"></iframe></body></html>
`;
}

const BRIDGE_STYLE = `html, body { margin: 0; height: 100%; font-family: system-ui, sans-serif; }
#status { margin: 0; padding: 4px 10px; font-size: 12px; background: #1d2330; color: #fff; }
iframe { border: 0; width: 100%; height: calc(100% - 24px); }
`;

/**
 * Loads the inspector into the frame only once it listens for the inspector's one
 * `@statelyai.connected` message (accepted from the inspector's origin only), then streams the
 * events to it, addressed to that origin only.
 */
const BRIDGE_SCRIPT = `'use strict';
(function () {
  var frame = document.getElementById('inspector');
  var status = document.getElementById('status');
  var origin = new URL(frame.dataset.src).origin;
  var source = null;
  window.addEventListener('message', function (e) {
    if (e.origin !== origin || !e.data || e.data.type !== '@statelyai.connected') return;
    if (source) source.close();
    status.textContent = 'Inspector connected: the run is shown live.';
    source = new EventSource('/events');
    source.addEventListener('inspection', function (m) {
      frame.contentWindow.postMessage(JSON.parse(m.data), origin);
    });
    source.addEventListener('end', function () {
      source.close();
      status.textContent = 'The run has ended; pge has stopped serving. The inspector keeps what it showed.';
    });
  });
  frame.src = frame.dataset.src;
})();
`;

/** Starts the bridge on loopback; resolves once it listens. */
export async function startInspectorBridge(options: InspectorBridgeOptions = {}): Promise<InspectorBridge> {
  const host = options.host ?? '127.0.0.1';
  const inspectorUrl = new URL(options.inspectorUrl ?? STATELY_INSPECTOR_URL);
  const csp = [
    "default-src 'self'",
    `frame-src ${inspectorUrl.origin}`,
    "object-src 'none'",
    "base-uri 'none'",
    "form-action 'none'",
    "frame-ancestors 'none'",
  ].join('; ');
  // An inspector that connects (or reloads) mid-run is sent the run so far: every actor's
  // registration, and the latest events, bounded so that a long run cannot grow without end.
  const registrations: string[] = [];
  const recent: string[] = [];
  const clients = new Set<ServerResponse>();
  let markConnected: () => void = () => {};
  const connected = new Promise<void>((resolve) => {
    markConnected = resolve;
  });
  const inspector = createInspector({
    send(event: StatelyInspectionEvent) {
      const data = JSON.stringify(plain(event));
      const kept = event.type === '@xstate.actor' ? registrations : recent;
      kept.push(data);
      if (recent.length > MAX_REPLAY) recent.shift();
      for (const res of clients) res.write(`event: inspection\ndata: ${data}\n\n`);
    },
  });

  function route(req: IncomingMessage, res: ServerResponse): void {
    if (!admit(req, res, host, csp)) return;
    const path = new URL(req.url ?? '/', 'http://bridge.invalid').pathname;
    if (path === '/') send(res, 200, 'text/html', bridgePage(inspectorUrl.href), csp);
    else if (path === '/bridge.js') send(res, 200, 'text/javascript', BRIDGE_SCRIPT, csp);
    else if (path === '/bridge.css') send(res, 200, 'text/css', BRIDGE_STYLE, csp);
    else if (path === '/events') stream(req, res);
    else send(res, 404, 'text/plain', 'Not Found\n', csp);
  }

  function stream(req: IncomingMessage, res: ServerResponse): void {
    openEventStream(res, csp);
    for (const data of [...registrations, ...recent]) res.write(`event: inspection\ndata: ${data}\n\n`);
    clients.add(res);
    req.on('close', () => clients.delete(res));
    markConnected();
  }

  const server = createServer(route);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://${host.includes(':') ? `[${host}]` : host}:${port}/`,
    inspect: (event) => inspector.inspect.next?.(event),
    connected,
    async close() {
      // The inspector converts events on a zero-delay timer: let the last ones through first.
      await new Promise((resolve) => setTimeout(resolve, 20));
      for (const res of clients) {
        writeEvent(res, 'end', {});
        res.end();
      }
      clients.clear();
      inspector.stop();
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
    },
  };
}
