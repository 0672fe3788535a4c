import { Command, Option } from '@commander-js/extra-typings';
import { ConfigurationError } from '../errors.js';
import type { ClusterServer } from '../runtime/nats-config.js';
import { FLAG_GROUPS } from './flag-table.js';
import { integerArgument } from './flag-values.js';
import type { CliIo } from './io.js';

/**
 * `pge nats-config --dir <dir>`: writes a nats-server configuration and one credential per role
 * (see `writeNatsConfig`), then says what it wrote and how to start the server. It prints file
 * names, never what the credentials hold. Declared here whole, as commander takes a command;
 * `program.ts` adds the help's prose.
 */

const GROUP = `${FLAG_GROUPS.nats}:`;
// A text flag needs no parser: that it does not take the next flag as its value is checked for
// every command before commander reads the line (`helpAsked`).
const text = <Flags extends string>(flags: Flags, description: string) =>
  new Option(flags, description).helpGroup(GROUP);
const integer = <Flags extends string>(flags: Flags, description: string) =>
  new Option(flags, description)
    .argParser(integerArgument(flags.slice(2, flags.indexOf(' '))))
    .helpGroup(GROUP);

/** The options of `pge nats-config`, typed. */
function natsConfigOptions() {
  return new Command('nats-config')
    .addOption(text('--dir <dir>', 'Where to write the config and the credentials (required)'))
    .addOption(
      text(
        '--host <addr>',
        'Address the server listens on (default: as last written to <dir>, else 0.0.0.0)',
      ),
    )
    .addOption(integer('--port <n>', 'Client port of the server (default: as last written, else 4222)'))
    .addOption(
      integer(
        '--monitor-port <n>',
        'HTTP monitoring port, unauthenticated: bind it privately (0: off; default: as last written, else 8222)',
      ),
    )
    .addOption(
      text(
        '--monitor-host <addr>',
        'Address the monitoring port listens on; another host reaches it only if you name one (default: as last written, else 127.0.0.1)',
      ),
    )
    .addOption(
      text('--store-dir <dir>', "JetStream's store (default: as last written, else <dir>/jetstream)"),
    )
    .addOption(
      integer(
        '--cluster <n>',
        'Write one config per server of an n-server JetStream cluster, nats-server-<i>.conf (3 or 5 for replicated streams; 1: one server again; default: as last written)',
      ),
    )
    .addOption(
      text(
        '--cluster-hosts <h1,h2,…>',
        'With --cluster: the host each server is reached at, one per server, all on the same ports (default: one machine, 127.0.0.1, ports counted up from --port, --cluster-port and --monitor-port)',
      ),
    )
    .addOption(
      integer('--cluster-port <n>', 'With --cluster: port of the routes between the servers (default 6222)'),
    )
    .addOption(
      new Option(
        '--rotate',
        'Issue every credential anew and revoke all issued before (then reload the servers)',
      ).helpGroup(GROUP),
    );
}

/** What the flags of `pge nats-config` say. */
type NatsConfigFlags = ReturnType<ReturnType<typeof natsConfigOptions>['opts']>;

/** `pge nats-config`, declared: it writes the files and lists them on `io.stdout`. */
export function natsConfigCommand(io: CliIo) {
  return natsConfigOptions().action(async (flags) => writeConfig(flags, io));
}

async function writeConfig(flags: NatsConfigFlags, io: CliIo): Promise<void> {
  const { dir } = flags;
  if (dir === undefined || dir === '') throw new ConfigurationError('pge nats-config needs --dir <dir>');
  // Loaded once the flags are good: the help and usage errors answer without the NATS key libraries.
  const { writeNatsConfig } = await import('../runtime/nats-config.js');
  const files = await writeNatsConfig({
    dir,
    ...(flags.host === undefined ? {} : { host: flags.host }),
    ...(flags.port === undefined ? {} : { port: flags.port }),
    ...(flags.monitorPort === undefined ? {} : { monitorPort: flags.monitorPort }),
    ...(flags.monitorHost === undefined ? {} : { monitorHost: flags.monitorHost }),
    ...(flags.storeDir === undefined ? {} : { storeDir: flags.storeDir }),
    ...clusterOf(flags),
    rotate: flags.rotate === true,
  }).catch((error: unknown) => {
    // A directory that cannot be written is the command's to fix, as a bad flag is.
    const code = (error as NodeJS.ErrnoException).code;
    if (code === undefined) throw error;
    throw new ConfigurationError(`cannot write the NATS config into ${dir}: ${(error as Error).message}`, {
      cause: error,
    });
  });
  const lines = [
    ...files.configFiles.map((file) => `wrote ${file}`),
    ...Object.entries(files.creds).map(
      ([role, file]) => `${files.issued.includes(role as never) ? 'issued' : 'kept  '} ${file}`,
    ),
    ...(files.revokedBefore === null
      ? []
      : [
          `credentials issued before ${new Date(files.revokedBefore * 1000).toISOString()} are revoked once the server reloads its config (nats-server --signal reload)`,
        ]),
    ...(files.configFiles.length === 1
      ? [`start the server: nats-server -c ${files.configFile}`]
      : [`start each server with its file, on its host: nats-server -c ${files.configFiles.join(', ')}`]),
    'give each process its role: --creds <dir>/<role>.creds (or NATS_CREDS)',
  ];
  io.stdout.write(`${lines.join('\n')}\n`);
}

/**
 * The servers `--cluster <n>` asks for: on the hosts of `--cluster-hosts`, each on the same ports,
 * or on this machine with ports counted up from `--port`, `--cluster-port` and `--monitor-port`.
 * Nothing when `--cluster` is not given (the directory's last setting stands).
 */
function clusterOf(flags: NatsConfigFlags): { cluster?: ClusterServer[] | null } {
  const count = flags.cluster;
  const hosts =
    flags.clusterHosts !== undefined
      ? flags.clusterHosts
          .split(',')
          .map((host) => host.trim())
          .filter(Boolean)
      : null;
  if (count === undefined) {
    if (hosts !== null || flags.clusterPort !== undefined)
      throw new ConfigurationError('--cluster-hosts and --cluster-port go with --cluster <n>');
    return {};
  }
  if (count === 1) return { cluster: null };
  if (count < 2)
    throw new ConfigurationError(
      `--cluster needs a count of servers of 2 or more (1: a single server), got ${count}`,
    );
  if (hosts !== null && hosts.length !== count)
    throw new ConfigurationError(
      `--cluster-hosts names ${hosts.length} hosts for --cluster ${count}: give one per server`,
    );
  const port = flags.port ?? 4222;
  const clusterPort = flags.clusterPort ?? 6222;
  const monitorPort = flags.monitorPort ?? 8222;
  // On one machine the servers reach each other where they listen (loopback when on every interface).
  const local = flags.host !== undefined && flags.host !== '0.0.0.0' ? flags.host : '127.0.0.1';
  return {
    cluster: Array.from({ length: count }, (_, i) =>
      hosts === null
        ? {
            host: local,
            port: port + i,
            clusterPort: clusterPort + i,
            monitorPort: monitorPort === 0 ? 0 : monitorPort + i,
          }
        : { host: hosts[i]!, port, clusterPort, monitorPort },
    ),
  };
}
