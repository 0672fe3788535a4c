import { Command, Option } from '@commander-js/extra-typings';
import { APPROVAL_GATES } from '../schemas/setting-values.js';
import { FLAG_GROUPS } from './flag-table.js';
import { type CliIo, whoAmI } from './io.js';
import { credsOption, natsServersOption } from './nats-flags.js';

/**
 * `pge approve <runId> [--gate g] [--reject "<reason>"]`: a person's decision at a gate a run of a
 * deployment waits at, said once its coordinator recorded it. Declared here whole, as commander
 * takes a command: its typed options and its action; `program.ts` adds the help's prose.
 */

const HARNESS = `${FLAG_GROUPS.harness}:`;

/** `pge approve`, declared: it decides and says the recorded decision on `io.stdout`. */
export function approveCommand(io: CliIo) {
  return new Command('approve')
    .argument('<runId>')
    .addOption(
      new Option('--gate <gate>', 'The gate to decide (default: the one the run waits at)')
        .choices(APPROVAL_GATES)
        .helpGroup(HARNESS),
    )
    .addOption(
      new Option(
        '--reject <reason>',
        'Reject, with the reason the planner or the generator is told (default: approve)',
      ).helpGroup(HARNESS),
    )
    .addOption(
      new Option('--by <name>', 'Who decides, for the log (default: your user name)').helpGroup(HARNESS),
    )
    .addOption(natsServersOption())
    .addOption(credsOption())
    .addOption(
      new Option(
        '--json',
        'Print the recorded decision, its approval.decided event, as JSON on stdout',
      ).helpGroup(`${FLAG_GROUPS.output}:`),
    )
    .action(async (runId, flags) => {
      // Loaded here: the help and a usage error load no NATS client.
      const { connect } = await import('./run-records.js');
      const { decide } = await import('../runtime/approvals.js');
      const reason = flags.reject ?? null;
      const by = flags.by ?? whoAmI(io);
      const bus = await connect(flags, io, 'pge-approve');
      try {
        const decided = await decide(bus, runId, flags.gate, {
          decision: reason === null ? 'approve' : 'reject',
          reason,
          by,
        });
        const { gate, decision } = decided.payload;
        if (flags.json) io.stdout.write(`${JSON.stringify(decided)}\n`);
        else
          io.stdout.write(
            `run ${runId}: ${gate} ${decision === 'approve' ? 'approved' : 'rejected'} by ${by}\n`,
          );
      } finally {
        await bus.close();
      }
    });
}
