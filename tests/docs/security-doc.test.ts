import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { NATS_ROLES } from '../../src/bus/permissions.js';
import { section } from '../support/security-doc.js';

/** docs/security.md lists what each role may publish and subscribe: exactly what the credentials carry. */

const doc = readFileSync(join(import.meta.dirname, '..', '..', 'docs', 'security.md'), 'utf8');

describe('docs/security.md', () => {
  it.each([...NATS_ROLES])('lists the permissions of %s as the credentials carry them', (role) => {
    expect(doc).toContain(section(role));
  });

  it('lists the roles in the order pge nats-config writes them, and no other', () => {
    const listed = [...doc.matchAll(/^### (\S+)$/gm)].map((m) => m[1]);
    expect(listed).toEqual([...NATS_ROLES]);
  });
});
