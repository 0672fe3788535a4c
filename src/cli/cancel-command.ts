import { Command, Option } from '@commander-js/extra-typings';
import { ExitCode } from './exit-codes.js';
import { FLAG_GROUPS } from './flag-table.js';
import { type CliIo, whoAmI } from './io.js';
import { credsOption, natsServersOption } from './nats-flags.js';

/**
 * `pge cancel <runId> [--reason "<text>"] [--by <name>]`: cancels a run of a deployment, and says
 * its closing event once stored. Exit 0 cancelled, 2 when the run had ended before the cancel
 * reached it. Declared here whole, as commander takes a command: its typed options and its
 * action; `program.ts` adds the help's prose.
 */

const HARNESS = `${FLAG_GROUPS.harness}:`;

/** `pge cancel`, declared: it cancels the run; `done` is given the exit code. */
export function cancelCommand(io: CliIo, done: (code: number) => void) {
  return new Command('cancel')
    .argument('<runId>')
    .addOption(new Option('--reason <text>', "Why, for the run's closing event").helpGroup(HARNESS))
    .addOption(
      new Option('--by <name>', 'Who cancels, for the log (default: your user name)').helpGroup(HARNESS),
    )
    .addOption(natsServersOption())
    .addOption(credsOption())
    .addOption(
      new Option('--json', "Print the run's closing event as JSON on stdout").helpGroup(
        `${FLAG_GROUPS.output}:`,
      ),
    )
    .action(async (runId, flags) => {
      // Loaded here: the help and a usage error load no NATS client.
      const { connect } = await import('./run-records.js');
      const { cancelRun, endedAs } = await import('../runtime/run-cancel.js');
      const reason = flags.reason !== undefined && flags.reason.trim() !== '' ? flags.reason : null;
      const by = flags.by ?? whoAmI(io);
      const bus = await connect(flags, io, 'pge-cancel');
      try {
        const { owner, closing } = await cancelRun(bus, runId, by, reason);
        const cancelled = closing.type === 'run.failed' && closing.payload.reason === 'cancelled';
        if (flags.json) io.stdout.write(`${JSON.stringify(closing)}\n`);
        else if (closing.type === 'run.failed' && cancelled) {
          const stopped = closing.payload.inFlight ?? [];
          const steps =
            stopped.length === 0
              ? ''
              : `; steps stopped in flight: ${stopped.map((s) => s.stepNumber).join(', ')}`;
          io.stdout.write(`run ${runId}: cancelled by ${by} (coordinator ${owner})${steps}\n`);
        } else io.stdout.write(`run ${runId}: it ended (${endedAs(closing)}) before the cancel reached it\n`);
        done(cancelled ? ExitCode.passed : ExitCode.usage);
      } finally {
        await bus.close();
      }
    });
}
