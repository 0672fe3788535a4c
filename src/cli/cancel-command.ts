import { cancelRun, endedAs } from '../runtime/run-cancel.js';
import { ExitCode } from './exit-codes.js';
import type { CommandLine } from './flags.js';
import type { CliIo } from './io.js';
import { connect, whoAmI } from './run-records.js';

/** `pge cancel <runId> [--reason "<text>"] [--by <name>]`: the run's closing event, once stored. */
export async function cancelCommand(line: CommandLine, io: CliIo): Promise<number> {
  const runId = line.positionals[0]!;
  const { values } = line.flags;
  const reason = typeof values.reason === 'string' && values.reason.trim() !== '' ? values.reason : null;
  const by = typeof values.by === 'string' ? values.by : whoAmI(io);
  const bus = await connect({ nats: natsGiven(line), creds: credsGiven(line) }, io, 'pge-cancel');
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

const natsGiven = (line: CommandLine) => (line.flags.nats === null ? undefined : [line.flags.nats]);
const credsGiven = (line: CommandLine) =>
  typeof line.flags.values.creds === 'string' ? line.flags.values.creds : undefined;
