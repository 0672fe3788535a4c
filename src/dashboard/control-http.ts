import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { z } from 'zod';
import { BusError, ConfigurationError } from '../errors.js';
import {
  type ActionReply,
  CancelAction,
  DecideAction,
  ForkAction,
  StartAction,
} from '../schemas/dashboard-actions.js';
import { TOKEN_HEADER } from './control-types.js';
import { sendJson } from './http-util.js';
import type { RunControl } from './run-control.js';

/**
 * The actions of `pge dashboard --control`: `POST /api/actions/<name>` with a JSON body. A request
 * acts only when all of these hold, checked in this order, and is otherwise refused before it is
 * read: its `Host` names loopback when the dashboard is bound to loopback (the caller checked
 * that); its `Origin`, when it has one, is the dashboard's own (`http://<Host>`), and a
 * `Sec-Fetch-Site` says same-origin; it carries the dashboard's token in the `X-PGE-Token` header
 * (not a cookie, which a browser would send for another site's page too); its body is JSON, at
 * most `MAX_BODY_BYTES`, and valid for the action. Refusals are 403 (origin, token), 415, 413,
 * 400; an action the run cannot take (no such gate, the run has ended) is 409; nothing is done.
 */

/** The largest body an action may have: a start's task at the default task limit, with room for JSON escapes. */
export const MAX_BODY_BYTES = 1024 * 1024;

/** A new token: 32 random bytes, base64url. */
export function newToken(): string {
  return randomBytes(32).toString('base64url');
}

/** Whether `given` is `token`, compared in constant time (of the digests: the lengths may differ). */
export function tokenMatches(given: string | string[] | undefined, token: string): boolean {
  if (typeof given !== 'string') return false;
  const digest = (s: string) => createHash('sha256').update(s, 'utf8').digest();
  return timingSafeEqual(digest(given), digest(token));
}

/** What `handleAction` needs. */
export interface ActionContext {
  control: RunControl;
  token: string;
  /** Who acts, as the runs' logs record it. */
  operator: string;
  csp: string;
}

const ACTIONS = {
  decide: { schema: DecideAction, run: (c: RunControl, a: DecideAction, by: string) => c.decide(a, by) },
  cancel: { schema: CancelAction, run: (c: RunControl, a: CancelAction, by: string) => c.cancel(a, by) },
  start: { schema: StartAction, run: (c: RunControl, a: StartAction, by: string) => c.start(a, by) },
  fork: { schema: ForkAction, run: (c: RunControl, a: ForkAction, by: string) => c.fork(a, by) },
} as const;

type ActionName = keyof typeof ACTIONS;

/** Why a request may not act, or null when it may: the origin and token checks. */
function refusal(req: IncomingMessage, token: string): string | null {
  const origin = req.headers.origin;
  if (origin !== undefined && origin !== `http://${req.headers.host ?? ''}`)
    return `Forbidden: requests from ${origin} may not act here`;
  const site = req.headers['sec-fetch-site'];
  if (site !== undefined && site !== 'same-origin') return `Forbidden: a ${site} request may not act here`;
  if (!tokenMatches(req.headers[TOKEN_HEADER.toLowerCase()], token))
    return `Forbidden: the ${TOKEN_HEADER} header must hold the token pge dashboard printed`;
  return null;
}

/** The body, or null when it is longer than `MAX_BODY_BYTES` (then the rest is not read). */
async function readBody(req: IncomingMessage): Promise<string | null> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_BODY_BYTES) return null;
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString('utf8');
}

/** Answers `POST /api/actions/<name>`: refuses it, or takes the action and answers what it did. */
export async function handleAction(
  req: IncomingMessage,
  res: ServerResponse,
  name: string,
  context: ActionContext,
): Promise<void> {
  const { csp } = context;
  const fail = (status: number, error: string) => {
    // A refused request's body is not read: the connection closes rather than drain it.
    if (!req.complete) res.setHeader('Connection', 'close');
    sendJson(res, status, { error }, csp);
  };
  const why = refusal(req, context.token);
  if (why !== null) return fail(403, why);
  if (!Object.hasOwn(ACTIONS, name)) return fail(404, `no action ${name}`);
  const type = (req.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
  if (type !== 'application/json') return fail(415, 'Unsupported Media Type: send application/json');
  const body = await readBody(req);
  if (body === null) return fail(413, `Content Too Large: at most ${MAX_BODY_BYTES} bytes`);
  let json: unknown;
  try {
    json = JSON.parse(body);
  } catch {
    return fail(400, 'the body is not JSON');
  }
  const action = ACTIONS[name as ActionName];
  const parsed = (action.schema as z.ZodType).safeParse(json);
  if (!parsed.success)
    return fail(
      400,
      parsed.error.issues.map((i) => `${i.path.join('.') || 'body'}: ${i.message}`).join('; '),
    );
  let reply: ActionReply;
  try {
    reply = await (action.run as (c: RunControl, a: unknown, by: string) => Promise<ActionReply>)(
      context.control,
      parsed.data,
      context.operator,
    );
  } catch (error) {
    if (error instanceof ConfigurationError) return fail(409, error.message);
    if (error instanceof BusError) return fail(503, error.message);
    throw error;
  }
  sendJson(res, 200, reply, csp);
}
