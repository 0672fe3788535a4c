import { Command, Option } from '@commander-js/extra-typings';
import { ExitCode } from './exit-codes.js';
import type { CliIo } from './io.js';

/**
 * `pge replay <log> [--json]`: re-runs a recorded run's charts from its log (`replayLog`) and says
 * whether they produce the recorded events. Exit 0 identical, 1 not, 2 not the log of an ended run.
 * Declared here whole, as commander takes a command; `program.ts` adds the help's prose.
 */
export function replayCommand(io: CliIo, done: (code: ExitCode) => void) {
  return new Command('replay')
    .argument('<log>')
    .addOption(
      new Option(
        '--json',
        'Print the verdict as JSON on stdout: runId, identical, events, modelCalls, firstDifference',
      ).helpGroup('Output:'),
    )
    .action(async (path, { json }) => {
      const { resolve } = await import('node:path');
      const { replayLog } = await import('../runtime/replay-log.js');
      const report = await replayLog(resolve(io.cwd, path));
      if (json) io.stdout.write(`${JSON.stringify(report)}\n`);
      else if (report.firstDifference === null)
        io.stdout.write(
          `identical: the replay of run ${report.runId} produced its ${report.events} recorded events, with ${report.modelCalls} model calls\n`,
        );
      else
        io.stdout.write(
          `different: the replay of run ${report.runId} parts from its log at seq ${report.firstDifference.seq}: ${report.firstDifference.problem}\n`,
        );
      done(report.identical ? ExitCode.passed : ExitCode.failed);
    });
}
