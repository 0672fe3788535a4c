import { randomBytes } from 'node:crypto';
import { chmod, mkdir, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  decode,
  type Export,
  encodeAccount,
  encodeOperator,
  encodeUser,
  fmtCreds,
  type Import,
} from '@nats-io/jwt';
import { createAccount, createOperator, createUser, fromSeed, type KeyPair } from '@nats-io/nkeys';
import { nanos } from '@nats-io/transport-node';
import { userJwtOf } from '../bus/nats-connection.js';
import {
  type AccountImports,
  accountImports,
  hearsRejections,
  NATS_ROLES,
  type NatsRole,
  ROLE_PERMISSIONS,
  type RolePermissions,
  serviceResponse,
} from '../bus/permissions.js';
import { subjects } from '../bus/subjects.js';
import { ConfigurationError } from '../errors.js';

/**
 * `pge nats-config`: a nats-server configuration with one credential per role, NATS-native. The
 * server runs in operator mode with its accounts preloaded (`resolver: MEMORY`): an operator, the
 * system account, the account `PGE` with JetStream on, which holds the streams and the
 * coordinator, and one account per other role (`PGE_PLANNER`, …, `PGE_OBSERVER`) that imports from
 * `PGE` only what the role uses (`accountImports`). Each role's credential is a user JWT signed by
 * its role's account, carrying the role's publish/subscribe permissions (`ROLE_PERMISSIONS`),
 * written with its seed as a `.creds` file: the kind `nsc` writes and every NATS client and the
 * `nats` CLI read (`--creds`). The server's configuration holds public keys and JWTs only; the
 * secrets are the `.creds` files and the operator's and account's seeds under `keys/`, all
 * readable by their owner only.
 *
 * Run again on the same directory, it keeps the keys and the credentials already issued, and
 * rewrites the server's configuration. With `rotate`, it issues every credential anew and revokes
 * every one issued before (the account's revocation list, which the server reads when it reloads
 * its configuration: `nats-server --signal reload`).
 */

/** Options of `writeNatsConfig`. */
export interface NatsConfigOptions {
  /** Where the files go; created if missing. */
  dir: string;
  /**
   * Address the server listens on. Left out, the one this directory was last written with, else
   * 0.0.0.0 (every interface: it is a server for a deployment). The same holds for the port, the
   * monitoring port and the store.
   */
  host?: string;
  /** Client port (default 4222). */
  port?: number;
  /** HTTP monitoring port (default 8222); 0 turns monitoring off. */
  monitorPort?: number;
  /**
   * Address the monitoring port listens on. Left out, the one this directory was last written
   * with, else 127.0.0.1: the port has no authentication (it shows connections, accounts and
   * streams), so reaching it from another host is a choice made by name, not a default.
   */
  monitorHost?: string;
  /** JetStream's store (default `<dir>/jetstream`). */
  storeDir?: string;
  /**
   * A cluster of servers instead of one (`pge nats-config --cluster <n>`): each gets its own file,
   * `nats-server-<i>.conf`, with the server name `pge-<i>`, routes to the others (authenticated
   * with a route password kept in `keys/`), its own JetStream store `<storeDir>/pge-<i>`, and the
   * same operator, accounts and role credentials. Left out, as last written to this directory;
   * null, a single server again.
   */
  cluster?: readonly ClusterServer[] | null;
  /** Issue every credential anew and revoke those issued before. */
  rotate?: boolean;
  /** Milliseconds since the epoch (tests); default `Date.now`. */
  now?: () => number;
}

/**
 * A server of a cluster, as the others and the clients reach it. Each listens on the configuration's
 * `host` (every interface by default) at these ports, and serves monitoring on its `monitorHost`
 * (loopback by default).
 */
export interface ClusterServer {
  /** Where the other servers reach this one (a host name or address). */
  host: string;
  /** Client port. */
  port: number;
  /** Port of the routes between the servers. */
  clusterPort: number;
  /** HTTP monitoring port; 0 turns monitoring off. */
  monitorPort: number;
}

/** The name of a cluster's `i`-th server (from 1), in its configuration and in JetStream's placement. */
export const clusterServerName = (i: number): string => `pge-${i}`;

/** What `writeNatsConfig` wrote. */
export interface NatsConfigFiles {
  /** The server's configuration: `nats-server -c <configFile>`; the first server's, for a cluster. */
  configFile: string;
  /** Every server's configuration, one per server of a cluster (the one above alone, for a single server). */
  configFiles: string[];
  /** One `.creds` file per role. */
  creds: Record<NatsRole, string>;
  /** The roles whose credential was issued by this call (the others were kept). */
  issued: NatsRole[];
  /** Credentials issued before this time (seconds since the epoch) are revoked; null when none are. */
  revokedBefore: number | null;
}

