import { type ParseArgsConfig, parseArgs } from 'node:util';
import { ConfigurationError } from '../errors.js';
import { type ConfigKey, type FlagSpec, flagsFor } from './flag-table.js';

/**
 * Command lines: `parseArgs` over the flag table, then each flag's text converted to its option's
 * value. A bad value is a `ConfigurationError` that names the flag (exit code 2).
 */

/** `parseArgs` options for a set of flags, plus `-h/--help`. */
function parseArgsOptions(flags: readonly FlagSpec[]): NonNullable<ParseArgsConfig['options']> {
  const options: NonNullable<ParseArgsConfig['options']> = { help: { type: 'boolean', short: 'h' } };
  for (const f of flags) {
    options[f.name] = { type: f.kind === 'switch' ? 'boolean' : 'string', multiple: f.kind === 'threshold' };
  }
  return options;
}

const DECIMAL = /^[+-]?(\d+(\.\d*)?|\.\d+)(e[+-]?\d+)?$/i;
const DURATION = /^(\d+(?:\.\d+)?)\s*(ms|s|m|h)?$/i;
const UNIT_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

function bad(flag: string, expected: string, raw: string): ConfigurationError {
  return new ConfigurationError(`--${flag} expects ${expected}, got "${raw}"`);
}

function toNumber(flag: string, raw: string, integer: boolean): number {
  const text = raw.trim();
  // Number() alone would read "" as 0 and "0x10" as 16; a flag value is a plain decimal.
  if (!DECIMAL.test(text)) throw bad(flag, integer ? 'an integer' : 'a number', raw);
  const value = Number(text);
  if (integer && !Number.isInteger(value)) throw bad(flag, 'an integer', raw);
  return value;
}

function toDuration(flag: string, raw: string): number {
  const match = DURATION.exec(raw.trim());
  if (!match) throw bad(flag, 'a duration in ms (or with a unit: 500ms, 30s, 5m, 1h)', raw);
  return Math.round(Number(match[1]) * UNIT_MS[(match[2] ?? 'ms').toLowerCase()]!);
}

function toThresholds(raws: readonly string[]): Record<string, number> {
  const thresholds: Record<string, number> = {};
  for (const raw of raws) {
    const at = raw.lastIndexOf('=');
    const name = at > 0 ? raw.slice(0, at).trim().toLowerCase() : '';
    if (name === '') throw bad('threshold', '<criterion>=<score>, e.g. accuracy=8', raw);
    const value = toNumber('threshold', raw.slice(at + 1), false);
    if (value < 1 || value > 10)
      throw new ConfigurationError(`--threshold ${raw}: a threshold must be between 1 and 10`);
    thresholds[name] = value;
  }
  return thresholds;
}

/** One flag's text as its option value. Throws `ConfigurationError` naming the flag. */
function convert(spec: FlagSpec, raw: string | boolean | string[]): unknown {
  if (spec.kind === 'switch') return raw === true;
  if (spec.kind === 'threshold') return toThresholds(Array.isArray(raw) ? raw : [String(raw)]);
  const text = String(raw);
  switch (spec.kind) {
    case 'integer':
      return toNumber(spec.name, text, true);
    case 'number':
      return toNumber(spec.name, text, false);
    case 'duration':
      return toDuration(spec.name, text);
    case 'choice':
      if (!spec.choices?.includes(text)) throw bad(spec.name, `one of ${spec.choices?.join(', ')}`, text);
      return text;
    default:
      return text;
  }
}

/** What the flags of one command line say. */
export interface ParsedFlags {
  /** Option values set by flags, already converted. */
  options: Partial<Record<ConfigKey, unknown>>;
  json: boolean;
  configPath: string | null;
  /** `--nats <url>`: run through a distributed deployment. */
  nats: string | null;
}

/** Converts `parseArgs` values into option values; throws `ConfigurationError` on a bad value. */
export function readFlags(
  values: Record<string, string | boolean | (string | boolean)[] | undefined>,
  flags: readonly FlagSpec[],
): ParsedFlags {
  const options: Partial<Record<ConfigKey, unknown>> = {};
  for (const spec of flags) {
    const raw = values[spec.name];
    if (raw === undefined || !spec.option) continue;
    options[spec.option] = convert(spec, raw as string | boolean | string[]);
  }
  const config = values.config;
  return {
    options,
    json: values.json === true,
    configPath: typeof config === 'string' ? config : null,
    nats: typeof values.nats === 'string' ? values.nats : null,
  };
}

/** A parsed command line. */
export interface CommandLine {
  help: boolean;
  positionals: string[];
  flags: ParsedFlags;
}

/**
 * Parses the arguments after the command name. Unknown flags and missing values throw `parseArgs`'s
 * `ERR_PARSE_ARGS_*` errors, bad values `ConfigurationError`; with `--help` the values are not read.
 */
export function parseCommandLine(
  command: 'run' | 'batch' | 'config' | 'demo',
  argv: readonly string[],
): CommandLine {
  const flags = flagsFor(command);
  const { values, positionals } = parseArgs({
    args: [...argv],
    options: parseArgsOptions(flags),
    allowPositionals: true,
    strict: true,
  });
  if (values.help === true)
    return { help: true, positionals, flags: { options: {}, json: false, configPath: null, nats: null } };
  return { help: false, positionals, flags: readFlags(values, flags) };
}
