import { readFile } from 'node:fs/promises';
import type { Authenticator, NatsConnection, NodeConnectionOptions } from '@nats-io/transport-node';
import { connect, credsAuthenticator, nkeyAuthenticator } from '@nats-io/transport-node';
import { ConfigurationError } from '../errors.js';

/**
 * Connecting to NATS: options (from code or from the environment), credentials, TLS, and a
 * reconnect policy that differs before and after the first connection. A process that cannot
 * reach its server at start is misconfigured and must say so at once (ConfigurationError, CLI
 * exit code 2); a process that was connected and lost its server is an outage, so it reconnects
 * for ever with a growing delay and its subscriptions resume.
 */

/** How to reach and authenticate to NATS. */
export interface NatsConnectionOptions {
  /** Server URL(s). Default: `NATS_URL` of the environment (comma-separated), else `nats://127.0.0.1:4222`. */
  servers?: string | readonly string[];
  /** User name; requires `pass`. */
  user?: string;
  /** Password of `user`. Never printed. */
  pass?: string;
  /** Authentication token. Never printed. */
  token?: string;
  /** An NKey seed (`SU…`). Never printed. */
  nkeySeed?: string;
  /** A file holding an NKey seed. */
  nkeyFile?: string;
  /** A `.creds` file (user JWT and seed), as `nsc` and `pge nats-config` write them. */
  credsFile?: string;
  /**
   * Where replies to this connection's requests arrive (nats.js `inboxPrefix`). Default: the
   * private inbox the `.creds` file's user may subscribe to (`_INBOX_<role>.>` for `pge
   * nats-config`'s credentials), else `_INBOX`.
   */
  inboxPrefix?: string;
  /** TLS files; setting any of them requires TLS. */
  tls?: { caFile?: string; certFile?: string; keyFile?: string };
  /** Client name shown by the server's monitoring. */
  name?: string;
  /** Milliseconds allowed for the first connection (per server); default 5000. */
  connectTimeoutMs?: number;
  /**
   * Milliseconds between the client's pings (nats.js `pingInterval`); default 10 000. A server
   * that leaves two pings unanswered is taken for gone and the client reconnects, to another server
   * of the cluster when it has one: how a process gets away from a server that hangs, or whose
   * network path drops packets without closing the connection.
   */
  pingIntervalMs?: number;
}

const OPTION_NAMES: ReadonlySet<string> = new Set([
  'servers',
  'user',
  'pass',
  'token',
  'nkeySeed',
  'nkeyFile',
  'credsFile',
  'inboxPrefix',
  'tls',
  'name',
  'connectTimeoutMs',
  'pingIntervalMs',
]);
const TLS_NAMES: ReadonlySet<string> = new Set(['caFile', 'certFile', 'keyFile']);
const DEFAULT_SERVER = 'nats://127.0.0.1:4222';
const DEFAULT_CONNECT_TIMEOUT_MS = 5_000;
/** nats.js pings every 2 minutes: a hung server would hold a process for 4 to 6 minutes. */
const DEFAULT_PING_INTERVAL_MS = 10_000;
/** Below it a busy server's pongs could come too late, and the client would reconnect in a loop. */
const MIN_PING_INTERVAL_MS = 100;
/** The longest delay a Node timer takes (a longer one fires at once). */
const MAX_TIMER_MS = 2 ** 31 - 1;
/** Reconnect delays grow with the outage: a quarter of its length so far, within these bounds. */
const MIN_RECONNECT_DELAY_MS = 250;
const MAX_RECONNECT_DELAY_MS = 5_000;

/**
 * Reads connection options from environment variables (empty values count as unset):
 * `NATS_URL` (comma-separated server URLs), `NATS_USER` and `NATS_PASSWORD`, `NATS_TOKEN`,
 * `NATS_NKEY_SEED_FILE` (a file holding an NKey seed), `NATS_CREDS` (a `.creds` file),
 * `NATS_INBOX_PREFIX`, the TLS files `NATS_CA`, `NATS_CERT`, `NATS_KEY`, and
 * `NATS_PING_INTERVAL_MS`. Throws `ConfigurationError` for a ping interval that is not a number.
 */
