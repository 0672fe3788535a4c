import { type ParseArgsConfig, parseArgs } from 'node:util';
import { parseMcpFlag } from '../actors/mcp.js';
import { ConfigurationError } from '../errors.js';
import { flagsFor } from './command-flags.js';
import { type Command, type ConfigKey, type FlagSpec, MCP_FLAG_ROLES } from './flag-table.js';

/**
 * Command lines, for every command: `parseArgs` splits the arguments into tokens, each flag is
 * checked against the command's flags in the table and its text converted to a value. Every
 * problem is a `ConfigurationError` (exit code 2) that says what to write instead.
 */

/** What the flags of one command line say. */
export interface ParsedFlags {
  /** Option values set by flags, already converted. */
  options: Partial<Record<ConfigKey, unknown>>;
  /** Every flag's value by flag name, converted; flags that set no option take their `default`. */
  values: Readonly<Record<string, unknown>>;
  json: boolean;
  configPath: string | null;
  /** `--nats <url>`: run through a distributed deployment (or, for `pge worker`, its server). */
  nats: string | null;
}

/** A parsed command line. */
export interface CommandLine {
  help: boolean;
  positionals: string[];
  flags: ParsedFlags;
}

const DECIMAL = /^[+-]?(\d+(\.\d*)?|\.\d+)(e[+-]?\d+)?$/i;
const DURATION = /^(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?$/i;
const UNIT_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };
const SIZE = /^(\d+(?:\.\d+)?)\s*(b|kib|mib|gib|k|m|g)?$/i;
const UNIT_BYTES: Record<string, number> = { b: 1, k: 1024, m: 1024 ** 2, g: 1024 ** 3 };

function bad(flag: string, expected: string, raw: string): ConfigurationError {
  return new ConfigurationError(`--${flag} expects ${expected}, got "${raw}"`);
}

function toNumber(flag: string, raw: string, integer: boolean, min = 0): number {
  const text = raw.trim();
  // Number() alone would read "" as 0 and "0x10" as 16; a flag value is a plain decimal.
  const value = DECIMAL.test(text) ? Number(text) : Number.NaN;
  if (integer && !(Number.isInteger(value) && value >= min)) throw bad(flag, `an integer >= ${min}`, raw);
  if (Number.isNaN(value)) throw bad(flag, 'a number', raw);
  return value;
}

function toDuration(flag: string, raw: string): number {
  const match = DURATION.exec(raw.trim());
  if (!match) throw bad(flag, 'a duration in ms (or with a unit: 500ms, 30s, 5m, 1h, 7d)', raw);
  return Math.round(Number(match[1]) * UNIT_MS[(match[2] ?? 'ms').toLowerCase()]!);
}

function toSize(flag: string, raw: string): number {
  const match = SIZE.exec(raw.trim());
  if (!match) throw bad(flag, 'a size in bytes (or with a unit: 512K, 10MiB, 1G)', raw);
  return Math.round(Number(match[1]) * UNIT_BYTES[(match[2] ?? 'b')[0]!.toLowerCase()]!);
}

/** `<key>=<value>` pairs of a repeatable flag, as one record; `read` converts each value. */
function toRecord<V>(
  flag: string,
  raws: readonly string[],
  example: string,
  read: (value: string, raw: string) => V,
): Record<string, V> {
  const record: Record<string, V> = {};
  for (const raw of raws) {
    const at = raw.lastIndexOf('=');
    const key = at > 0 ? raw.slice(0, at).trim() : '';
    if (key === '') throw bad(flag, example, raw);
    record[flag === 'threshold' ? key.toLowerCase() : key] = read(raw.slice(at + 1), raw);
  }
  return record;
}

function toThreshold(value: string, raw: string): number {
  const score = toNumber('threshold', value, false);
  if (score < 1 || score > 10)
    throw new ConfigurationError(`--threshold ${raw}: a threshold must be between 1 and 10`);
  return score;
}

const PRICE_FORMAT = '<model>=<input>,<output> in USD per million tokens, e.g. llama3.1=0.2,0.6';

function toPrice(value: string, raw: string): { inputPerMTok: number; outputPerMTok: number } {
  const parts = value.split(',');
  const [input, output] = parts.map((part) => (DECIMAL.test(part.trim()) ? Number(part) : Number.NaN));
  if (parts.length !== 2 || !(input! >= 0) || !(output! >= 0)) throw bad('price', PRICE_FORMAT, raw);
  return { inputPerMTok: input!, outputPerMTok: output! };
}

/** One flag's values as its value. Throws `ConfigurationError` naming the flag. */
function convert(spec: FlagSpec, raws: readonly string[]): unknown {
  const name = spec.name;
  const text = raws[raws.length - 1]!;
  switch (spec.kind) {
    case 'switch':
      return spec.turnsOff !== true;
    case 'threshold':
      return toRecord(name, raws, '<criterion>=<score>, e.g. accuracy=8', toThreshold);
    case 'price':
      return toRecord(name, raws, PRICE_FORMAT, toPrice);
    case 'mcp':
      return Object.fromEntries(raws.map((raw) => parseMcpFlag(raw, MCP_FLAG_ROLES[name] ?? [])));
    case 'integer':
      return toNumber(name, text, true, spec.min);
    case 'number':
      return toNumber(name, text, false);
    case 'duration':
      return toDuration(name, text);
    case 'size':
      return toSize(name, text);
    case 'choice':
      if (!spec.choices?.includes(text)) throw bad(name, `one of ${spec.choices?.join(', ')}`, text);
      return text;
    case 'choices': {
      const picked = text.split(',').map((choice) => choice.trim());
      const wanted = `some of ${spec.choices?.join(', ')}, comma-separated, each once`;
      if (picked.some((choice) => !spec.choices?.includes(choice)) || new Set(picked).size !== picked.length)
        throw bad(name, wanted, text);
      return picked;
    }
    default:
      return spec.repeatable ? [...raws] : text;
  }
}

