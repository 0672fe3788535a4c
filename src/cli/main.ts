import { readFileSync } from 'node:fs';
import { PgeError } from '../errors.js';
import type { CommandLine } from './command-line.js';
import { ExitCode, errorMessage, exitCodeOfError } from './exit-codes.js';
import type { Command } from './flag-table.js';
import { parseCommandLine, unknownCommand } from './flags.js';
import { COMMAND_HELP, helpHint } from './help.js';
import { type CliIo, processIo } from './io.js';
import { commandHelp, type DeclaredCommand, declaredWhole, runDeclared, topHelp } from './program.js';

/**
 * The `pge` command line: `run`, `demo`, `plan`, `resume`, `batch`, `config`, `graph`, `replay`, `fork`, `continue`, `runs`, `approvals`, `approve`, `cancel`, `worker`,
 * `dashboard`, `follow`, `help`.
 * `bin/pge.js` calls `main` and exits with the code it returns; `main` closes everything it opened,
 * so nothing else is needed. Every command's line is parsed by commander against the options the
 * command declares (`program.ts`) before anything heavy is loaded: a command declared whole runs
 * by its action (`runDeclared`), which loads what it needs; the others' modules load once parsed.
 */

type RunsCommandLine = (line: CommandLine, io: CliIo) => Promise<number>;

// The commands of the flag table, loaded on demand: help, version and usage errors answer without
// loading the harness and its SDKs. The commands declared whole, with their action, run by
// `runDeclared`.
const COMMANDS: Record<Exclude<Command, DeclaredCommand>, () => Promise<RunsCommandLine>> = {
  run: async () => (await import('./run-command.js')).runCommand,
  demo: async () => (await import('./run-command.js')).demoCommand,
  resume: async () => (await import('./resume-command.js')).resumeCommand,
  fork: async () => (await import('./fork-command.js')).forkCommand,
  continue: async () => (await import('./continue-command.js')).continueCommand,
};

const isCommand = (name: string | undefined): name is Command =>
  name !== undefined && Object.hasOwn(COMMAND_HELP, name);

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
  let line: CommandLine | undefined;
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
        : unknownCommand(first);
      return usageError(
        io,
        `${what}\n(the commands are ${Object.keys(COMMAND_HELP).join(', ')}, help)`,
        null,
      );
    }
    if (declaredWhole(command)) return await runDeclared(command, rest, io);
    line = parseCommandLine(command, rest);
    if (line.help) {
      io.stdout.write(`${commandHelp(command)}\n`);
      return ExitCode.passed;
    }
    return await (await COMMANDS[command]())(line, io);
  } catch (error) {
    // A server that cannot be used is no usage error, whatever its exit code: say what to do instead.
    const advised =
      command !== null && line !== undefined
        ? await (await import('./client-mistakes.js')).reportNatsFailure(
            error,
            command,
            line.flags.values,
            io,
          )
        : null;
    if (advised !== null) return advised;
    const code = exitCodeOfError(error);
    if (code === ExitCode.usage) return usageError(io, errorMessage(error), command);
    // Not one of pge's named errors: a defect; its stack is what a bug report needs.
    const detail = error instanceof PgeError ? errorMessage(error) : String((error as Error)?.stack ?? error);
    io.stderr.write(`pge: ${detail}\n`);
    return code;
  }
}
