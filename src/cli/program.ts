import {
  Command as CommanderCommand,
  CommanderError,
  type CommandUnknownOpts,
  Help,
  Option,
} from '@commander-js/extra-typings';
import { ConfigurationError } from '../errors.js';
import { OPTION_DEFAULTS } from '../schemas/setting-values.js';
import { approvalsCommand } from './approvals-command.js';
import { approveCommand } from './approve-command.js';
import { batchCommand } from './batch-command.js';
import { cancelCommand } from './cancel-command.js';
import { flagsFor } from './command-flags.js';
import { configCommand } from './config-command.js';
import { dashboardCommand } from './dashboard-command.js';
import { CLI_DEFAULTS, ENV_VARS } from './defaults.js';
import { ExitCode } from './exit-codes.js';
import { addTableFlags, FlagOption, helpAsked } from './flag-options.js';
import { type Command, FLAG_GROUPS, type FlagSpec } from './flag-table.js';
import { followCommand } from './follow-command.js';
import { graphCommand } from './graph-command.js';
import { AFTER_COMMANDS, afterFlags, COMMAND_HELP, INTRO } from './help.js';
import { type CliIo, processIo } from './io.js';
import { natsConfigCommand } from './nats-config-command.js';
import { planCommand } from './plan-command.js';
import { replayCommand } from './replay-command.js';
import { runsCommand } from './runs-command.js';
import { formatDuration, formatSize } from './units.js';
import { workerCommand } from './worker-command.js';

/**
 * The commands of `pge` as commander declares them. A command declared whole in its own file
 * (`DECLARED`: its typed options and its action) is given here what every command has: its usage,
 * prose, help layout and exit codes; the others' options come from the flag table, with their
 * argument parsers, defaults and help sections. Commander parses the command line and writes the
 * help. Nothing here prints or exits but `runDeclared`'s help: `exitOverride` turns commander's
 * exits into errors, which `flags.ts` words as pge words them.
 */

/** The default a flag's help names: the CLI's and the library's when they differ. */
function defaultOf(f: FlagSpec): string {
  const library = f.option ? (OPTION_DEFAULTS as Record<string, unknown>)[f.option] : undefined;
  const cli = f.option ? CLI_DEFAULTS[f.option] : undefined;
  if (cli !== undefined && cli !== library) return ` (default ${cli}; the library's: ${library})`;
  if (typeof library === 'number' && f.kind === 'duration') return ` (default ${formatDuration(library)})`;
  if (typeof library === 'number' && f.kind === 'size') return ` (default ${formatSize(library)})`;
  return library === undefined ? '' : ` (default ${library})`;
}

const envOf = (f: FlagSpec): string => {
  const variable = ENV_VARS.find(([, key]) => key === f.option)?.[0];
  return variable ? ` (env: ${variable})` : '';
};

/** A term wider than this gets a line of its own, so that the descriptions keep a wide column. */
const TERM_WIDTH = 30;

/** Commander's help, in pge's words: choices in the term, the default, variable and option after the text. */
const LAYOUT: Partial<Help> = {
  helpWidth: 100,
  optionTerm: (option) =>
    option.argChoices
      ? `${option.long} ${option.argChoices.join(option instanceof FlagOption && option.spec.kind === 'choices' ? ',' : '|')}`
      : option.flags,
  optionDescription: (option) => {
    if (!(option instanceof FlagOption))
      return option.defaultValue === undefined
        ? option.description
        : `${option.description} (default ${option.defaultValueDescription ?? option.defaultValue})`;
    const f = option.spec;
    return `${f.help}${defaultOf(f)}${envOf(f)}${f.option ? ` [${f.option}]` : ''}`;
  },
  padWidth: (cmd, helper) => Math.min(TERM_WIDTH, Help.prototype.padWidth.call(helper, cmd, helper)),
  formatItem: (term, termWidth, description, helper) =>
    term.length <= termWidth
      ? Help.prototype.formatItem.call(helper, term, termWidth, description, helper)
      : `  ${term}\n${Help.prototype.formatItem.call(helper, '', termWidth, description, helper)}`,
  // In the list of `pge --help`, each command as it is typed.
  subcommandTerm: (command) =>
    `pge ${command.name()} ${COMMAND_HELP[command.name() as Command]?.synopsis ?? command.usage()}`,
};

/**
 * Prose whose lines commander wraps to the width of the help: a line break inside a paragraph is a
 * space (the source's own breaks would otherwise stay, and cut a sentence short of the width), and
 * a blank line still parts two paragraphs.
 */
const paragraphs = (text: string): string =>
  text
    .split(/\n{2,}/)
    .map((paragraph) => paragraph.replace(/\s*\n\s*/g, ' '))
    .join('\n\n');

/**
 * The arguments of each command (the others take none): commander checks their count and says
 * what is missing or too much; each command checks what they hold.
 */
const ARGUMENTS: Partial<Record<Command, readonly string[]>> = {
  run: ['[task...]'],
  demo: ['[task...]'],
  resume: ['<log|runId>'],
  fork: ['<log|runId>'],
  continue: ['<log|runId>'],
};

