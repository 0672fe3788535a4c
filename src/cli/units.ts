/**
 * Durations and sizes as a person writes them on a command line (`30s`, `7d`, `512K`, `1.5GiB`) and
 * as the help shows a default (`10m`, `1G`): the one helper for both directions. Not `ms` or `bytes`:
 * `ms` also reads "5 minutes" and `bytes` neither `512K` nor `GiB`, so either would change what a
 * flag takes.
 */

const TIME_UNITS = { d: 86_400_000, h: 3_600_000, m: 60_000, s: 1000, ms: 1 } as const;
const SIZE_UNITS = { G: 1024 ** 3, M: 1024 ** 2, K: 1024, '': 1 } as const;

const DURATION = /^(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?$/i;
const SIZE = /^(\d+(?:\.\d+)?)\s*(b|kib|mib|gib|k|m|g)?$/i;

/** Milliseconds of a duration in ms or with a unit (ms, s, m, h, d); `undefined` when it is none. */
export function parseDuration(text: string): number | undefined {
  const match = DURATION.exec(text.trim());
  if (!match) return undefined;
  const unit = (match[2] ?? 'ms').toLowerCase() as keyof typeof TIME_UNITS;
  return Math.round(Number(match[1]) * TIME_UNITS[unit]);
}

/** Bytes of a size in bytes or with a binary unit (K, M, G, or KiB, MiB, GiB); `undefined` when it is none. */
export function parseSize(text: string): number | undefined {
  const match = SIZE.exec(text.trim());
  if (!match) return undefined;
  const unit = (match[2] ?? 'b')[0]!.toUpperCase();
  return Math.round(Number(match[1]) * SIZE_UNITS[(unit === 'B' ? '' : unit) as keyof typeof SIZE_UNITS]);
}

/** A number in the largest unit it is a whole number of (0 in the smallest). */
function inUnits(value: number, units: Readonly<Record<string, number>>): string {
  const entries = Object.entries(units);
  const [name, size] = entries.find(([, size]) => value !== 0 && value % size === 0) ?? entries.at(-1)!;
  return `${value / size}${name}`;
}

/** Milliseconds as a flag takes them back: `600000` is `10m`. */
export const formatDuration = (ms: number): string => inUnits(ms, TIME_UNITS);

/** Bytes as a flag takes them back: `1073741824` is `1G`. */
export const formatSize = (bytes: number): string => inUnits(bytes, SIZE_UNITS);
