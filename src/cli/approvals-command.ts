import { Command, Option } from '@commander-js/extra-typings';
import { FLAG_GROUPS } from './flag-table.js';
import type { CliIo } from './io.js';
import { credsOption, embeddedLogsOption, listingServersOption } from './nats-flags.js';

/**
 * `pge approvals`: one line per gate a run waits at (or the list as JSON), of a deployment's runs
 * or of the embedded runs' logs. Declared here whole, as commander takes a command: its typed
 * options and its action; `program.ts` adds the help's prose.
 */

/** `pge approvals`, declared: it lists the waiting gates on `io.stdout`. */
export function approvalsCommand(io: CliIo) {
  return new Command('approvals')
    .addOption(embeddedLogsOption())
    .addOption(
      new Option(
        '--json',
        'Print the gates as a JSON array on stdout: runId, gate, requestId, stepNumber, attempt, summary, since',
      ).helpGroup(`${FLAG_GROUPS.output}:`),
    )
    .addOption(listingServersOption())
    .addOption(credsOption())
    .action(async (flags) => {
      // Loaded here: the help and a usage error load no NATS client.
      const { openRecords } = await import('./run-records.js');
      const { pendingApprovals } = await import('../runtime/approvals.js');
      const { records, close } = await openRecords(flags, io, 'pge-approvals');
      try {
        const pending = await pendingApprovals(records);
        if (flags.json) io.stdout.write(`${JSON.stringify(pending)}\n`);
        else if (pending.length === 0) io.stdout.write('no run waits at a gate\n');
        else
          for (const p of pending) {
            const where =
              p.stepNumber === null
                ? ''
                : ` step ${p.stepNumber}${p.attempt === null ? '' : ` attempt ${p.attempt}`}`;
            io.stdout.write(`${p.runId}  ${p.gate}${where}  since ${p.since}  ${p.summary.split('\n')[0]}\n`);
          }
      } finally {
        await close();
      }
    });
}
