import { ConfigurationError } from '../errors.js';
import { type ClusterServer, writeNatsConfig } from '../runtime/nats-config.js';
import { ExitCode } from './exit-codes.js';
import type { CommandLine } from './flags.js';
import type { CliIo } from './io.js';

/**
 * `pge nats-config --dir <dir>`: writes a nats-server configuration and one credential per role
 * (see `writeNatsConfig`), then says what it wrote and how to start the server. It prints file
 * names, never what the credentials hold.
 */
export async function natsConfigCommand(line: CommandLine, io: CliIo): Promise<number> {
  const { values } = line.flags;
  if (typeof values.dir !== 'string' || values.dir === '')
    throw new ConfigurationError('pge nats-config needs --dir <dir>');
  const dir = values.dir;
  const files = await writeNatsConfig({
    dir,
    ...(typeof values.host === 'string' ? { host: values.host } : {}),
    ...(typeof values.port === 'number' ? { port: values.port } : {}),
    ...(typeof values['monitor-port'] === 'number' ? { monitorPort: values['monitor-port'] } : {}),
    ...(typeof values['monitor-host'] === 'string' ? { monitorHost: values['monitor-host'] } : {}),
    ...(typeof values['store-dir'] === 'string' ? { storeDir: values['store-dir'] } : {}),
    ...clusterOf(values),
    rotate: values.rotate === true,
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
  return ExitCode.passed;
}

/**
 * The servers `--cluster <n>` asks for: on the hosts of `--cluster-hosts`, each on the same ports,
 * or on this machine with ports counted up from `--port`, `--cluster-port` and `--monitor-port`.
 * Nothing when `--cluster` is not given (the directory's last setting stands).
 */
function clusterOf(values: Record<string, unknown>): { cluster?: ClusterServer[] | null } {
  const count = values.cluster;
  const hosts =
    typeof values['cluster-hosts'] === 'string'
      ? values['cluster-hosts']
          .split(',')
          .map((host) => host.trim())
          .filter(Boolean)
      : null;
  if (typeof count !== 'number') {
    if (hosts !== null || values['cluster-port'] !== undefined)
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
  const port = typeof values.port === 'number' ? values.port : 4222;
  const clusterPort = typeof values['cluster-port'] === 'number' ? values['cluster-port'] : 6222;
  const monitorPort = typeof values['monitor-port'] === 'number' ? values['monitor-port'] : 8222;
  // On one machine the servers reach each other where they listen (loopback when on every interface).
  const local = typeof values.host === 'string' && values.host !== '0.0.0.0' ? values.host : '127.0.0.1';
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