/** The seeds pge keeps to issue credentials again. */
interface Keys {
  operator: KeyPair;
  system: KeyPair;
  /** The account `PGE`: the streams and the coordinator. */
  account: KeyPair;
  /** The account of every other role. */
  roles: Record<ImportingRole, KeyPair>;
}

type ImportingRole = Exclude<NatsRole, 'coordinator'>;
const IMPORTING_ROLES = NATS_ROLES.filter((role): role is ImportingRole => role !== 'coordinator');

/** The account a role's users belong to. */
function accountOf(keys: Keys, role: NatsRole): KeyPair {
  return role === 'coordinator' ? keys.account : keys.roles[role];
}

function accountName(role: NatsRole): string {
  return role === 'coordinator' ? 'PGE' : `PGE_${role.toUpperCase()}`;
}

const KEY_FILES = { operator: 'operator.nk', system: 'system.nk', account: 'account.nk' } as const;
/** A role's account seed, beside the others: `keys/<role>-account.nk`. */
const roleKeyFile = (role: ImportingRole) => `${role}-account.nk`;
const REVOKED_FILE = 'revoked-before';
/** The server settings a directory was last written with, kept beside the keys. */
interface KeptSettings {
  host?: string;
  port?: number;
  monitorPort?: number;
  monitorHost?: string;
  storeDir?: string;
  cluster?: ClusterServer[];
}

const SETTINGS_FILE = 'settings.json';

async function readKeptSettings(keysDir: string): Promise<KeptSettings> {
  const text = await readOptional(join(keysDir, SETTINGS_FILE));
  if (text === null) return {};
  try {
    return JSON.parse(text) as KeptSettings;
  } catch (cause) {
    throw new ConfigurationError(
      `${join(keysDir, SETTINGS_FILE)} is not JSON: delete it and give the settings again`,
      {
        cause,
      },
    );
  }
}

/** The operator's JWT, issued once: a server cannot reload a config whose operator changed. */
const OPERATOR_JWT_FILE = 'operator.jwt';
/** No limit, in the JWT claims' terms. */
const UNLIMITED = -1;

/** Where the servers listen and keep their streams: the options given, else those an earlier run kept. */
interface Placement {
  host: string;
  port: number;
  monitorPort: number;
  monitorHost: string;
  storeDir: string;
  cluster: readonly ClusterServer[] | null;
}

/**
 * The placement from `options`, what an earlier run was given standing unless given again (a
 * rotation keeps the server as it was); a cluster of fewer than 2 or a port out of range is refused.
 */
function placementOf(options: NatsConfigOptions, kept: KeptSettings, dir: string): Placement {
  const port = options.port ?? kept.port ?? 4222;
  const monitorPort = options.monitorPort ?? kept.monitorPort ?? 8222;
  const cluster = options.cluster === undefined ? (kept.cluster ?? null) : options.cluster;
  if (cluster !== null && cluster.length < 2)
    throw new ConfigurationError(
      `a cluster has at least 2 servers (3 for streams with 3 replicas), got ${cluster.length}`,
    );
  const ports: [string, number][] = [
    ['port', port],
    ['monitor port', monitorPort],
    ...(cluster ?? []).flatMap((server, i): [string, number][] => [
      [`port of server ${i + 1}`, server.port],
      [`cluster port of server ${i + 1}`, server.clusterPort],
      [`monitor port of server ${i + 1}`, server.monitorPort],
    ]),
  ];
  for (const [name, value] of ports) {
    if (!Number.isInteger(value) || value < 0 || value > 65_535)
      throw new ConfigurationError(`the ${name} must be an integer from 0 to 65535, got ${value}`);
  }
  return {
    host: options.host ?? kept.host ?? '0.0.0.0',
    port,
    monitorPort,
    monitorHost: options.monitorHost ?? kept.monitorHost ?? '127.0.0.1',
    storeDir: resolve(options.storeDir ?? kept.storeDir ?? join(dir, 'jetstream')),
    cluster,
  };
}

/**
 * The revocation time of the credentials, moved to now on a rotation of existing keys (null: none
 * revoked). A JWT is revoked when it was issued at or before it, in whole seconds: this waits for
 * the next second, so that the new ones are issued later than every one they replace.
 */
