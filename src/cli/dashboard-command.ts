import { ConfigurationError } from '../errors.js';
import { isLoopback } from '../loopback.js';
import { ExitCode } from './exit-codes.js';
import type { CommandLine } from './flags.js';
import type { CliIo } from './io.js';

/**
 * `pge dashboard [--log <file>]… [--nats <url>] [--port <n>] [--host <addr>]`: a read-only local
 * web page that shows runs as they go: their statecharts with the active state, the plan, each
 * attempt's scores, the decisions, usage by phase and the timeline. It works with no network:
 * everything the page loads comes from this process. It runs until SIGINT or SIGTERM.
 */

interface DashboardCommand {
  logs: string[];
  nats: string | null;
  host: string;
  port: number;
}

/** The sources and address of a dashboard command line; the flag table supplies the defaults. */
function dashboardOf(line: CommandLine, io: CliIo): DashboardCommand {
  const values = line.flags.values;
  const logs = (values.log as string[] | undefined) ?? [];
  const nats = line.flags.nats ?? (logs.length === 0 ? io.env.NATS_URL?.trim() : undefined);
  if (logs.length === 0 && !nats)
    throw new ConfigurationError('pge dashboard needs --log <file> or --nats <url> (or NATS_URL)');
  const port = values.port as number;
  if (port > 65_535)
    throw new ConfigurationError(`--port expects a port number (0 for any free port), got "${port}"`);
  return { logs, nats: nats || null, host: values.host as string, port };
}

/** Resolves on the first SIGINT or SIGTERM. */
function untilSignal(): Promise<NodeJS.Signals> {
  return new Promise((resolve) => {
    const stop = (signal: NodeJS.Signals) => {
      process.off('SIGINT', stop);
      process.off('SIGTERM', stop);
      resolve(signal);
    };
    process.on('SIGINT', stop);
    process.on('SIGTERM', stop);
  });
}

/**
 * `pge dashboard`: serves until a signal, then closes its sources and returns 0. Bad flags throw
 * (exit 2), as do a port that is taken and a NATS server that cannot be reached.
 */
export async function dashboardCommand(line: CommandLine, io: CliIo): Promise<number> {
  const command = dashboardOf(line, io);
  const [{ RunStore }, { followLog }, { startDashboard }] = await Promise.all([
    import('../dashboard/run-store.js'),
    import('../dashboard/log-follower.js'),
    import('../dashboard/server.js'),
  ]);
  const store = new RunStore();
  const closers: (() => Promise<void>)[] = [];
  try {
    for (const log of command.logs) {
      const follower = followLog(log, store);
      closers.push(() => follower.close());
    }
    if (command.nats) {
      const [{ followNats }, { natsOptionsOf }] = await Promise.all([
        import('../dashboard/nats-source.js'),
        import('./nats-options.js'),
      ]);
      const source = await followNats({ ...natsOptionsOf(line.flags, io.env), servers: command.nats }, store);
      closers.push(() => source.close());
    }
    let dashboard: Awaited<ReturnType<typeof startDashboard>>;
    try {
      dashboard = await startDashboard({ store, host: command.host, port: command.port });
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if (code === 'EADDRINUSE' || code === 'EACCES' || code === 'EADDRNOTAVAIL')
        throw new ConfigurationError(
          `cannot listen on ${command.host}:${command.port} (${code}); choose another --port (0 picks a free one)`,
        );
      throw error;
    }
    closers.push(() => dashboard.close());
    if (!isLoopback(command.host))
      io.stderr.write(
        `pge dashboard: listening on ${command.host}: anyone who can reach it sees the runs (tasks and model output), without a password\n`,
      );
    io.stderr.write(`pge dashboard: ${dashboard.url} (read-only; Ctrl-C to stop)\n`);
    const signal = await untilSignal();
    io.stderr.write(`pge dashboard: ${signal}: stopping\n`);
    return ExitCode.passed;
  } finally {
    for (const close of closers.reverse()) await close();
  }
}
