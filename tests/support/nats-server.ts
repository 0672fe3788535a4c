import { type ChildProcess, spawn } from 'node:child_process';
import { accessSync, constants, readFileSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { encodeUser, fmtCreds } from '@nats-io/jwt';
import { createUser, fromSeed } from '@nats-io/nkeys';
import { type ConnectionOptions, credsAuthenticator } from '@nats-io/transport-node';
import { inboxPrefixOf, type NatsRole } from '../../src/bus/permissions.js';
import { writeNatsConfig } from '../../src/runtime/nats-config.js';
import { watchOutput } from './diagnostics.js';

/**
 * A private nats-server for tests: JetStream on, bound to 127.0.0.1 on a free port, its store in a
 * fresh temporary directory that `stop()` deletes. The global setup starts one for the whole run;
 * a test that needs a server of its own (to restart it, or to give it other flags) starts another.
 *
 * ```ts
 * const server = await startNatsServer();
 * const bus = await NatsBus.connect({ servers: server.url });
 * …
 * await server.stop();
 * ```
 */

/** A running nats-server. */
export interface NatsServerHandle {
  /** `nats://127.0.0.1:<port>`. */
  readonly url: string;
  readonly port: number;
  /** The JetStream store directory (deleted by `stop`). */
  readonly storeDir: string;
  /**
   * Stops the server and starts it again on the same port and store, `downMs` later: an outage.
   * With `how: 'crash'` the server is frozen for `frozenMs` (SIGSTOP: messages sent meanwhile wait
   * in its socket), then killed (SIGKILL), as a server that hangs and dies loses what it had not
   * answered; otherwise it is stopped with SIGTERM.
   */
  restart(downMs?: number, how?: { crash: true; frozenMs: number }): Promise<void>;
  /** Has the server read its configuration file again (SIGHUP, as `nats-server --signal reload`). */
  reload(): void;
  /**
   * Freezes the server (SIGSTOP): its connections stay open and it answers nothing, as a server
   * that hangs or whose network drops packets; `thaw` lets it go on (SIGCONT).
   */
  freeze(): void;
  thaw(): void;
  /** Whether its process runs (neither exited nor stopped by the test). */
  running(): boolean;
  /** Kills the server (SIGKILL): a server lost, its store kept (`restart` brings it back). */
  kill(): Promise<void>;
  /** Stops the server (SIGTERM, then SIGKILL after 5 s) and deletes its store. */
  stop(): Promise<void>;
  /**
   * The tail of the server's log (its stderr, across restarts): where it names what it refused
   * ("Publish Violation … Subject …") when a test fails under authorization.
   */
  log(): string;
}

/** Options of `startNatsServer`. */
export interface StartNatsServerOptions {
  /** Start with JetStream (default true); false gives a server pge must refuse. */
  jetstream?: boolean;
  /** Extra command-line arguments (`--user`, `--pass`, …). */
  args?: readonly string[];
  /** Milliseconds to wait for the server to log that it is ready (default 10 000). */
  readyTimeoutMs?: number;
  /** A configuration file that turns JetStream on with its own store (kept by `stop`). */
  configFile?: string;
}

/** The message every test run shows when the binary is missing: CI must not skip NATS tests. */
export const NATS_SERVER_MISSING =
  'nats-server not found: install it (apt-get install nats-server) or set NATS_URL';

/** Debian installs the binary in /usr/sbin, which is not on every user's PATH. */
const EXTRA_DIRS = ['/usr/sbin', '/usr/local/sbin', '/usr/local/bin', '/usr/bin'];

/** The nats-server binary: `NATS_SERVER_BIN`, else the first on PATH or in the usual sbin/bin dirs. */
export function findNatsServer(env: NodeJS.ProcessEnv = process.env): string {
  const candidates = env.NATS_SERVER_BIN
    ? [env.NATS_SERVER_BIN]
    : [...(env.PATH ?? '').split(delimiter).filter(Boolean), ...EXTRA_DIRS].map((dir) =>
        join(dir, 'nats-server'),
      );
  for (const candidate of candidates) {
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not this one: try the next directory
    }
  }
  throw new Error(NATS_SERVER_MISSING);
}

/** Starts a private nats-server; retries on another port if the port was taken meanwhile. */
export async function startNatsServer(options: StartNatsServerOptions = {}): Promise<NatsServerHandle> {
  const binary = findNatsServer();
  const readyTimeoutMs = options.readyTimeoutMs ?? 10_000;
  let lastError: unknown = null;
  for (let attempt = 0; attempt < 3; attempt++) {
    const port = await freePort();
    const storeDir = await mkdtemp(join(tmpdir(), 'pge-nats-'));
    // A configuration file states JetStream and its store itself: the flags would repeat them.
    const store =
      options.configFile === undefined
        ? [...(options.jetstream === false ? [] : ['-js']), '-sd', storeDir]
        : ['-c', options.configFile];
    const args = [...store, ...['-a', '127.0.0.1', '-p', String(port)], ...(options.args ?? [])];
    const server = new ServerProcess(binary, args, port, readyTimeoutMs);
    try {
      await server.start();
      return makeHandle(server, port, storeDir);
    } catch (error) {
      lastError = error;
      await server.kill();
      await rm(storeDir, { recursive: true, force: true });
    }
  }
  throw lastError;
}

