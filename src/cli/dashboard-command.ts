import { resolve } from 'node:path';
import { Command, Option } from '@commander-js/extra-typings';
import type { RunControl } from '../dashboard/run-control.js';
import type { RunStore } from '../dashboard/run-store.js';
import { ConfigurationError } from '../errors.js';
import { isLoopback } from '../loopback.js';
import { addTableFlags, optionsGiven } from './flag-options.js';
import { FLAG_GROUPS, FLAGS } from './flag-table.js';
import { integerArgument } from './flag-values.js';
import { type CliIo, whoAmI } from './io.js';
import { credsOption, natsServersOption, serversGiven } from './nats-flags.js';

/**
 * `pge dashboard [<file>…] [--log <file>]… [--nats <url>] [--port <n>] [--host <addr>] [--control]`: a local
 * web page that shows runs as they go: their statecharts with the active state, the plan, each
 * attempt's scores, the decisions, usage by phase and the timeline. It works with no network:
 * everything the page loads comes from this process. Read-only unless `--control` is given: then
 * the page approves, rejects, cancels, starts and forks runs, with a token printed once, in the
 * URL. It runs until SIGINT or SIGTERM. Declared here whole, as commander takes a command: its own
 * flags typed, those that set the options of the runs it starts from the flag table (`run` shares
 * them), and its action; `program.ts` adds the help's prose.
 */

/** The port of `pge dashboard`: stable, so that a bookmark keeps working. */
const DEFAULT_DASHBOARD_PORT = 4780;

/** The flags of `pge dashboard --control` that set the options of the runs it starts itself. */
const DASHBOARD_RUN_FLAGS = ['model', 'base-url', 'working-dir'];

const CLI = `${FLAG_GROUPS.cli}:`;

/** `pge dashboard`'s options, declared: its own typed, then the table's. */
function dashboardOptions() {
  const command = new Command('dashboard')
    .argument('[log...]')
    .addOption(
      new Option('--log <file>', 'Log file to follow as its run writes it; repeatable')
        .argParser((file: string, before: string[] | undefined) => [...(before ?? []), file])
        .helpGroup(CLI),
    )
    .addOption(
      natsServersOption(
        'Follow every run on this NATS server; repeatable for the servers of a cluster (default: NATS_URL)',
      ).helpGroup(CLI),
    )
    .addOption(credsOption().helpGroup(CLI))
    .addOption(
      new Option('--port <n>', 'Port to serve on; 0 picks a free one')
        .argParser(integerArgument('port'))
        .default(DEFAULT_DASHBOARD_PORT)
        .helpGroup(CLI),
    )
    .addOption(
      new Option('--host <addr>', 'Address to bind; the default is this machine only')
        .default('127.0.0.1')
        .helpGroup(CLI),
    )
    .addOption(
      new Option(
        '--control',
        'Let the page approve, reject, cancel, start and fork runs; prints a URL with a token made at each start',
      ).helpGroup(CLI),
    )
    .addOption(
      new Option(
        '--operator <name>',
        "With --control: who acts, as the runs' logs record it (default: the OS user)",
      ).helpGroup(CLI),
    )
    .addOption(
      new Option(
        '--demo',
        'With --control, no --nats: runs started from the page use the built-in demo model (not an AI)',
      ).helpGroup(CLI),
    );
  addTableFlags(
    command,
    FLAGS.filter((f) => DASHBOARD_RUN_FLAGS.includes(f.name)),
  );
  return command;
}

/** What the typed flags of `pge dashboard` say. */
type DashboardFlags = ReturnType<ReturnType<typeof dashboardOptions>['opts']>;

/** `pge dashboard`, declared: it serves until a signal. */
export function dashboardCommand(io: CliIo) {
  return dashboardOptions().action(async (logs, flags, parsed) => {
    const given = optionsGiven(parsed);
    await serve(dashboardOf(logs, flags, given, io), flags, given, io);
  });
}

