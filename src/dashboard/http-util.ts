import type { IncomingMessage, ServerResponse } from 'node:http';
import { isLoopback } from '../loopback.js';

/**
 * The HTTP rules every local page of pge follows (the dashboard and the inspector bridge): read
 * only, same-origin only, and closed to other sites that a browser on this machine happens to be
 * showing.
 */

/**
 * The dashboard's Content-Security-Policy: scripts, styles and everything else from the page's
 * own origin only. No inline script can run, so even text that slipped into the DOM as markup
 * could not execute; and no request can leave for another host.
 */
export const DASHBOARD_CSP = [
  "default-src 'self'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self'",
  "connect-src 'self'",
  "font-src 'self'",
  "object-src 'none'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ');

/** Headers sent with every answer. */
export function securityHeaders(csp: string): Record<string, string> {
  return {
    'Content-Security-Policy': csp,
    'X-Content-Type-Options': 'nosniff',
    'Referrer-Policy': 'no-referrer',
    'Cross-Origin-Resource-Policy': 'same-origin',
    'Cache-Control': 'no-store',
  };
}

/**
 * Whether a request may be answered. Only GET and HEAD: the pages show, they never change
 * anything. On a loopback address the `Host` header must name loopback too: a web page elsewhere
 * that points its own domain at 127.0.0.1 (DNS rebinding) would otherwise read the runs.
 * Answers the refusal itself and returns false.
 */
export function admit(req: IncomingMessage, res: ServerResponse, boundHost: string, csp: string): boolean {
  if (req.method !== 'GET' && req.method !== 'HEAD') {
    send(res, 405, 'text/plain', 'Method Not Allowed: this server is read-only\n', csp, {
      Allow: 'GET, HEAD',
    });
    return false;
  }
  return addressedRight(req, res, boundHost, csp);
}

/**
 * Whether a request is addressed to this server as bound: on a loopback address the `Host` header
 * must name loopback too (see `admit`). Answers the refusal (421) itself and returns false.
 */
export function addressedRight(
  req: IncomingMessage,
  res: ServerResponse,
  boundHost: string,
  csp: string,
): boolean {
  const host = (req.headers.host ?? '').replace(/:\d+$/, '');
  if (isLoopback(boundHost) && !isLoopback(host)) {
    send(res, 421, 'text/plain', 'Misdirected Request: use a loopback address\n', csp);
    return false;
  }
  return true;
}

/** Sends a whole answer. A HEAD request gets the headers only. */
export function send(
  res: ServerResponse,
  status: number,
  type: string,
  body: string,
  csp: string,
  extra: Record<string, string> = {},
): void {
  const data = Buffer.from(body, 'utf8');
  res.writeHead(status, {
    ...securityHeaders(csp),
    'Content-Type': `${type}; charset=utf-8`,
    'Content-Length': String(data.length),
    ...extra,
  });
  res.end(res.req.method === 'HEAD' ? undefined : data);
}

/** Sends a value as JSON. */
export function sendJson(res: ServerResponse, status: number, value: unknown, csp: string): void {
  send(res, status, 'application/json', `${JSON.stringify(value)}\n`, csp);
}

/** Starts a server-sent event stream on `res`. */
export function openEventStream(res: ServerResponse, csp: string): void {
  res.writeHead(200, {
    ...securityHeaders(csp),
    'Content-Type': 'text/event-stream; charset=utf-8',
    Connection: 'keep-alive',
  });
  // Reconnect quickly after a restart of the dashboard.
  res.write('retry: 1000\n\n');
}

/** Writes one server-sent event; `data` is JSON, so it holds no raw newline. */
export function writeEvent(res: ServerResponse, name: string, data: unknown): void {
  res.write(`event: ${name}\ndata: ${JSON.stringify(data)}\n\n`);
}