async function revocation(keysDir: string, rotate: boolean, now: () => number): Promise<number | null> {
  // Read even when it is replaced: a file that does not hold a time is an error either way.
  const kept = await readRevokedBefore(keysDir);
  if (!rotate) return kept;
  const revokedBefore = Math.floor(now() / 1000);
  await writeSecret(join(keysDir, REVOKED_FILE), `${revokedBefore}\n`);
  while (Math.floor(Date.now() / 1000) <= revokedBefore) await sleep(50);
  return revokedBefore;
}

/**
 * Writes each role's `.creds` file into `dir`: anew with new keys or on a rotation, else only one
 * missing or signed by an account this directory no longer keeps.
 */
async function issueCreds(
  dir: string,
  keys: Keys,
  anew: boolean,
): Promise<{ creds: Record<NatsRole, string>; issued: NatsRole[] }> {
  const creds = {} as Record<NatsRole, string>;
  const issued: NatsRole[] = [];
  for (const role of NATS_ROLES) {
    const file = join(dir, `${role}.creds`);
    creds[role] = file;
    const account = accountOf(keys, role);
    if (!anew && issuerOf(await readOptional(file)) === account.getPublicKey()) continue;
    const user = createUser();
    const jwt = await encodeUser(`pge-${role}`, user, account, userClaims(ROLE_PERMISSIONS[role]));
    await writeSecret(file, new TextDecoder().decode(fmtCreds(jwt, user)));
    issued.push(role);
  }
  return { creds, issued };
}

/** Writes the configuration of each server of a cluster, `nats-server-<i>.conf`; returns their paths. */
async function writeClusterConfigs(
  dir: string,
  keysDir: string,
  accounts: AccountsConfig,
  { host, monitorHost, storeDir }: Placement,
  cluster: readonly ClusterServer[],
  written: Date,
): Promise<string[]> {
  // The routes' password is the one secret of a cluster's files: they are their owner's only.
  const routePassword = await routeSecret(keysDir);
  const configFiles: string[] = [];
  for (const [i, server] of cluster.entries()) {
    const name = clusterServerName(i + 1);
    const configFile = join(dir, `nats-server-${i + 1}.conf`);
    const routes = cluster
      .filter((other) => other !== server)
      .map((other) => `nats-route://${ROUTE_USER}:${routePassword}@${other.host}:${other.clusterPort}`);
    const text = serverConfig(accounts, {
      listen: `${host}:${server.port}`,
      monitorHost,
      monitorPort: server.monitorPort,
      storeDir: join(storeDir, name),
      written,
      cluster: { serverName: name, listen: `${host}:${server.clusterPort}`, routes, password: routePassword },
    });
    await writeSecret(configFile, text);
    configFiles.push(configFile);
  }
  return configFiles;
}

/** Writes the server's configuration and the credentials of every role into `options.dir`. */
export async function writeNatsConfig(options: NatsConfigOptions): Promise<NatsConfigFiles> {
  const dir = resolve(options.dir);
  const now = options.now ?? Date.now;
  const keysDir = join(dir, 'keys');
  const placement = placementOf(options, await readKeptSettings(keysDir), dir);
  const { host, port, monitorHost, monitorPort, storeDir, cluster } = placement;
  await mkdir(keysDir, { recursive: true, mode: 0o700 });
  await chmod(keysDir, 0o700);

  const { keys, created } = await loadOrCreateKeys(keysDir);
  const revokedBefore = await revocation(keysDir, options.rotate === true && !created, now);
  const { creds, issued } = await issueCreds(dir, keys, created || options.rotate === true);

  const settings = {
    host,
    port,
    monitorPort,
    monitorHost,
    storeDir,
    ...(cluster === null ? {} : { cluster: [...cluster] }),
  };
  await writeFile(join(keysDir, SETTINGS_FILE), `${JSON.stringify(settings, null, 2)}\n`, { mode: 0o600 });
  const accounts = await accountsConfig(keys, await operatorJwt(keysDir, keys), revokedBefore);
  const written = new Date(now());
  let configFiles: string[];
  if (cluster === null) {
    const configFile = join(dir, 'nats-server.conf');
    const listen = `${host}:${port}`;
    const text = serverConfig(accounts, { listen, monitorHost, monitorPort, storeDir, written });
    await writeFile(configFile, text, { mode: 0o644 });
    configFiles = [configFile];
  } else configFiles = await writeClusterConfigs(dir, keysDir, accounts, placement, cluster, written);
  await removeOtherConfigs(dir, configFiles);
  return { configFile: configFiles[0]!, configFiles, creds, issued, revokedBefore };
}

