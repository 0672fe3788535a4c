import { accountImports, type NatsRole, ROLE_PERMISSIONS } from '../../src/bus/permissions.js';

/** The section of one role, as the doc writes it. */
export function section(role: NatsRole): string {
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
          ...column('sends:', accountImports(role).sends),
          ...column('streams:', accountImports(role).streams),
        ]),
    '```',
  ].join('\n');
}
