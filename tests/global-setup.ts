import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import type { TestProject } from 'vitest/node';
import { startNatsServer } from './support/nats-server.js';

/**
 * Starts one private nats-server (JetStream on, random loopback port, temporary store) for the
 * whole test run and hands its URL to the tests as `inject('natsUrl')`; with `NATS_URL` set, that
 * server is used instead and nothing is started. A missing nats-server fails the run with a
 * message that says how to install it: CI never skips the NATS tests.
 */

declare module 'vitest' {
  export interface ProvidedContext {
    /** The nats-server the integration tests use. */
    natsUrl: string;
  }
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  // Tests that spawn the CLI run it from dist, as installed: build it once, before any file runs,
  // so that no test runs a stale build and no two files build at the same time.
  execFileSync('npm', ['run', 'build'], { cwd: join(import.meta.dirname, '..'), stdio: 'pipe' });
  const given = process.env.NATS_URL?.trim();
  if (given) {
    project.provide('natsUrl', given);
    return async () => undefined;
  }
  const server = await startNatsServer();
  project.provide('natsUrl', server.url);
  return () => server.stop();
}
