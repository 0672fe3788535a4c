import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { natsOptionsFromEnv, privateInboxOf } from '../../src/bus/nats-connection.js';
import { inboxPrefixOf, NATS_ROLES } from '../../src/bus/permissions.js';
import { writeNatsConfig } from '../../src/runtime/nats-config.js';

describe('the private inbox of a credential', () => {
  it('is the one inbox its JWT allows: each role of pge nats-config has its own', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'pge-inbox-'));
    try {
      const files = await writeNatsConfig({ dir, monitorPort: 0 });
      for (const role of NATS_ROLES)
        expect(privateInboxOf(await readFile(files.creds[role], 'utf8'))).toBe(inboxPrefixOf(role));
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('is none for a file without a readable user JWT, and NATS_INBOX_PREFIX sets one', () => {
    expect(privateInboxOf('SUAXXXX')).toBeNull();
    expect(
      privateInboxOf('-----BEGIN NATS USER JWT-----\nnot.a.jwt\n------END NATS USER JWT------'),
    ).toBeNull();
    expect(natsOptionsFromEnv({ NATS_INBOX_PREFIX: '_INBOX_mine' }).inboxPrefix).toBe('_INBOX_mine');
  });
});