/** How much of the server's log a handle keeps. */
const LOG_TAIL_CHARS = 64 * 1024;

/** One nats-server process at a time on a fixed port and store: `restart` spawns the next. */
class ServerProcess {
  private child: ChildProcess | null = null;
  private exited: Promise<void> = Promise.resolve();
  /** Whether the current child has exited, its log read to the end. */
  private closed = false;
  /** The tail of every run's stderr: a long-running server logs for as long as the test run lasts. */
  private stderr = '';

  constructor(
    private readonly binary: string,
    private readonly args: readonly string[],
    private readonly port: number,
    private readonly readyTimeoutMs: number,
  ) {}

  async start(): Promise<void> {
    const child = spawn(this.binary, this.args, { stdio: ['ignore', 'ignore', 'pipe'] });
    this.child = child;
    // Once its log is read to the end too: a server that exits at once has said why.
    this.exited = new Promise((resolve) => child.once('close', () => resolve()));
    this.closed = false;
    void this.exited.then(() => {
      if (this.child === child) this.closed = true;
    });
    const watch = watchOutput(`nats-server on port ${this.port} (pid ${child.pid})`);
    // This run's own log: a restart's server must say it is ready itself.
    let runLog = '';
    child.stderr?.setEncoding('utf8');
    child.stderr?.on('data', (chunk: string) => {
      this.stderr = (this.stderr + chunk).slice(-LOG_TAIL_CHARS);
      runLog = (runLog + chunk).slice(-LOG_TAIL_CHARS);
      watch(chunk);
    });
    await waitUntilReady(
      () => !this.running(),
      this.port,
      this.readyTimeoutMs,
      () => runLog,
    );
  }

  log(): string {
    return this.stderr;
  }

  running(): boolean {
    return this.child !== null && !this.closed;
  }

  signal(signal: NodeJS.Signals): void {
    this.child?.kill(signal);
  }

  async kill(crash?: { frozenMs: number }): Promise<void> {
    const child = this.child;
    if (child === null) return;
    this.child = null;
    if (crash && child.exitCode === null && child.signalCode === null) {
      child.kill('SIGSTOP');
      await new Promise((resolve) => setTimeout(resolve, crash.frozenMs));
      child.kill('SIGKILL');
      await this.exited;
      return;
    }
    if (child.exitCode === null && child.signalCode === null) {
      // A frozen server would not act on SIGTERM until it is let go.
      child.kill('SIGCONT');
      child.kill('SIGTERM');
      const killer = setTimeout(() => child.kill('SIGKILL'), 5_000);
      await this.exited;
      clearTimeout(killer);
    }
  }
}

function makeHandle(server: ServerProcess, port: number, storeDir: string): NatsServerHandle {
  let stopping: Promise<void> | null = null;
  return {
    url: `nats://127.0.0.1:${port}`,
    port,
    storeDir,
    async restart(downMs = 0, how) {
      await server.kill(how?.crash ? { frozenMs: how.frozenMs } : undefined);
      if (downMs > 0) await new Promise((resolve) => setTimeout(resolve, downMs));
      await server.start();
    },
    reload() {
      server.signal('SIGHUP');
    },
    freeze: () => server.signal('SIGSTOP'),
    thaw: () => server.signal('SIGCONT'),
    running: () => server.running(),
    kill: () => server.kill({ frozenMs: 0 }),
    stop() {
      stopping ??= (async () => {
        await server.kill();
        await rm(storeDir, { recursive: true, force: true });
      })();
      return stopping;
    },
    log: () => server.log(),
  };
}

/** A port the kernel just handed out; it can be taken again before the server binds it (hence the retry). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address !== null ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

/**
 * Resolves once the server says it is ready, in its own log; rejects with that log if it exits
 * (and its log is closed) first. A connection to the port would not do: the port was only found free, so when this server
 * cannot bind it, another process's server (of a test file running beside this one) may be
 * listening there.
 */
async function waitUntilReady(
  exited: () => boolean,
  port: number,
  timeoutMs: number,
  log: () => string,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (exited()) {
      throw new Error(`nats-server exited before it was ready:\n${log().slice(-4096)}`);
    }
    if (log().includes(READY_LINE)) return;
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  throw new Error(`nats-server on port ${port} was not ready within ${timeoutMs} ms:\n${log().slice(-4096)}`);
}

