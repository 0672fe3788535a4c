import { userInfo } from 'node:os';
import { resolve } from 'node:path';
import type { StoredMessages } from '../bus/bus.js';
import { NatsBus } from '../bus/nats-bus.js';
import { decide, pendingApprovals } from '../runtime/approvals.js';
import { logRunStore } from '../runtime/log-store.js';
import { cancelRun, endedAs } from '../runtime/run-cancel.js';
import type { ApprovalGate } from '../schemas/index.js';
import { ExitCode } from './exit-codes.js';
import type { CommandLine } from './flags.js';
import type { CliIo } from './io.js';
import { natsOptionsOf } from './nats-options.js';

/**
 * `pge approvals`, `pge approve <runId>` and `pge cancel <runId>`: a person's say over a
 * distributed deployment's runs.
 */

/** Connects to the deployment as a client does (`--nats`, else NATS_URL): `pge approvals`, `pge runs`. */
export function connect(line: CommandLine, io: CliIo, name: string): Promise<NatsBus> {
  const servers = line.flags.nats ?? io.env.NATS_URL?.trim() ?? 'nats://127.0.0.1:4222';
  return NatsBus.connect({ ...natsOptionsOf(line.flags, io.env), servers, name });
}

/**
 * Where `pge runs` and `pge approvals` read runs from: the deployment's stream (`--nats`, else
 * NATS_URL), else the logs of the embedded runs in `--working-dir` (default: the current
 * directory), read as the embedded host reads them (`logRunStore`); a log it cannot read is said on
 * stderr. The command chooses the bus; what it reads is the same.
 */
export async function openRecords(
  line: CommandLine,
  io: CliIo,
  name: string,
): Promise<{ records: StoredMessages; close(): Promise<void> }> {
  if (line.flags.nats ?? io.env.NATS_URL?.trim()) {
    const bus = await connect(line, io, name);
    return { records: bus, close: () => bus.close() };
  }
  const dir = line.flags.values['working-dir'];
  const store = logRunStore(resolve(io.cwd, typeof dir === 'string' ? dir : '.'), (problem) =>
    io.stderr.write(`pge: ${problem}\n`),
  );
  return { records: store, close: async () => {} };
}

/** The user's name, for the log; a container's user may have none. */
function whoAmI(io: CliIo): string {
  try {
    return userInfo().username;
  } catch {
    return io.env.USER?.trim() || 'unknown';
  }
}

/** `pge approvals`: one line per gate a run waits at (or the list as JSON). */
export async function approvalsCommand(line: CommandLine, io: CliIo): Promise<number> {
  const { records, close } = await openRecords(line, io, 'pge-approvals');
  try {
    const pending = await pendingApprovals(records);
    if (line.flags.json) io.stdout.write(`${JSON.stringify(pending)}\n`);
    else if (pending.length === 0) io.stdout.write('no run waits at a gate\n');
    else
      for (const p of pending) {
        const where =
          p.stepNumber === null
            ? ''
            : ` step ${p.stepNumber}${p.attempt === null ? '' : ` attempt ${p.attempt}`}`;
        io.stdout.write(`${p.runId}  ${p.gate}${where}  since ${p.since}  ${p.summary.split('\n')[0]}\n`);
      }
    return ExitCode.passed;
  } finally {
    await close();
  }
}

/** `pge approve <runId> [--gate g] [--reject "<reason>"]`: the decision, once its coordinator recorded it. */
export async function approveCommand(line: CommandLine, io: CliIo): Promise<number> {
  const runId = line.positionals[0]!;
  const { values } = line.flags;
  const reason = typeof values.reject === 'string' ? values.reject : null;
  const by = typeof values.by === 'string' ? values.by : whoAmI(io);
  const bus = await connect(line, io, 'pge-approve');
  try {
    const decided = await decide(bus, runId, values.gate as ApprovalGate | undefined, {
      decision: reason === null ? 'approve' : 'reject',
      reason,
      by,
    });
    const { gate, decision } = decided.payload;
    if (line.flags.json) io.stdout.write(`${JSON.stringify(decided)}\n`);
    else
      io.stdout.write(`run ${runId}: ${gate} ${decision === 'approve' ? 'approved' : 'rejected'} by ${by}\n`);
    return ExitCode.passed;
  } finally {
    await bus.close();
  }
}

/** `pge cancel <runId> [--reason "<text>"] [--by <name>]`: the run's closing event, once stored. */
export async function cancelCommand(line: CommandLine, io: CliIo): Promise<number> {
  const runId = line.positionals[0]!;
  const { values } = line.flags;
  const reason = typeof values.reason === 'string' && values.reason.trim() !== '' ? values.reason : null;
  const by = typeof values.by === 'string' ? values.by : whoAmI(io);
  const bus = await connect(line, io, 'pge-cancel');
  try {
    const { owner, closing } = await cancelRun(bus, runId, by, reason);
    if (line.flags.json) io.stdout.write(`${JSON.stringify(closing)}\n`);
    else if (closing.type === 'run.failed' && closing.payload.reason === 'cancelled') {
      const stopped = closing.payload.inFlight ?? [];
      const steps =
        stopped.length === 0
          ? ''
          : `; steps stopped in flight: ${stopped.map((s) => s.stepNumber).join(', ')}`;
      io.stdout.write(`run ${runId}: cancelled by ${by} (coordinator ${owner})${steps}\n`);
    } else io.stdout.write(`run ${runId}: it ended (${endedAs(closing)}) before the cancel reached it\n`);
    return closing.type === 'run.failed' && closing.payload.reason === 'cancelled'
      ? ExitCode.passed
      : ExitCode.usage;
  } finally {
    await bus.close();
  }
}
