import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach } from 'vitest';
import { type NatsServerHandle, startNatsServer } from './nats-server.js';

/** What `serverPerTest` gives each test: its server, its directory, and what to close after it. */
export interface ServerPerTest {
  readonly nats: NatsServerHandle;
  readonly dir: string;
  /** Closed after the test, the last pushed first, before the server stops. */
  readonly closing: (() => Promise<void> | void)[];
}

/**
 * A private nats-server and a fresh temporary directory (named after `prefix`) for each test of
 * the file that calls it; after each test, what it pushed on `closing` is closed, the last first,
 * then the server stops and the directory goes.
 */
export function serverPerTest(prefix: string): ServerPerTest {
  let nats: NatsServerHandle | null = null;
  let dir: string | null = null;
  const closing: (() => Promise<void> | void)[] = [];
  beforeEach(async () => {
    nats = await startNatsServer();
    dir = mkdtempSync(join(tmpdir(), prefix));
  });
  afterEach(async () => {
    for (const close of closing.splice(0).reverse()) await close();
    await nats?.stop();
    if (dir !== null) rmSync(dir, { recursive: true, force: true });
  });
  const current = <T>(value: T | null, what: string): T => {
    if (value === null) throw new Error(`${what} exists only while a test runs`);
    return value;
  };
  return {
    get nats() {
      return current(nats, 'the test server');
    },
    get dir() {
      return current(dir, 'the test directory');
    },
    closing,
  };
}
