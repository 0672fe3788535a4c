import { CommanderError, type CommandUnknownOpts } from '@commander-js/extra-typings';
import { ConfigurationError } from '../errors.js';
import type { CommandLine, ParsedFlags } from './command-line.js';
import { helpAsked, optionsGiven } from './flag-options.js';
import type { Command } from './flag-table.js';
import { commandOf, program } from './program.js';

/**
 * Command lines of the commands of the flag table (`run`, `demo`, `resume`, `continue`, `fork`; the
 * others are declared whole and run by `runDeclared`): commander parses them against the options
 * `program.ts` declares from the table, and every problem becomes a `ConfigurationError` (exit
 * code 2) that says what to write instead.
 */

/**
 * Commander tells its suggestion only in its message: "(Did you mean --max-retries?)". Read there,
 * so that pge's sentence can carry it.
 */
function suggestionIn(error: CommanderError): string | undefined {
  return /\(Did you mean (.+)\?\)/.exec(error.message)?.[1];
}

/** A flag the command does not take, in pge's words, with commander's guess at the one meant. */
function unknownFlag(command: Command, error: CommanderError): ConfigurationError {
  const rawName = /unknown option '([^']+)'/.exec(error.message)?.[1] ?? '';
  // A flag another command takes is named as one this command does not.
  const elsewhere = program().commands.some((other) => other.options.some((o) => o.long === rawName));
  const what = elsewhere ? `pge ${command} does not take ${rawName}` : `unknown flag ${rawName}`;
  const guess = suggestionIn(error);
  return new ConfigurationError(guess ? `${what}; did you mean ${guess}?` : what);
}

/** What the parsed command says: each flag's value by name, and the options the flags given set. */
function lineOf(parsed: CommandUnknownOpts): CommandLine {
  const values: Record<string, unknown> = {};
  for (const option of parsed.options) {
    const key = option.attributeName();
    // A switch not given has no value: commander's `true` for an unused `--no-…` is not one.
    if (parsed.getOptionValueSource(key) === 'cli') values[option.name()] = parsed.getOptionValue(key);
  }
  const text = (name: string) => (typeof values[name] === 'string' ? (values[name] as string) : null);
  // The servers of a cluster, given one flag each or comma-separated, as nats.js and NATS_URL take them.
  const nats = Array.isArray(values.nats) ? values.nats.join(',') : null;
  return {
    help: false,
    positionals: [...parsed.args],
    flags: {
      options: optionsGiven(parsed),
      values,
      json: values.json === true,
      configPath: text('config'),
      nats,
    },
  };
}

/**
 * Parses the arguments after the command name, for a command of the flag table (one declared whole
 * is run by `runDeclared`, which has commander parse its line). With `-h`/`--help` anywhere,
 * nothing else is read. Throws `ConfigurationError` on an unknown flag, a missing or superfluous value, or a value
 * its flag cannot take; option values are checked against their option later (`config.ts`).
 */
export function parseCommandLine(command: Command, argv: readonly string[]): CommandLine {
  const parsed = commandOf(command);
  if (helpAsked(parsed.options, argv)) {
    const none: ParsedFlags = { options: {}, values: {}, json: false, configPath: null, nats: null };
    return { help: true, positionals: [], flags: none };
  }
  try {
    parsed.parse([...argv], { from: 'user' });
  } catch (error) {
    if (!(error instanceof CommanderError)) throw error;
    if (error.code === 'commander.unknownOption') throw unknownFlag(command, error);
    throw new ConfigurationError(error.message.replace(/^error: /, ''), { cause: error });
  }
  return lineOf(parsed);
}

/** What commander says of a command `pge` does not have, with its guess at the one meant. */
export function unknownCommand(name: string): string {
  try {
    program().parse([name], { from: 'user' });
  } catch (error) {
    if (error instanceof CommanderError) return error.message.replace(/^error: /, '');
    throw error;
  }
  return `unknown command '${name}'`;
}
