import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { minVersion, satisfies } from 'semver';
import { describe, expect, it } from 'vitest';

/**
 * `engines.node` in package.json is a promise: every package `npm ci` installs runs on the oldest
 * Node it admits. A dependency that needs a newer Node makes npm warn `EBADENGINE` and may fail at
 * run time, so the lock file's tree is checked against that oldest version here.
 */

const ROOT = resolve(import.meta.dirname, '..', '..');
const read = (name: string) => JSON.parse(readFileSync(join(ROOT, name), 'utf8'));

const pkg = read('package.json') as { engines: { node: string } };
const lock = read('package-lock.json') as {
  packages: Record<string, { version?: string; engines?: { node?: string } | string[] }>;
};

describe('engines', () => {
  const oldest = minVersion(pkg.engines.node);

  it('package.json names the oldest Node it runs on', () => {
    expect(oldest?.version).toMatch(/^\d+\.\d+\.\d+$/);
  });

  it('every installed package runs on that Node', () => {
    const refused = Object.entries(lock.packages).flatMap(([path, entry]) => {
      const range = Array.isArray(entry.engines) ? undefined : entry.engines?.node;
      return range === undefined || satisfies(oldest!, range)
        ? []
        : [`${path}@${entry.version}: node ${range}`];
    });
    expect(refused).toEqual([]);
  });
});