/** The options of the runs the page starts that the table's flags given set. */
type RunOptionsGiven = ReturnType<typeof optionsGiven>;

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

/** The sources and address of a dashboard command line; commander supplies the defaults. */
function dashboardOf(
  bare: readonly string[],
  flags: DashboardFlags,
  given: RunOptionsGiven,
  io: CliIo,
): DashboardCommand {
  const control = flags.control === true;
  // A log given bare (`pge dashboard run.md`) is followed as one given with --log.
  const logs = [...bare, ...(flags.log ?? [])];
  const nats =
    serversGiven(flags.nats) ?? (logs.length === 0 && !control ? io.env.NATS_URL?.trim() : undefined);
  // No source named: the embedded runs of the working directory, every log there and to come.
  const workingDir = typeof given.workingDirectory === 'string' ? given.workingDirectory : '.';
  const dir = logs.length === 0 && !nats && !control ? resolve(io.cwd, workingDir) : null;
  const { port } = flags;
  if (port > 65_535)
    throw new ConfigurationError(`--port expects a port number (0 for any free port), got "${port}"`);
  const needsControl = {
    operator: flags.operator,
    demo: flags.demo,
    model: given.modelName,
    'base-url': given.baseURL,
  };
  for (const [flag, value] of Object.entries(needsControl))
    if (value !== undefined && !control) throw new ConfigurationError(`--${flag} needs --control`);
  if (given.workingDirectory !== undefined && !control && dir === null)
    throw new ConfigurationError(
      '--working-dir needs --control, or no --log or --nats (its logs are then followed)',
    );
  const demo = flags.demo === true;
  if (nats && (demo || given.modelName !== undefined || given.baseURL !== undefined))
    throw new ConfigurationError(
      'with --nats the role workers of the deployment hold the models: --demo, --model and --base-url do not apply',
    );
  const operator = flags.operator?.trim() ?? whoAmI(io);
  if (control && (operator === '' || operator.length > 200))
    throw new ConfigurationError('--operator needs a name of 1 to 200 characters');
  return {
    logs,
    dir,
    nats: nats || null,
    host: flags.host,
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
  flags: DashboardFlags,
  given: RunOptionsGiven,
  io: CliIo,
  store: RunStore,
): Promise<RunControl> {
  const { embeddedHostControl, hostControl } = await import('../dashboard/host-control.js');
  if (command.nats) {
    const [{ NatsBus }, { natsConnection }, { runClient }] = await Promise.all([
      import('../bus/nats-bus.js'),
      import('./nats-options.js'),
      import('../runtime/run-client.js'),
    ]);
    const bus = await NatsBus.connect({
      ...natsConnection(flags.creds, io.env),
      servers: command.nats,
      name: 'pge-dashboard-control',
    });
    return hostControl(
      runClient(bus, () => bus.close()),
      'nats',
    );
  }
  const { resolveConfig } = await import('./config.js');
  const config = resolveConfig({
    flags: { options: given, configPath: null },
    env: io.env,
    cwd: io.cwd,
    flagsOnly: command.demo,
  });
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
 * `pge dashboard`: serves until a signal, then closes its sources. Bad flags throw (exit 2), as
 * do a port that is taken and a NATS server that cannot be reached.
 */
async function serve(
  command: DashboardCommand,
  flags: DashboardFlags,
  given: RunOptionsGiven,
  io: CliIo,
): Promise<void> {
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
      const [{ followNats }, { natsConnection }] = await Promise.all([
        import('../dashboard/nats-source.js'),
        import('./nats-options.js'),
      ]);
      const source = await followNats(
        { ...natsConnection(flags.creds, io.env), servers: command.nats },
        store,
      );
      closers.push(() => source.close());
    }
    let control: { control: RunControl; token: string; operator: string } | undefined;
    if (command.operator !== null) {
      const [{ newToken }, runControl] = await Promise.all([
        import('../dashboard/control-http.js'),
        controlOf(command, flags, given, io, store),
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
  } finally {
    for (const close of closers.reverse()) await close();
  }
}