/** Server configurations an earlier run wrote for another shape (one server, or more of a cluster). */
async function removeOtherConfigs(dir: string, written: readonly string[]): Promise<void> {
  for (const file of await readdir(dir)) {
    const path = join(dir, file);
    if (/^nats-server(-\d+)?\.conf$/.test(file) && !written.includes(path)) await rm(path, { force: true });
  }
}

/** The user the servers of a cluster authenticate their routes with. */
const ROUTE_USER = 'pge-route';
const ROUTE_PASSWORD_FILE = 'route-password';

/** The password of a cluster's routes, made once and kept in `keys/`. */
async function routeSecret(keysDir: string): Promise<string> {
  const file = join(keysDir, ROUTE_PASSWORD_FILE);
  const kept = (await readOptional(file))?.trim();
  if (kept) return kept;
  const password = randomBytes(24).toString('base64url');
  await writeSecret(file, `${password}\n`);
  return password;
}

/**
 * The account that signed a `.creds` file's user (null when there is no file or no readable JWT in
 * it): a credential issued by an account this directory no longer keeps is issued anew.
 */
function issuerOf(creds: string | null): string | null {
  const jwt = creds === null ? null : userJwtOf(creds);
  if (jwt === null) return null;
  try {
    return decode(jwt).iss;
  } catch {
    return null;
  }
}

/** The permissions of a role in a user JWT's terms. */
function userClaims(permissions: RolePermissions) {
  return {
    pub: { allow: [...permissions.publish.allow], deny: [...permissions.publish.deny] },
    sub: { allow: [...permissions.subscribe.allow], deny: [...permissions.subscribe.deny] },
    subs: UNLIMITED,
    data: UNLIMITED,
    payload: UNLIMITED,
  };
}

/** What one server's configuration says beside the accounts. */
interface ServerSettings {
  /** `host:port` of the clients. */
  listen: string;
  /** Address of the monitoring port, apart from the clients': loopback unless told otherwise. */
  monitorHost: string;
  monitorPort: number;
  storeDir: string;
  written: Date;
  /** The server's place in a cluster: its name, where it listens for routes, and the others' routes. */
  cluster?: { serverName: string; listen: string; routes: readonly string[]; password: string };
}

/** The operator's JWT as issued with its keys, kept beside them. */
async function operatorJwt(keysDir: string, keys: Keys): Promise<string> {
  const file = join(keysDir, OPERATOR_JWT_FILE);
  const kept = await readOptional(file);
  if (kept !== null) return kept.trim();
  const jwt = await encodeOperator('pge', keys.operator, { system_account: keys.system.getPublicKey() });
  await writeFile(file, `${jwt}\n`, { mode: 0o644 });
  return jwt;
}

/** The operator, its accounts and the roles' summary: the part every server of a deployment shares. */
interface AccountsConfig {
  /** The configuration's lines from `operator:` to the end of the preloaded accounts. */
  lines: string[];
  /** A comment line per role: its credential file and what it may do. */
  roles: string[];
}

/** No limits of the accounts' own (a claim left out is a limit of zero connections, say). */
const ACCOUNT_LIMITS = {
  conn: UNLIMITED,
  leaf: UNLIMITED,
  subs: UNLIMITED,
  data: UNLIMITED,
  payload: UNLIMITED,
  imports: UNLIMITED,
  exports: UNLIMITED,
  wildcards: true,
};

/** What each importing role's account imports from `PGE` and sends to it. */
type RoleImports = Record<ImportingRole, AccountImports>;

/** The revocation claim of an account: every user JWT issued at or before `revokedBefore`. */
const revocationsOf = (revokedBefore: number | null) =>
  revokedBefore === null ? {} : { revocations: { '*': revokedBefore } };

/**
 * The system account's JWT. It imports one subject of `PGE` (the coordinator's reports of refused
 * messages) for a side effect only, and must keep it: the server then registers every account as
 * it starts, since the system account brings in `PGE`, whose imports bring in every role's. Left
 * to their first connections, accounts are registered as those arrive, and nats-server 2.9.10 can
 * then register `PGE` twice at once, leaving the accounts built meanwhile with imports that no one
 * serves (docs/distributed.md, "Starting every process at once").
 */
function systemAccountJwt(keys: Keys): Promise<string> {
  const imports = [streamImport(subjects.rejected('coordinator'), keys.account.getPublicKey())];
  return encodeAccount('SYS', keys.system, { limits: ACCOUNT_LIMITS, imports }, { signer: keys.operator });
}

