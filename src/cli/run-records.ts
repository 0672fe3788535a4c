import { resolve } from 'node:path';
import type { StoredMessages } from '../bus/bus.js';
import { NatsBus } from '../bus/nats-bus.js';
import { logRunStore } from '../runtime/log-store.js';
import type { CliIo } from './io.js';
import { serversGiven } from './nats-flags.js';
import { natsConnection } from './nats-options.js';

/**
 * Where `pge runs`, `pge approvals`, `pge approve` and `pge cancel` reach runs: a deployment, or
 * the embedded runs' logs. Loaded by their actions, once their line is known to be good.
 */

/** How such a command was told to reach runs: `--nats`, `--creds`, `--working-dir`. */
export interface RunsReach {
  nats?: string[] | undefined;
  creds?: string | undefined;
  workingDir?: string | undefined;
}

/** Connects to the deployment as a client does (`--nats`, else NATS_URL). */
export function connect(reach: RunsReach, io: CliIo, name: string): Promise<NatsBus> {
  const servers = serversGiven(reach.nats) ?? io.env.NATS_URL?.trim() ?? 'nats://127.0.0.1:4222';
  return NatsBus.connect({ ...natsConnection(reach.creds, io.env), servers, name });
}

/**
 * Where `pge runs` and `pge approvals` read runs from: the deployment's stream (`--nats`, else
 * NATS_URL), else the logs of the embedded runs in `--working-dir` (default: the current
 * directory), read as the embedded host reads them (`logRunStore`); a log it cannot read is said on
 * stderr. The command chooses the bus; what it reads is the same.
 */
export async function openRecords(
  reach: RunsReach,
  io: CliIo,
  name: string,
): Promise<{ records: StoredMessages; close(): Promise<void> }> {
  if (serversGiven(reach.nats) ?? io.env.NATS_URL?.trim()) {
    const bus = await connect(reach, io, name);
    return { records: bus, close: () => bus.close() };
  }
  const store = logRunStore(resolve(io.cwd, reach.workingDir ?? '.'), (problem) =>
    io.stderr.write(`pge: ${problem}\n`),
  );
  return { records: store, close: async () => {} };
}
