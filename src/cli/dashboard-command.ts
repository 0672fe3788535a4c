import { userInfo } from 'node:os';
import { resolve } from 'node:path';
import type { RunControl } from '../dashboard/run-control.js';
import type { RunStore } from '../dashboard/run-store.js';
import { ConfigurationError } from '../errors.js';
import { isLoopback } from '../loopback.js';
import { resolveConfig } from './config.js';
import { ExitCode } from './exit-codes.js';
import type { CommandLine } from './flags.js';
import type { CliIo } from './io.js';

/**
 * `pge dashboard [<file>…] [--log <file>]… [--nats <url>] [--port <n>] [--host <addr>] [--control]`: a local
 * web page that shows runs as they go: their statecharts with the active state, the plan, each
 * attempt's scores, the decisions, usage by phase and the timeline. It works with no network:
 * everything the page loads comes from this process. Read-only unless `--control` is given: then
 * the page approves, rejects, cancels, starts and forks runs, with a token printed once, in the
 * URL. It runs until SIGINT or SIGTERM.
 */

interface DashboardCommand {
  logs: string[];
  /** Without a log, NATS or --control: the directory whose every log is followed (its runs). */
  dir: string | null;
  nats: string | null;
  host: string;
  port: number;
  /** `--control`: who acts (`--operator`, else the OS user); null: read-only. */
  operator: string | null;
  demo: boolean;
}

/** The user's name, for the runs' logs; a container's user may have none. */
function whoAmI(io: CliIo): string {
  try {
    return userInfo().username;
  } catch {
    return io.env.USER?.trim() || 'unknown';
  }
}

/** The sources and address of a dashboard command line; the flag table supplies the defaults. */
function dashboardOf(line: CommandLine, io: CliIo): DashboardCommand {
  const values = line.flags.values;
  const control = values.control === true;
  // A log given bare (`pge dashboard run.md`) is followed as one given with --log.
  const logs = [...line.positionals, ...((values.log as string[] | undefined) ?? [])];
  const nats = line.flags.nats ?? (logs.length === 0 && !control ? io.env.NATS_URL?.trim() : undefined);
  // No source named: the embedded runs of the working directory, every log there and to come.
  const workingDir = typeof values['working-dir'] === 'string' ? values['working-dir'] : '.';
  const dir = logs.length === 0 && !nats && !control ? resolve(io.cwd, workingDir) : null;
  const port = values.port as number;
  if (port > 65_535)
    throw new ConfigurationError(`--port expects a port number (0 for any free port), got "${port}"`);
  for (const flag of ['operator', 'demo', 'model', 'base-url'])
    if (values[flag] !== undefined && !control) throw new ConfigurationError(`--${flag} needs --control`);
  if (values['working-dir'] !== undefined && !control && dir === null)
    throw new ConfigurationError(
      '--working-dir needs --control, or no --log or --nats (its logs are then followed)',
    );
  const demo = values.demo === true;
  if (nats && (demo || values.model !== undefined || values['base-url'] !== undefined))
    throw new ConfigurationError(
      'with --nats the role workers of the deployment hold the models: --demo, --model and --base-url do not apply',
    );
  const operator = typeof values.operator === 'string' ? values.operator.trim() : whoAmI(io);
  if (control && (operator === '' || operator.length > 200))
    throw new ConfigurationError('--operator needs a name of 1 to 200 characters');
  return {
    logs,
    dir,
    nats: nats || null,
    host: values.host as string,
    port,
    operator: control ? operator : null,
    demo,
  };
}

/**
 * How the page acts on runs: through the deployment's coordinators with the dashboard's credential
 * (a client's), or through a host of this process's own, with the demo model or the model the
 * flags, the environment and the config file name (as `pge run` does). One control either way: the
 * command chooses the bus.
 */
async function controlOf(
  command: DashboardCommand,
  line: CommandLine,
  io: CliIo,
  store: RunStore,
): Promise<RunControl> {
  const { embeddedHostControl, hostControl } = await import('../dashboard/host-control.js');
  if (command.nats) {
    const [{ NatsBus }, { natsOptionsOf }, { runClient }] = await Promise.all([
      import('../bus/nats-bus.js'),
      import('./nats-options.js'),
      import('../runtime/run-client.js'),
    ]);
    const bus = await NatsBus.connect({
      ...natsOptionsOf(line.flags, io.env),
      servers: command.nats,
      name: 'pge-dashboard-control',
    });
    return hostControl(
      runClient(bus, () => bus.close()),
      'nats',
    );
  }
  const config = resolveConfig({ flags: line.flags, env: io.env, cwd: io.cwd, flagsOnly: command.demo });
  if (!command.demo) return embeddedHostControl(store, config.options);
  const { DemoModel, titledDeliverable } = await import('../roles/demo-model.js');
  const model = new DemoModel();
  return embeddedHostControl(store, {
    ...config.options,
    plannerAgent: model,
    generatorAgent: model,
    evaluatorAgent: model,
    validators: [titledDeliverable],
  });
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
  const [{ RunStore }, { followLog, followLogDir }, { startDashboard }] = await Promise.all([
    import('../dashboard/run-store.js'),
    import('../dashboard/log-follower.js'),
    import('../dashboard/server.js'),
  ]);
  const store = new RunStore();
  const closers: (() => Promise<void>)[] = [];
  try {
    if (command.dir !== null) {
      const follower = followLogDir(command.dir, store);
      closers.push(() => follower.close());
    }
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
    let control: { control: RunControl; token: string; operator: string } | undefined;
    if (command.operator !== null) {
      const [{ newToken }, runControl] = await Promise.all([
        import('../dashboard/control-http.js'),
        controlOf(command, line, io, store),
      ]);
      closers.push(() => runControl.close());
      control = { control: runControl, token: newToken(), operator: command.operator };
    }
    let dashboard: Awaited<ReturnType<typeof startDashboard>>;
    try {
      dashboard = await startDashboard({
        store,
        host: command.host,
        port: command.port,
        ...(control ? { control } : {}),
      });
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
        `pge dashboard: listening on ${command.host}: anyone who can reach it sees the runs (tasks and model output), without a password${control ? '; acting on them takes the token' : ''}\n`,
      );
    if (control)
      // Printed once: whoever has this URL can act on the runs as the operator, until Ctrl-C.
      io.stderr.write(
        `pge dashboard: ${dashboard.url}?token=${control.token} (control: acting as ${control.operator}; keep this URL to yourself; Ctrl-C to stop)\n`,
      );
    else io.stderr.write(`pge dashboard: ${dashboard.url} (read-only; Ctrl-C to stop)\n`);
    const signal = await untilSignal();
    io.stderr.write(`pge dashboard: ${signal}: stopping\n`);
    return ExitCode.passed;
  } finally {
    for (const close of closers.reverse()) await close();
  }
}