export function natsOptionsFromEnv(env: NodeJS.ProcessEnv = process.env): NatsConnectionOptions {
  const get = (name: string): string | undefined => {
    const value = env[name]?.trim();
    return value ? value : undefined;
  };
  const options: NatsConnectionOptions = {};
  const url = get('NATS_URL');
  if (url) options.servers = splitServers(url);
  const set = <K extends keyof NatsConnectionOptions>(
    key: K,
    value: NatsConnectionOptions[K] | undefined,
  ) => {
    if (value !== undefined) options[key] = value;
  };
  set('user', get('NATS_USER'));
  set('pass', get('NATS_PASSWORD'));
  set('token', get('NATS_TOKEN'));
  set('nkeyFile', get('NATS_NKEY_SEED_FILE'));
  set('credsFile', get('NATS_CREDS'));
  set('inboxPrefix', get('NATS_INBOX_PREFIX'));
  const ping = get('NATS_PING_INTERVAL_MS');
  if (ping !== undefined) {
    if (!/^\d+$/.test(ping))
      throw new ConfigurationError(`NATS_PING_INTERVAL_MS must be milliseconds, not "${ping}"`);
    options.pingIntervalMs = Number(ping);
  }
  const tls = { caFile: get('NATS_CA'), certFile: get('NATS_CERT'), keyFile: get('NATS_KEY') };
  if (tls.caFile || tls.certFile || tls.keyFile) {
    options.tls = Object.fromEntries(Object.entries(tls).filter(([, value]) => value !== undefined));
  }
  return options;
}

/**
 * Connects to NATS. The first connection is tried once per server within `connectTimeoutMs`; when
 * it fails the promise rejects with `ConfigurationError("cannot connect to NATS at <url>: <reason>")`
 * (credentials in the URL are masked). Once connected, the client reconnects for ever with a
 * delay that grows with the outage (250 ms up to 5 s). Bad or conflicting options reject with `ConfigurationError`.
 */
export async function connectNats(options: NatsConnectionOptions = {}): Promise<NatsConnection> {
  for (const key of Object.keys(options)) {
    if (!OPTION_NAMES.has(key)) throw new ConfigurationError(`unknown NATS connection option "${key}"`);
  }
  for (const key of Object.keys(options.tls ?? {})) {
    if (!TLS_NAMES.has(key)) throw new ConfigurationError(`unknown NATS TLS option "${key}"`);
  }
  const servers = serversOf(options);
  const timeout = options.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS;
  if (!Number.isFinite(timeout) || timeout <= 0) {
    throw new ConfigurationError(`connectTimeoutMs must be a positive number of milliseconds`);
  }
  const pingInterval = options.pingIntervalMs ?? DEFAULT_PING_INTERVAL_MS;
  if (
    !Number.isSafeInteger(pingInterval) ||
    pingInterval < MIN_PING_INTERVAL_MS ||
    pingInterval > MAX_TIMER_MS
  ) {
    throw new ConfigurationError(
      `pingIntervalMs must be a whole number of milliseconds from ${MIN_PING_INTERVAL_MS} to ${MAX_TIMER_MS}`,
    );
  }
  // nats.js asks for the delay on every turn of its dial loop, not once per attempt, so the delay
  // follows the time since the outage began rather than a count of calls.
  let outageStart: number | null = null;
  const reconnectDelay = (): number => {
    outageStart ??= Date.now();
    const quarter = (Date.now() - outageStart) / 4;
    return Math.min(MAX_RECONNECT_DELAY_MS, Math.max(MIN_RECONNECT_DELAY_MS, quarter));
  };
  const connection: NodeConnectionOptions = {
    servers,
    timeout,
    reconnect: true,
    maxReconnectAttempts: -1,
    // Only after a first success: a server that is not there at start is a configuration error.
    waitOnFirstConnect: false,
    reconnectDelayHandler: reconnectDelay,
    pingInterval,
    // Without it nats.js builds an error with a stack trace for every request and publish ack, in
    // case it fails (10 % of a busy coordinator's time); pge names its failures itself.
    noAsyncTraces: true,
    ...(await authOf(options)),
  };
  if (options.name !== undefined) connection.name = options.name;
  if (options.inboxPrefix !== undefined) connection.inboxPrefix = options.inboxPrefix;
  if (options.tls) connection.tls = { ...options.tls };
  let nc: NatsConnection;
  try {
    nc = await connect(connection);
  } catch (cause) {
    const reason = cause instanceof Error ? cause.message : String(cause);
    throw new ConfigurationError(`cannot connect to NATS at ${servers.map(maskUrl).join(', ')}: ${reason}`, {
      cause,
    });
  }
  // Not floating: the loop ends when the connection closes; a status stream that fails only
  // leaves the delay where it is, which is harmless.
  (async () => {
    for await (const status of nc.status()) if (status.type === 'reconnect') outageStart = null;
  })().catch(() => undefined);
  return nc;
}

/** The servers of `options`, for messages: credentials in URLs are masked; `separator` between them. */
export function describeNatsServers(options: NatsConnectionOptions = {}, separator = ', '): string {
  return serversOf(options).map(maskUrl).join(separator);
}

/** The server URLs `options` gives (or `NATS_URL`, or the default), as given. */
export function serversOf(options: NatsConnectionOptions): string[] {
  const given = options.servers ?? process.env.NATS_URL?.trim() ?? '';
  const servers = typeof given === 'string' ? splitServers(given) : [...given];
  return servers.length > 0 ? servers : [DEFAULT_SERVER];
}

