import { resolve } from 'node:path';
import { ConfigurationError } from '../errors.js';
import { FORK_SETTINGS, type ForkSettings } from '../runtime/fork-log.js';
import type { CommandLine } from './flags.js';
import type { CliIo } from './io.js';
import { optionsForRecordedRun, recordedEvents } from './resume-command.js';
import { reportRun } from './run-command.js';

/**
 * `pge fork <log> --from-step <n> [--log <new-log>] [flags]`: a new run that reuses a recorded
 * run up to step n (`PlannerGeneratorEvaluator.fork`). Its models are the configured ones, else the
 * parent's (as `pge resume` takes them); the settings given as flags replace the parent's.
 */
export async function forkCommand(line: CommandLine, io: CliIo): Promise<number> {
  const [file, ...extra] = line.positionals;
  if (file === undefined || extra.length > 0)
    throw new ConfigurationError('pge fork needs one log file: pge fork <log> --from-step <n>');
  const fromStep = line.flags.values['from-step'];
  if (typeof fromStep !== 'number' || fromStep < 1)
    throw new ConfigurationError('pge fork needs the step to fork from, 1 or more: --from-step <n>');
  const parent = resolve(io.cwd, file);
  const events = await recordedEvents(parent, 'fork');
  const started = events[0]?.type === 'run.started' ? events[0] : null;
  // --log names the fork's log, which `fork` takes; the harness's own log option is for new runs.
  const { sharedStatePath, ...options } = optionsForRecordedRun(line, io, started);
  const given = line.flags.options as ForkSettings;
  const settings = Object.fromEntries(
    FORK_SETTINGS.filter((name) => given[name] !== undefined).map((name) => [name, given[name]]),
  );
  return reportRun('fork', options, line.flags.json, io, ({ pge, progress }) => {
    // The status line counts what the fork takes from its parent, as a resume counts its log.
    const at = events.findIndex((e) => e.type === 'step.started' && e.payload.stepNumber === fromStep);
    if (at > 0) progress.resumeFrom(events.slice(0, at));
    return pge.fork(parent, {
      fromStep,
      settings,
      ...(sharedStatePath === undefined ? {} : { logPath: sharedStatePath }),
    });
  });
}