/** Optimal string alignment distance: a swap of two neighbours (`retires`/`retries`) counts once. */
function distance(a: string, b: string): number {
  const d = Array.from({ length: a.length + 1 }, (_, i) => [i, ...Array<number>(b.length).fill(0)]);
  for (let j = 1; j <= b.length; j++) d[0]![j] = j;
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let best = Math.min(d[i - 1]![j]! + 1, d[i]![j - 1]! + 1, d[i - 1]![j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1])
        best = Math.min(best, d[i - 2]![j - 2]! + 1);
      d[i]![j] = best;
    }
  }
  return d[a.length]![b.length]!;
}

/** The candidate nearest to a mistyped name, if one is near enough to be what was meant. */
export function closest(name: string, candidates: readonly string[]): string | undefined {
  const near = candidates
    .map((candidate) => ({ candidate, d: distance(name, candidate) }))
    .filter(({ candidate, d }) => d <= Math.max(1, Math.floor(candidate.length / 4)))
    .sort((x, y) => x.d - y.d);
  const prefixed = candidates.filter((candidate) => name.length >= 3 && candidate.startsWith(name));
  return near[0]?.candidate ?? (prefixed.length === 1 ? prefixed[0] : undefined);
}

/** The message for a flag the command does not take, with the nearest one it does take. */
function unknownFlag(command: Command, rawName: string, flags: readonly FlagSpec[]): ConfigurationError {
  const name = rawName.replace(/^-+/, '');
  const guess = closest(name, [...flags.map((f) => f.name), 'help']);
  const elsewhere = (['run', 'worker', 'dashboard', 'graph', 'follow'] as const).some((other) =>
    flagsFor(other).some((f) => f.name === name),
  );
  const what = elsewhere ? `pge ${command} does not take ${rawName}` : `unknown flag ${rawName}`;
  return new ConfigurationError(guess ? `${what}; did you mean --${guess}?` : what);
}

function tokenize(flags: readonly FlagSpec[], argv: readonly string[]) {
  const options: NonNullable<ParseArgsConfig['options']> = { help: { type: 'boolean', short: 'h' } };
  for (const f of flags) options[f.name] = { type: f.kind === 'switch' ? 'boolean' : 'string' };
  // Not strict: parseArgs' own errors are written for programmers ("argument is ambiguous"), and
  // it refuses a value that starts with "-", so `--max-retries -1` could not say what is wrong.
  return parseArgs({ args: [...argv], options, allowPositionals: true, strict: false, tokens: true }).tokens;
}

/**
 * Parses the arguments after the command name. With `-h`/`--help` anywhere, nothing else is
 * read. Throws `ConfigurationError` on an unknown flag, a missing or superfluous value, or a value
 * its flag cannot take; option values are checked against their option later (`config.ts`).
 */
export function parseCommandLine(command: Command, argv: readonly string[]): CommandLine {
  const flags = flagsFor(command);
  const tokens = tokenize(flags, argv);
  const none: ParsedFlags = { options: {}, values: {}, json: false, configPath: null, nats: null };
  if (tokens.some((t) => t.kind === 'option' && (t.rawName === '--help' || t.rawName === '-h')))
    return { help: true, positionals: [], flags: none };
  const given = new Map<FlagSpec, string[]>();
  const positionals: string[] = [];
  for (const token of tokens) {
    if (token.kind === 'positional') positionals.push(token.value);
    if (token.kind !== 'option') continue;
    const spec = token.rawName.startsWith('--') ? flags.find((f) => f.name === token.name) : undefined;
    if (!spec) throw unknownFlag(command, token.rawName, flags);
    if (spec.kind === 'switch') {
      if (token.value !== undefined) throw new ConfigurationError(`${token.rawName} takes no value`);
      given.set(spec, ['true']);
      continue;
    }
    const value = token.value;
    if (value === undefined || (!token.inlineValue && value.startsWith('-') && !DECIMAL.test(value))) {
      const placeholder = spec.value ?? `<${spec.choices?.join('|') ?? 'value'}>`;
      const dash =
        value === undefined ? '' : `; a value that starts with "-" goes after "=": --${spec.name}=${value}`;
      throw new ConfigurationError(`--${spec.name} needs a value: --${spec.name} ${placeholder}${dash}`);
    }
    given.set(spec, [...(given.get(spec) ?? []), value]);
  }
  const options: Partial<Record<ConfigKey, unknown>> = {};
  const values: Record<string, unknown> = {};
  for (const spec of flags) {
    const raws = given.get(spec);
    const value = raws ? convert(spec, raws) : spec.default;
    if (value === undefined) continue;
    values[spec.name] = value;
    if (spec.option && raws) {
      // Flags that name servers for one role and for both make one record.
      const before = options[spec.option];
      options[spec.option] =
        spec.kind === 'mcp' ? { ...(before as object | undefined), ...(value as object) } : value;
    }
  }
  const text = (name: string) => (typeof values[name] === 'string' ? (values[name] as string) : null);
  // The servers of a cluster, given one flag each or comma-separated, as nats.js and NATS_URL take them.
  const nats = Array.isArray(values.nats) ? values.nats.join(',') : null;
  return {
    help: false,
    positionals,
    flags: { options, values, json: values.json === true, configPath: text('config'), nats },
  };
}
