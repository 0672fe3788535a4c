import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { accountImports, NATS_ROLES, ROLE_PERMISSIONS } from '../../src/bus/permissions.js';

/** docs/security.md lists what each role may publish and subscribe: exactly what the credentials carry. */

const doc = readFileSync(join(import.meta.dirname, '..', '..', 'docs', 'security.md'), 'utf8');

/** The section of one role, as the doc writes it. */
function section(role: (typeof NATS_ROLES)[number]): string {
  const p = ROLE_PERMISSIONS[role];
  const column = (label: string, subjects: readonly string[]) =>
    subjects.length === 0 ? [] : [`${label.padEnd(11)}${subjects.join(`\n${' '.repeat(11)}`)}`];
  return [
    `### ${role}`,
    '',
    `${p.summary}.`,
    '',
    '```text',
    ...column('publish:', p.publish.allow),
    ...column('deny:', p.publish.deny),
    ...column('subscribe:', p.subscribe.allow),
    ...column('sub deny:', p.subscribe.deny),
    ...(role === 'coordinator'
      ? ['account:   PGE (holds the streams)']
      : [
          `account:   PGE_${role.toUpperCase()}, importing from PGE:`,
          ...column('services:', accountImports(role).services),
          ...column('streams:', accountImports(role).streams),
        ]),
    '```',
  ].join('\n');
}

describe('docs/security.md', () => {
  it.each([...NATS_ROLES])('lists the permissions of %s as the credentials carry them', (role) => {
    expect(doc).toContain(section(role));
  });

  it('lists the roles in the order pge nats-config writes them, and no other', () => {
    const listed = [...doc.matchAll(/^### (\S+)$/gm)].map((m) => m[1]);
    expect(listed).toEqual([...NATS_ROLES]);
  });
});
