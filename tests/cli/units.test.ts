import { describe, expect, it } from 'vitest';
import { formatDuration, formatSize, parseDuration, parseSize } from '../../src/cli/units.js';

/** The one helper for durations and sizes: what a flag takes, and how the help shows a default. */

describe('durations', () => {
  it.each([
    ['1500', 1500],
    ['500ms', 500],
    [' 30s ', 30_000],
    ['1.5m', 90_000],
    ['2H', 7_200_000],
    ['7d', 7 * 86_400_000],
    ['0', 0],
  ])('reads %j as %d ms', (text, ms) => {
    expect(parseDuration(text)).toBe(ms);
  });

  it.each(['', 'soon', '5 minutes', '-1s', '1w', '0x10', '1e3'])('reads %j as no duration', (text) => {
    expect(parseDuration(text)).toBeUndefined();
  });

  it('shows a duration in the largest unit it is a whole number of', () => {
    expect([600_000, 86_400_000, 90_000, 1500, 0].map(formatDuration)).toEqual([
      '10m',
      '1d',
      '90s',
      '1500ms',
      '0ms',
    ]);
    for (const ms of [600_000, 86_400_000, 90_000, 1500]) expect(parseDuration(formatDuration(ms))).toBe(ms);
  });
});

describe('sizes', () => {
  it.each([
    ['1000', 1000],
    ['12b', 12],
    ['512K', 512 * 1024],
    ['10MiB', 10 * 1024 ** 2],
    ['1.5GiB', 1.5 * 1024 ** 3],
    ['1g', 1024 ** 3],
  ])('reads %j as %d bytes', (text, bytes) => {
    expect(parseSize(text)).toBe(bytes);
  });

  it.each(['', '1x', '1KB', '1T', '-1K'])('reads %j as no size', (text) => {
    expect(parseSize(text)).toBeUndefined();
  });

  it('shows a size in the largest binary unit it is a whole number of', () => {
    expect([1024 ** 3, 256 * 1024, 1536 * 1024, 1000, 0].map(formatSize)).toEqual([
      '1G',
      '256K',
      '1536K',
      '1000',
      '0',
    ]);
  });
});
