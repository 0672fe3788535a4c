import { ConfigurationError } from '../errors.js';
import { parseMcpFlag } from '../tools/mcp.js';
import { type FlagSpec, MCP_FLAG_ROLES } from './flag-table.js';
import { parseDuration, parseSize } from './units.js';

/**
 * How a flag's text becomes its value: the argument parser commander calls for each flag given
 * (`Option.argParser`). A bad value throws a `ConfigurationError` (exit code 2) that names the
 * flag and says what it takes; commander passes it through as it is.
 */

/** A plain decimal: `Number()` alone would read "" as 0 and "0x10" as 16. */
export const DECIMAL = /^[+-]?(\d+(\.\d*)?|\.\d+)(e[+-]?\d+)?$/i;

function bad(flag: string, expected: string, raw: string): ConfigurationError {
  return new ConfigurationError(`--${flag} expects ${expected}, got "${raw}"`);
}

function toNumber(flag: string, raw: string, integer: boolean, min = 0): number {
  const text = raw.trim();
  const value = DECIMAL.test(text) ? Number(text) : Number.NaN;
  if (integer && !(Number.isInteger(value) && value >= min)) throw bad(flag, `an integer >= ${min}`, raw);
  if (Number.isNaN(value)) throw bad(flag, 'a number', raw);
  return value;
}

/** The argument parser of a flag `--<flag> <n>` that takes a whole number >= `min`. */
export const integerArgument =
  (flag: string, min = 0) =>
  (raw: string): number =>
    toNumber(flag, raw, true, min);

/** A duration in ms, or with a unit: the value of a flag `--<flag> <ms>`. */
function toDuration(flag: string, raw: string): number {
  const ms = parseDuration(raw);
  if (ms === undefined) throw bad(flag, 'a duration in ms (or with a unit: 500ms, 30s, 5m, 1h, 7d)', raw);
  return ms;
}

/** The argument parser of a flag `--<flag> <ms>` that takes a duration (`toDuration`). */
export const durationArgument =
  (flag: string) =>
  (raw: string): number =>
    toDuration(flag, raw);

/** One `<key>=<value>` pair of a repeatable flag, added to the record of the pairs before it. */
function withPair<V>(
  flag: string,
  raw: string,
  before: Record<string, V> | undefined,
  example: string,
  read: (value: string) => V,
): Record<string, V> {
  const at = raw.lastIndexOf('=');
  const key = at > 0 ? raw.slice(0, at).trim() : '';
  if (key === '') throw bad(flag, example, raw);
  return { ...before, [flag === 'threshold' ? key.toLowerCase() : key]: read(raw.slice(at + 1)) };
}

const PRICE_FORMAT = '<model>=<input>,<output> in USD per million tokens, e.g. llama3.1=0.2,0.6';

function toPrice(value: string, raw: string): { inputPerMTok: number; outputPerMTok: number } {
  const parts = value.split(',');
  const [input, output] = parts.map((part) => (DECIMAL.test(part.trim()) ? Number(part) : Number.NaN));
  if (parts.length !== 2 || !(input! >= 0) || !(output! >= 0)) throw bad('price', PRICE_FORMAT, raw);
  return { inputPerMTok: input!, outputPerMTok: output! };
}

function toThreshold(value: string, raw: string): number {
  const score = toNumber('threshold', value, false);
  if (score < 1 || score > 10)
    throw new ConfigurationError(`--threshold ${raw}: a threshold must be between 1 and 10`);
  return score;
}

/**
 * The value of a flag given once more: `raw` is its text this time, `before` its value so far
 * (what the flags before made of it). Repeatable flags collect; the others take the last text.
 */
export function flagValue(spec: FlagSpec, raw: string, before: unknown): unknown {
  const name = spec.name;
  switch (spec.kind) {
    case 'threshold':
      return withPair(
        name,
        raw,
        before as Record<string, number>,
        '<criterion>=<score>, e.g. accuracy=8',
        (v) => toThreshold(v, raw),
      );
    case 'price':
      return withPair(name, raw, before as Record<string, never>, PRICE_FORMAT, (v) => toPrice(v, raw));
    case 'mcp':
      return {
        ...(before as object),
        ...Object.fromEntries([parseMcpFlag(raw, MCP_FLAG_ROLES[name] ?? [])]),
      };
    case 'integer':
      return toNumber(name, raw, true, spec.min);
    case 'number':
      return toNumber(name, raw, false);
    case 'duration':
      return toDuration(name, raw);
    case 'size': {
      const bytes = parseSize(raw);
      if (bytes === undefined) throw bad(name, 'a size in bytes (or with a unit: 512K, 10MiB, 1G)', raw);
      return bytes;
    }
    case 'choice':
      if (!spec.choices?.includes(raw)) throw bad(name, `one of ${spec.choices?.join(', ')}`, raw);
      return raw;
    case 'choices': {
      const picked = raw.split(',').map((choice) => choice.trim());
      const wanted = `some of ${spec.choices?.join(', ')}, comma-separated, each once`;
      if (picked.some((choice) => !spec.choices?.includes(choice)) || new Set(picked).size !== picked.length)
        throw bad(name, wanted, raw);
      return picked;
    }
    default:
      return spec.repeatable ? [...((before as string[] | undefined) ?? []), raw] : raw;
  }
}