/** What nats-server logs once it listens for clients (2.9 and 2.10). */
const READY_LINE = '[INF] Server is ready';

/** A private nats-server started from `pge nats-config`'s files: authorization on. */
export interface SecuredNatsServer extends NatsServerHandle {
  /** The directory `pge nats-config` wrote (deleted by `stop`). */
  readonly configDir: string;
  /** The HTTP monitoring endpoint, when started with `monitor: true`. */
  readonly monitorUrl: string | null;
  /** The credential file of each role, as `pge nats-config` wrote it. */
  readonly creds: Readonly<Record<NatsRole, string>>;
  /** A credential that may do anything, minted by the test, for tests that inspect the server. */
  readonly adminCreds: string;
  /** The environment of a `pge` process of `role`: NATS_URL and NATS_CREDS. */
  env(role: NatsRole): Record<string, string>;
  /** nats.js `connect` options as `role`, or as the test's admin. */
  connectOptions(role: NatsRole | 'admin'): ConnectionOptions;
  /**
   * The permission violations the server logged (publish or subscribe, one line each), but those
   * of a process that may not create or change a stream trying to (every role but the coordinator
   * tries, then leaves the stream to a coordinator: `ensureStreams`). A deployment doing its job
   * has none: a refusal that a process tolerates would otherwise go unseen.
   */
  refusals(): string[];
}

/**
 * A stream or consumer made or updated by a process whose credential may not (it started before
 * the coordinator, or wants other settings): refused, and tolerated, since it then uses the
 * coordinator's.
 */
const UPKEEP = /Subject "\$JS\.API\.(STREAM\.(CREATE|UPDATE)|CONSUMER\.(CREATE|DURABLE\.CREATE))\./;

/**
 * Starts a private nats-server with the configuration `pge nats-config` writes (operator mode, one
 * credential per role; a connection without one is refused), on a free loopback port.
 */
export async function startSecuredNatsServer(
  options: StartNatsServerOptions & { monitor?: boolean } = {},
): Promise<SecuredNatsServer> {
  const { monitor = false, ...start } = options;
  const configDir = await mkdtemp(join(tmpdir(), 'pge-nats-config-'));
  const monitorPort = monitor ? await freePort() : 0;
  const files = await writeNatsConfig({
    dir: configDir,
    host: '127.0.0.1',
    monitorPort,
    storeDir: join(configDir, 'jetstream'),
  });
  const adminCreds = await mintAdminCreds(configDir);
  const server = await startNatsServer({ ...start, configFile: files.configFile });
  const credsOf = (role: NatsRole | 'admin') => (role === 'admin' ? adminCreds : files.creds[role]);
  return {
    ...server,
    // The configuration names the store (the handle's own directory stays empty).
    storeDir: join(configDir, 'jetstream'),
    configDir,
    monitorUrl: monitor ? `http://127.0.0.1:${monitorPort}` : null,
    creds: files.creds,
    adminCreds,
    env: (role) => ({ NATS_URL: server.url, NATS_CREDS: files.creds[role] }),
    connectOptions: (role) => connectOptionsAs(server.url, role, credsOf(role)),
    refusals: () => refusalsIn(server.log()),
    async stop() {
      await server.stop();
      await rm(configDir, { recursive: true, force: true });
    },
  };
}

/** A credential, signed by the account `PGE`, that may do anything: for tests that inspect the server. */
export async function mintAdminCreds(configDir: string): Promise<string> {
  const account = fromSeed(
    new TextEncoder().encode((await readFile(join(configDir, 'keys', 'account.nk'), 'utf8')).trim()),
  );
  const admin = createUser();
  const adminJwt = await encodeUser('pge-test-admin', admin, account, {
    pub: { allow: ['>'] },
    sub: { allow: ['>'] },
    subs: -1,
    data: -1,
    payload: -1,
  });
  const adminCreds = join(configDir, 'test-admin.creds');
  await writeFile(adminCreds, fmtCreds(adminJwt, admin), { mode: 0o600 });
  return adminCreds;
}

/** nats.js options of a connection as `role` with its `.creds` file. */
export function connectOptionsAs(
  servers: string | string[],
  role: NatsRole | 'admin',
  credsFile: string,
): ConnectionOptions {
  return {
    servers,
    authenticator: credsAuthenticator(readFileSync(credsFile)),
    // A client of its own reads its replies in its role's private inbox, as integrators do.
    ...(role === 'admin' ? {} : { inboxPrefix: inboxPrefixOf(role) }),
  };
}

/** The permission violations in a server's log, but those tolerated (`UPKEEP`). */
export function refusalsIn(log: string): string[] {
  return log
    .split('\n')
    .filter((line) => / (Publish|Subscription) Violation /.test(line) && !UPKEEP.test(line));
}