/** The JWT of `PGE`, the coordinator's account: JetStream's, exporting to the roles and importing what they send. */
function coreAccountJwt(keys: Keys, imports: RoleImports, revokedBefore: number | null): Promise<string> {
  const limits = {
    ...ACCOUNT_LIMITS,
    // JetStream on, unbounded here: pge's streams carry their limits.
    mem_storage: UNLIMITED,
    disk_storage: UNLIMITED,
    streams: UNLIMITED,
    consumer: UNLIMITED,
  };
  const sent = IMPORTING_ROLES.flatMap((role) =>
    imports[role].sends.map((subject) => streamImport(subject, accountOf(keys, role).getPublicKey())),
  );
  return encodeAccount(
    accountName('coordinator'),
    keys.account,
    {
      limits,
      exports: coreExports(Object.values(imports)),
      imports: [...rejectionImports(keys, 'coordinator'), ...sent],
      ...revocationsOf(revokedBefore),
    },
    { signer: keys.operator },
  );
}

/** The JWT of a role's account: no JetStream of its own, the JetStream API it calls is `PGE`'s, imported. */
function roleAccountJwt(
  keys: Keys,
  role: ImportingRole,
  imports: RoleImports,
  revokedBefore: number | null,
): Promise<string> {
  return encodeAccount(
    accountName(role),
    keys.roles[role],
    {
      limits: ACCOUNT_LIMITS,
      imports: [...roleImports(keys.account.getPublicKey(), imports[role]), ...rejectionImports(keys, role)],
      exports: [rejectionsExport(role), ...imports[role].sends.map(streamExport)],
      ...revocationsOf(revokedBefore),
    },
    { signer: keys.operator },
  );
}

async function accountsConfig(
  keys: Keys,
  operatorJwt: string,
  revokedBefore: number | null,
): Promise<AccountsConfig> {
  const systemJwt = await systemAccountJwt(keys);
  const imports = Object.fromEntries(
    IMPORTING_ROLES.map((role) => [role, accountImports(role)]),
  ) as RoleImports;
  const accountJwts = [
    await coreAccountJwt(keys, imports, revokedBefore),
    ...(await Promise.all(IMPORTING_ROLES.map((role) => roleAccountJwt(keys, role, imports, revokedBefore)))),
  ];
  return {
    roles: NATS_ROLES.map((role) => `#   ${role}.creds: ${ROLE_PERMISSIONS[role].summary}`),
    lines: [
      `operator: ${operatorJwt}`,
      `system_account: ${keys.system.getPublicKey()}`,
      'resolver: MEMORY',
      'resolver_preload: {',
      `  ${keys.system.getPublicKey()}: ${systemJwt}`,
      ...accountJwts.map((jwt) => `  ${decode(jwt).sub}: ${jwt}`),
      '}',
    ],
  };
}

function serverConfig(accounts: AccountsConfig, settings: ServerSettings): string {
  const { cluster } = settings;
  return [
    `# nats-server configuration of a pge deployment, written by \`pge nats-config\` on ${settings.written.toISOString()}.`,
    cluster === undefined
      ? '# It holds public keys and JWTs only. The secrets are the credentials beside it, one per role:'
      : `# Server ${cluster.serverName} of a cluster. Its one secret is the routes' password; the others are the credentials beside it, one per role:`,
    ...accounts.roles,
    '# and the seeds in keys/. Start the server with: nats-server -c <this file>',
    '',
    ...(cluster === undefined ? [] : [`server_name: ${cluster.serverName}`]),
    `listen: "${settings.listen}"`,
    ...(settings.monitorPort === 0 ? [] : [`http: "${settings.monitorHost}:${settings.monitorPort}"`]),
    `jetstream { store_dir: ${JSON.stringify(settings.storeDir)} }`,
    ...(cluster === undefined
      ? []
      : [
          'cluster {',
          '  name: pge',
          `  listen: "${cluster.listen}"`,
          `  authorization { user: ${ROUTE_USER}, password: ${JSON.stringify(cluster.password)} }`,
          `  routes: [${cluster.routes.map((route) => JSON.stringify(route)).join(', ')}]`,
          '}',
        ]),
    '',
    ...accounts.lines,
    '',
  ].join('\n');
}

/**
 * What `PGE` exports: every subject some role's account imports, each service with how its answer
 * comes back (`serviceResponse`).
 */
