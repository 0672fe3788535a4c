import { resolve } from 'node:path';
import { ConfigurationError } from '../errors.js';
import type { GivenPlan } from '../schemas/index.js';
import type { CommandLine } from './flags.js';
import type { CliIo } from './io.js';
import { optionsForRecordedRun, recordedEvents } from './resume-command.js';
import { reportRun } from './run-command.js';

/**
 * `pge continue <log> [--plan <edited>] [--log <new-log>] [flags]`: carries a job on
 * (`PlannerGeneratorEvaluator.continue`): a new run of the ended run's plan, or of the edited one,
 * that keeps the steps that passed and runs the rest, with no planner call. Its models are the
 * configured ones, else the earlier run's (as `pge resume` takes them); its other settings are the
 * flags'. It prints what `pge run` prints, and exits as it does.
 */
export async function continueCommand(line: CommandLine, io: CliIo): Promise<number> {
  const [file, ...extra] = line.positionals;
  if (file === undefined || extra.length > 0)
    throw new ConfigurationError(
      'pge continue needs one log file: pge continue <log> [--plan <edited.json>]',
    );
  const earlier = resolve(io.cwd, file);
  const events = await recordedEvents(earlier, 'continue');
  const started = events[0]?.type === 'run.started' ? events[0] : null;
  // --log names the new run's log and --plan the edited plan, which `continue` takes.
  const { sharedStatePath, plan, ...options } = optionsForRecordedRun(line, io, started);
  return reportRun('continue', options, line.flags.json, io, ({ pge }) =>
    pge.continue(earlier, {
      // The CLI read --plan's file (`readPlanFile`): a plan already read.
      ...(plan === undefined || plan === null ? {} : { plan: plan as GivenPlan }),
      ...(sharedStatePath === undefined ? {} : { logPath: sharedStatePath }),
      onContinuation: ({ continues, runs, job }) => {
        const kept = continues.carried.map((c) => c.stepId);
        io.stderr.write(
          `pge: run ${job.run} of job ${job.id}, continuing run ${continues.runId}: ` +
            `${kept.length === 0 ? 'no step kept' : `kept ${kept.join(', ')}`}; runs ${runs.join(', ')}\n`,
        );
      },
    }),
  );
}
