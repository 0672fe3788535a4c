import { ExitCode } from './exit-codes.js';
import type { CommandLine } from './flags.js';
import type { CliIo } from './io.js';

/**
 * `pge replay <log> [--json]`: re-runs a recorded run's charts from its log (`replayLog`) and says
 * whether they produce the recorded events. Exit 0 identical, 1 not, 2 not the log of an ended run.
 */
export async function replayCommand(line: CommandLine, io: CliIo): Promise<number> {
  const path = line.positionals[0]!;
  const { resolve } = await import('node:path');
  const { replayLog } = await import('../runtime/replay-log.js');
  const report = await replayLog(resolve(io.cwd, path));
  if (line.flags.json) io.stdout.write(`${JSON.stringify(report)}\n`);
  else if (report.firstDifference === null)
    io.stdout.write(
      `identical: the replay of run ${report.runId} produced its ${report.events} recorded events, with ${report.modelCalls} model calls\n`,
    );
  else
    io.stdout.write(
      `different: the replay of run ${report.runId} parts from its log at seq ${report.firstDifference.seq}: ${report.firstDifference.problem}\n`,
    );
  return report.identical ? ExitCode.passed : ExitCode.failed;
}
