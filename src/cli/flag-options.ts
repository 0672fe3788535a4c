import { type CommandUnknownOpts, Option } from '@commander-js/extra-typings';
import { ConfigurationError } from '../errors.js';
import { type ConfigKey, FLAG_GROUPS, FLAGS, type FlagSpec } from './flag-table.js';
import { DECIMAL, flagValue } from './flag-values.js';

/**
 * The flag table's rows as commander options, for every command that takes them (those of the
 * options of a run are shared by several commands, so they stay one table), and what commander
 * cannot do alone for any command, declared whole or not: help asked anywhere on the line, and a
 * flag that would take the next flag as its value.
 */

/** An option declared from a row of the flag table, which it keeps for the help. */
export class FlagOption extends Option<string, undefined, unknown, unknown, false, unknown> {
  readonly spec: FlagSpec;
  constructor(spec: FlagSpec) {
    const placeholder = spec.value ?? `<${spec.choices?.join('|') ?? 'value'}>`;
    super(`--${spec.name}${spec.kind === 'switch' ? '' : ` ${placeholder}`}`, spec.help);
    this.spec = spec;
    this.helpGroup(`${FLAG_GROUPS[spec.group]}:`);
    if (spec.kind === 'switch') return;
    if (spec.choices) this.choices(spec.choices);
    // After `choices`, whose own parser would word a wrong choice in commander's terms (and cannot
    // take the comma-separated list of a `choices` flag).
    this.argParser((raw: string, before: unknown) => flagValue(spec, raw, before));
  }
}

const groupIndex = (f: FlagSpec) => Object.keys(FLAG_GROUPS).indexOf(f.group);

/** Adds the rows `flags` of the flag table to `command` as its options, in the help's order. */
export function addTableFlags(command: CommandUnknownOpts, flags: readonly FlagSpec[]): void {
  for (const flag of [...flags].sort((a, b) => groupIndex(a) - groupIndex(b)))
    command.addOption(new FlagOption(flag));
}

/**
 * The flags of a run's options that a command run on this machine takes (`config`, `batch`): all
 * but NATS's, and but `--json` and `--config`, which such a command declares typed.
 */
export const LOCAL_RUN_FLAGS: readonly FlagSpec[] = FLAGS.filter(
  (f) => f.group !== 'nats' && f.name !== 'json' && f.name !== 'config',
);

/**
 * The options of a run that the table's flags given on `parsed`'s line set (`--rubric`'s the file
 * it names, which `resolveConfig` reads); MCP servers named for one role and for both make one
 * record.
 */
export function optionsGiven(parsed: CommandUnknownOpts): Partial<Record<ConfigKey, unknown>> {
  const options: Partial<Record<ConfigKey, unknown>> = {};
  for (const option of parsed.options) {
    const key = option.attributeName();
    if (!(option instanceof FlagOption) || !option.spec.option || parsed.getOptionValueSource(key) !== 'cli')
      continue;
    const value = parsed.getOptionValue(key);
    options[option.spec.option] =
      option.spec.kind === 'mcp' ? Object.assign({}, options[option.spec.option], value) : value;
  }
  return options;
}

/**
 * What is checked before commander reads a line: `-h`/`--help` anywhere means help, whatever else
 * the line holds (commander would check the values before it); and a flag that takes a value must
 * not take the next flag as its value (commander would), so `--model --json` says that `--model`
 * needs one. Returns whether help was asked; throws `ConfigurationError` on such a flag.
 */
export function helpAsked(options: readonly Option[], argv: readonly string[]): boolean {
  let problem: ConfigurationError | undefined;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === '--') break;
    if (arg === '-h' || arg === '--help') return true;
    const [name, inline] = arg.startsWith('--') ? [arg.split('=', 1)[0]!, arg.includes('=')] : [];
    const option = options.find((o) => o.long === name);
    if (!option) continue;
    if (!option.required && !option.optional) {
      if (inline) problem ??= new ConfigurationError(`${option.long} takes no value`);
      continue;
    }
    if (inline) continue;
    const value = argv[++i];
    if (value === undefined || (value.startsWith('-') && !DECIMAL.test(value))) {
      const dash =
        value === undefined ? '' : `; a value that starts with "-" goes after "=": ${option.long}=${value}`;
      problem ??= new ConfigurationError(`${option.long} needs a value: ${option.flags}${dash}`);
    }
  }
  if (problem) throw problem;
  return false;
}

/** `--config <file>` of the commands that read a config file, as `resolveConfig` takes it. */
export const configFileOption = () =>
  new Option('--config <file>', 'Config file to read instead of ./pge.config.json').helpGroup(
    `${FLAG_GROUPS.cli}:`,
  );
