import { ConfigurationError } from '../errors.js';
import { writeNatsConfig } from '../runtime/nats-config.js';
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
  if (line.positionals.length > 0)
    throw new ConfigurationError(`pge nats-config takes no arguments, got "${line.positionals.join(' ')}"`);
  if (typeof values.dir !== 'string' || values.dir === '')
    throw new ConfigurationError('pge nats-config needs --dir <dir>');
  const dir = values.dir;
  const files = await writeNatsConfig({
    dir,
    ...(typeof values.host === 'string' ? { host: values.host } : {}),
    ...(typeof values.port === 'number' ? { port: values.port } : {}),
    ...(typeof values['monitor-port'] === 'number' ? { monitorPort: values['monitor-port'] } : {}),
    ...(typeof values['store-dir'] === 'string' ? { storeDir: values['store-dir'] } : {}),
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
    `wrote ${files.configFile}`,
    ...Object.entries(files.creds).map(
      ([role, file]) => `${files.issued.includes(role as never) ? 'issued' : 'kept  '} ${file}`,
    ),
    ...(files.revokedBefore === null
      ? []
      : [
          `credentials issued before ${new Date(files.revokedBefore * 1000).toISOString()} are revoked once the server reloads its config (nats-server --signal reload)`,
        ]),
    `start the server: nats-server -c ${files.configFile}`,
    'give each process its role: --creds <dir>/<role>.creds (or NATS_CREDS)',
  ];
  io.stdout.write(`${lines.join('\n')}\n`);
  return ExitCode.passed;
}