function splitServers(value: string): string[] {
  return value
    .split(',')
    .map((server) => server.trim())
    .filter(Boolean);
}

/** `nats://user:secret@host` → `nats://user:***@host`; `nats://token@host` → `nats://***@host`. */
function maskUrl(url: string): string {
  return url.replace(/^([a-z]+:\/\/)([^@/]*)@/i, (_, scheme: string, userInfo: string) =>
    userInfo.includes(':') ? `${scheme}${userInfo.slice(0, userInfo.indexOf(':'))}:***@` : `${scheme}***@`,
  );
}

async function authOf(options: NatsConnectionOptions): Promise<Partial<NodeConnectionOptions>> {
  const methods = [
    options.user !== undefined || options.pass !== undefined ? 'user/pass' : null,
    options.token !== undefined ? 'token' : null,
    options.nkeySeed !== undefined || options.nkeyFile !== undefined ? 'nkey' : null,
    options.credsFile !== undefined ? 'creds' : null,
  ].filter((method) => method !== null);
  if (methods.length > 1) {
    throw new ConfigurationError(`NATS authentication: choose one of ${methods.join(', ')}`);
  }
  if (options.user !== undefined || options.pass !== undefined) {
    if (!options.user || options.pass === undefined) {
      throw new ConfigurationError('NATS authentication: a user needs a password and a password a user');
    }
    return { user: options.user, pass: options.pass };
  }
  if (options.token !== undefined) return { token: options.token };
  if (options.nkeySeed !== undefined && options.nkeyFile !== undefined) {
    throw new ConfigurationError('NATS authentication: give nkeySeed or nkeyFile, not both');
  }
  let authenticator: Authenticator | null = null;
  if (options.nkeySeed !== undefined) {
    authenticator = nkeyAuthenticator(new TextEncoder().encode(options.nkeySeed.trim()));
  } else if (options.nkeyFile !== undefined) {
    const seed = (await readSecret(options.nkeyFile, 'NKey seed')).trim();
    authenticator = nkeyAuthenticator(new TextEncoder().encode(seed));
  } else if (options.credsFile !== undefined) {
    const creds = await readSecret(options.credsFile, 'creds');
    authenticator = credsAuthenticator(new TextEncoder().encode(creds));
    const inbox = privateInboxOf(creds);
    if (inbox !== null && options.inboxPrefix === undefined) return { authenticator, inboxPrefix: inbox };
  }
  return authenticator ? { authenticator } : {};
}

/**
 * The private inbox prefix a `.creds` file's user may subscribe to: the one subscribe permission
 * of the form `_INBOX….>` in its JWT's claims, without the `.>`; null when there is none (or more
 * than one, or the file holds no readable JWT), and nats.js's default applies. A credential that
 * allows its user only its own inbox is how NATS keeps replies private.
 */
export function privateInboxOf(creds: string): string | null {
  const jwt = userJwtOf(creds);
  if (jwt === null) return null;
  let allowed: unknown;
  try {
    allowed = JSON.parse(Buffer.from(jwt.split('.')[1]!, 'base64url').toString('utf8'))?.nats?.sub?.allow;
  } catch {
    return null;
  }
  if (!Array.isArray(allowed)) return null;
  const inboxes = allowed.filter(
    (subject): subject is string =>
      typeof subject === 'string' && subject.startsWith('_INBOX') && subject.endsWith('.>'),
  );
  return inboxes.length === 1 ? inboxes[0]!.slice(0, -2) : null;
}

/** The user JWT a `.creds` file holds, or null. */
export function userJwtOf(creds: string): string | null {
  return /-----BEGIN NATS USER JWT-----\s*([\w-]+\.[\w-]+\.[\w-]+)/.exec(creds)?.[1] ?? null;
}

/**
 * The role a connection's replies are private to, from its inbox prefix (`_INBOX_<role>`, given or
 * read from its `.creds` file): who the process is on a deployment `pge nats-config` wrote. Null
 * when the connection has no such prefix.
 */
export async function credentialRoleOf(options: NatsConnectionOptions): Promise<string | null> {
  const prefix =
    options.inboxPrefix ??
    (options.credsFile === undefined ? null : privateInboxOf(await readSecret(options.credsFile, 'creds')));
  return prefix === null ? null : (/^_INBOX_([\w-]+)$/.exec(prefix)?.[1] ?? null);
}

/** Reads a credentials file; the error names the file and the reason, never the content. */
async function readSecret(path: string, kind: string): Promise<string> {
  try {
    return await readFile(path, 'utf8');
  } catch (cause) {
    const reason = (cause as NodeJS.ErrnoException).code ?? (cause as Error).message;
    throw new ConfigurationError(`cannot read the NATS ${kind} file ${path}: ${reason}`, { cause });
  }
}