function coreExports(imports: readonly AccountImports[]): Export[] {
  const services = new Set(imports.flatMap((i) => i.services));
  const streams = new Set(imports.flatMap((i) => i.streams));
  return [
    ...[...services].map((subject): Export => {
      const response = serviceResponse(subject);
      return {
        name: subject,
        subject,
        type: 'service',
        response_type: response.type,
        response_threshold: nanos(response.thresholdMs),
      };
    }),
    ...[...streams].map(streamExport),
    rejectionsExport('coordinator'),
  ];
}

function streamExport(subject: string): Export {
  return { name: subject, subject, type: 'stream' };
}

function streamImport(subject: string, account: string): Import {
  return { name: subject, subject, account, type: 'stream' };
}

/** An account's own reports of refused messages, for the accounts that read them. */
function rejectionsExport(role: NatsRole): Export {
  return streamExport(subjects.rejected(role));
}

/** Every other account's reports of refused messages, for an account whose role reads them. */
function rejectionImports(keys: Keys, role: NatsRole): Import[] {
  if (!hearsRejections(role)) return [];
  return NATS_ROLES.filter((other) => other !== role).map((other) =>
    streamImport(subjects.rejected(other), accountOf(keys, other).getPublicKey()),
  );
}

function roleImports(core: string, imports: AccountImports): Import[] {
  return [
    ...imports.services.map(
      (subject): Import => ({ name: subject, subject, account: core, type: 'service' }),
    ),
    ...imports.streams.map((subject) => streamImport(subject, core)),
  ];
}

async function loadOrCreateKeys(keysDir: string): Promise<{ keys: Keys; created: boolean }> {
  const names = Object.keys(KEY_FILES) as (keyof typeof KEY_FILES)[];
  const seeds = await Promise.all(names.map((name) => readOptional(join(keysDir, KEY_FILES[name]))));
  if (seeds.some((seed) => seed !== null) && !seeds.every((seed) => seed !== null)) {
    throw new ConfigurationError(
      `${keysDir} holds some of pge's keys but not all (${Object.values(KEY_FILES).join(', ')}): restore them, or remove the directory to start over`,
    );
  }
  const created = seeds[0] === null;
  const [operator, system, account] = created
    ? [createOperator(), createAccount(), createAccount()]
    : names.map((name, i) => keyPairOf(join(keysDir, KEY_FILES[name]), seeds[i]!));
  if (created) {
    for (const [i, pair] of [operator, system, account].entries())
      await writeSecret(join(keysDir, KEY_FILES[names[i]!]), seedText(pair!));
    // New keys make every credential of an earlier account worthless: no revocation is carried
    // over, and the operator's JWT is issued anew.
    await rm(join(keysDir, REVOKED_FILE), { force: true });
    await rm(join(keysDir, OPERATOR_JWT_FILE), { force: true });
  }
  // The roles' accounts: new with new keys, else kept, and added to a directory written before
  // there were any (its credentials, signed by \`PGE\`, are then issued anew in their accounts).
  const roles = {} as Record<ImportingRole, KeyPair>;
  for (const role of IMPORTING_ROLES) {
    const file = join(keysDir, roleKeyFile(role));
    const seed = created ? null : await readOptional(file);
    if (seed !== null) {
      roles[role] = keyPairOf(file, seed);
    } else {
      roles[role] = createAccount();
      await writeSecret(file, seedText(roles[role]));
    }
  }
  return { keys: { operator: operator!, system: system!, account: account!, roles }, created };
}

function keyPairOf(file: string, seed: string): KeyPair {
  try {
    return fromSeed(new TextEncoder().encode(seed.trim()));
  } catch (cause) {
    throw new ConfigurationError(`${file} does not hold an NKey seed`, { cause });
  }
}

const seedText = (pair: KeyPair) => `${new TextDecoder().decode(pair.getSeed())}\n`;

async function readRevokedBefore(keysDir: string): Promise<number | null> {
  const text = await readOptional(join(keysDir, REVOKED_FILE));
  if (text === null) return null;
  const value = Number(text.trim());
  if (!Number.isInteger(value) || value <= 0)
    throw new ConfigurationError(`${join(keysDir, REVOKED_FILE)} does not hold a time in seconds`);
  return value;
}

/** Writes a file only its owner can read, whatever the umask. */
async function writeSecret(file: string, text: string): Promise<void> {
  await writeFile(file, text, { mode: 0o600 });
  await chmod(file, 0o600);
}

async function readOptional(file: string): Promise<string | null> {
  try {
    return await readFile(file, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw error;
  }
}