/**
 * The commands declared whole in their own file, as commander takes a command: typed options and
 * an action. The others are declared here from the flag table, and `main` runs them.
 */
const DECLARED = {
  config: configCommand,
  plan: planCommand,
  batch: batchCommand,
  follow: followCommand,
  approvals: approvalsCommand,
  approve: approveCommand,
  cancel: cancelCommand,
  runs: runsCommand,
  worker: workerCommand,
  dashboard: dashboardCommand,
  graph: graphCommand,
  replay: replayCommand,
  'nats-config': natsConfigCommand,
} as const satisfies Partial<
  Record<Command, (io: CliIo, done: (code: number) => void) => CommandUnknownOpts>
>;

/** A command declared whole in its own file. */
export type DeclaredCommand = keyof typeof DECLARED;

/** Whether `name` is declared whole in its own file, and runs by its action (`runDeclared`). */
export const declaredWhole = (name: Command): name is DeclaredCommand => Object.hasOwn(DECLARED, name);

function declare(
  name: Command,
  io: CliIo = processIo(),
  done: (code: number) => void = () => {},
): CommandUnknownOpts {
  const { usage, about } = COMMAND_HELP[name];
  const declared: CommandUnknownOpts = declaredWhole(name)
    ? DECLARED[name](io, done)
    : new CommanderCommand(name);
  const command = declared
    .usage(usage)
    .summary(COMMAND_HELP[name].summary)
    .description(paragraphs(about))
    .exitOverride()
    .configureOutput({ writeOut: () => {}, writeErr: () => {}, outputError: () => {} })
    .configureHelp(LAYOUT)
    .addHelpText('after', `\n${afterFlags(name)}`);
  for (const argument of ARGUMENTS[name] ?? []) command.argument(argument);
  addTableFlags(command, flagsFor(name));
  command.addHelpOption(new Option('-h, --help', 'Show this help').helpGroup(`${FLAG_GROUPS.cli}:`));
  return command;
}

/** `pge` and its commands, declared; nothing is parsed yet. */
export function program(): CommandUnknownOpts {
  const pge = new CommanderCommand('pge')
    .usage('<command> [flags]')
    .exitOverride()
    .configureOutput({ writeOut: () => {}, writeErr: () => {}, outputError: () => {} })
    .configureHelp(LAYOUT)
    .addHelpText('before', `${INTRO}\n`)
    .addHelpText('after', `\n${AFTER_COMMANDS}`)
    // `main` answers `pge help` and `pge --version` itself; declared here for the help and suggestions.
    .helpCommand('help [<command>]', 'show the help of a command (or: pge <command> --help)')
    .addOption(new Option('--version', 'print the version').helpGroup('Flags:'))
    .addHelpOption(new Option('-h, --help', 'show help').helpGroup('Flags:'));
  for (const name of Object.keys(COMMAND_HELP) as Command[]) pge.addCommand(declare(name));
  return pge;
}

/** The help of `pge` itself. */
export function topHelp(): string {
  return helpOf(program());
}

/** One command of `pge`, declared, under a `pge` of its own (whose name its usage starts with). */
export function commandOf(name: Command, io?: CliIo, done?: (code: number) => void): CommandUnknownOpts {
  const command = declare(name, io, done);
  new CommanderCommand('pge').addCommand(command);
  return command;
}

/** The help of one command, as `pge <command> --help` prints it. */
export function commandHelp(name: Command): string {
  return helpOf(commandOf(name));
}

/** A command's help as commander writes it, with the texts added before and after. */
function helpOf(command: CommandUnknownOpts): string {
  let text = '';
  command
    .configureOutput({
      writeOut: (chunk) => {
        text += chunk;
      },
    })
    .outputHelp();
  return text.trimEnd();
}

/**
 * Runs a command declared whole (`declaredWhole`) on the arguments after its name: commander parses
 * them, prints the help it is asked for, and calls the command's action. Commander's errors are
 * usage errors (`ConfigurationError`, exit 2), in its own words.
 */
export async function runDeclared(name: Command, argv: readonly string[], io: CliIo): Promise<number> {
  let code: number = ExitCode.passed;
  const command = commandOf(name, io, (done) => {
    code = done;
  }).configureOutput({
    writeOut: (chunk) => io.stdout.write(chunk),
    writeErr: () => {},
    outputError: () => {},
  });
  try {
    if (helpAsked(command.options, argv)) {
      command.outputHelp();
      return ExitCode.passed;
    }
    await command.parseAsync([...argv], { from: 'user' });
    return code;
  } catch (error) {
    if (!(error instanceof CommanderError)) {
      // A server that cannot be used is no usage error, whatever its exit code: say what to do instead.
      const { reportNatsFailure } = await import('./client-mistakes.js');
      const advised = await reportNatsFailure(error, name, command.opts(), io);
      if (advised !== null) return advised;
      throw error;
    }
    if (error.code === 'commander.helpDisplayed') return ExitCode.passed;
    throw new ConfigurationError(error.message.replace(/^error: /, ''), { cause: error });
  }
}
