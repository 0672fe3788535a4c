import { readFileSync } from 'node:fs';
import { PgeError } from '../errors.js';
import { ExitCode, errorMessage, exitCodeOfError, isParseArgsError } from './exit-codes.js';
import { type CommandLine, parseCommandLine } from './flags.js';
import { type Command, commandHelp, helpHint, topHelp } from './help.js';
import { type CliIo, processIo } from './io.js';

/**
 * The `pge` command line: `run`, `demo`, `batch`, `config`, `graph`, `help`. `bin/pge.js` calls
 * `main` and exits with the code it returns; `main` closes everything it opened, so nothing else is
 * needed.
 */

type RunsCommandLine = (line: CommandLine, io: CliIo, extras?: { inspect: boolean }) => Promise<number>;
/** `graph` reads its own flags: they choose a chart and set no option of a run. */
type ReadsOwnFlags = (argv: string[], io: CliIo) => Promise<number>;

// Loaded on demand: help, version and usage errors answer without loading the harness and its SDKs.
const COMMANDS: Record<Exclude<Command, 'graph' | 'worker' | 'dashboard'>, () => Promise<RunsCommandLine>> & {
  graph: () => Promise<ReadsOwnFlags>;
  worker: () => Promise<ReadsOwnFlags>;
  dashboard: () => Promise<ReadsOwnFlags>;
} = {
  run: async () => (await import('./run-command.js')).runCommand,
  demo: async () => (await import('./run-command.js')).demoCommand,
  batch: async () => (await import('./batch-command.js')).batchCommand,
  config: async () => (await import('./config-command.js')).configCommand,
  graph: async () => (await import('./graph-command.js')).graphCommand,
  worker: async () => (await import('./worker-command.js')).workerCommand,
  dashboard: async () => (await import('./dashboard-command.js')).dashboardCommand,
};

/**
 * Takes `--inspect` (see `INSPECT_FLAG`) off a `run` or `demo` command line: it sets no option of
 * the run, so the flag table does not parse it. Arguments after `--` are the task's, left alone.
 */
function takeInspect(argv: string[]): { argv: string[]; inspect: boolean } {
  const end = argv.includes('--') ? argv.indexOf('--') : argv.length;
  const kept = argv.filter((arg, i) => i >= end || arg !== '--inspect');
  return { argv: kept, inspect: kept.length < argv.length };
}

const isCommand = (name: string | undefined): name is Command =>
  name !== undefined && Object.hasOwn(COMMANDS, name);

/** The version in package.json (two levels up from both `src/cli` and `dist/cli`). */
export function version(): string {
  const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
    version: string;
  };
  return pkg.version;
}

function usageError(io: CliIo, message: string, command: Command | null): number {
  io.stderr.write(`pge: ${message}\n${helpHint(command)}\n`);
  return ExitCode.usage;
}

/**
 * Runs `pge` with the arguments after the program name and returns the exit code: 0 all steps
 * passed, 1 a step failed (or a budget or an abort stopped the run), 2 usage or configuration
 * error, 3 model, transport or log error, 130 interrupted. Never throws.
 */
export async function main(argv: string[], io: CliIo = processIo()): Promise<number> {
  const [first, ...rest] = argv;
  const command = isCommand(first) ? first : null;
  try {
    if (first === undefined) {
      io.stderr.write(`${topHelp()}\n`);
      return ExitCode.usage;
    }
    if (first === '--help' || first === '-h') {
      io.stdout.write(`${topHelp()}\n`);
      return ExitCode.passed;
    }
    if (first === '--version') {
      io.stdout.write(`${version()}\n`);
      return ExitCode.passed;
    }
    if (first === 'help') {
      const [topic, ...extra] = rest;
      if (extra.length > 0 || (topic !== undefined && !isCommand(topic)))
        return usageError(io, `no help for "${rest.join(' ')}"`, null);
      io.stdout.write(`${topic === undefined ? topHelp() : commandHelp(topic as Command)}\n`);
      return ExitCode.passed;
    }
    if (command === null) {
      const what = first.startsWith('-')
        ? `unknown flag ${first} (flags go after the command)`
        : `unknown command "${first}"`;
      return usageError(
        io,
        `${what}; the commands are run, demo, batch, config, graph, worker, dashboard`,
        null,
      );
    }
    if (command === 'graph') return await (await COMMANDS.graph())(rest, io);
    if (command === 'dashboard') return await (await COMMANDS.dashboard())(rest, io);
    if (command === 'worker') {
      if (rest.includes('--help') || rest.includes('-h')) {
        io.stdout.write(`${commandHelp('worker')}\n`);
        return ExitCode.passed;
      }
      return await (await COMMANDS.worker())(rest, io);
    }
    const { argv, inspect } =
      command === 'run' || command === 'demo' ? takeInspect(rest) : { argv: rest, inspect: false };
    const line = parseCommandLine(command, argv);
    if (line.help) {
      io.stdout.write(`${commandHelp(command)}\n`);
      return ExitCode.passed;
    }
    const run = await COMMANDS[command]();
    return await run(line, io, { inspect });
  } catch (error) {
    const code = exitCodeOfError(error);
    if (code === ExitCode.usage) return usageError(io, errorMessage(error), command);
    // Not one of pge's named errors: a defect; its stack is what a bug report needs.
    const detail =
      error instanceof PgeError || isParseArgsError(error)
        ? errorMessage(error)
        : String((error as Error)?.stack ?? error);
    io.stderr.write(`pge: ${detail}\n`);
    return code;
  }
}
