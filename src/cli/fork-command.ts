import { resolve } from 'node:path';
import { ConfigurationError } from '../errors.js';
import { FORK_SETTINGS, type ForkSettings, isForkPoint } from '../runtime/fork-log.js';
import { ID_PATTERN } from '../schemas/setting-values.js';
import type { CommandLine } from './command-line.js';
import { resolveConfig } from './config.js';
import type { CliIo } from './io.js';
import { optionsForRecordedRun, recordedEvents } from './resume-command.js';
import { reportRun } from './run-command.js';

/**
 * `pge fork <log> --from-step <n> [--log <new-log>] [flags]`: a new run that reuses a recorded
 * run up to step n (`PlannerGeneratorEvaluator.fork`). Its models are the configured ones, else the
 * parent's (as `pge resume` takes them); the settings given as flags replace the parent's.
 * `pge fork --nats <url> <runId> --from-step <n> [flags]`: the same of a run of a deployment, by its
 * coordinators (`forkRemote`).
 */
export async function forkCommand(line: CommandLine, io: CliIo): Promise<number> {
  const file = line.positionals[0]!;
  const fromStep = line.flags.values['from-step'];
  if (typeof fromStep !== 'number' || fromStep < 1)
    throw new ConfigurationError('pge fork needs the step to fork from, 1 or more: --from-step <n>');
  const nats = line.flags.nats ?? io.env.NATS_URL?.trim();
  if (nats) return forkRemote(file, fromStep, nats, line, io);
  const parent = resolve(io.cwd, file);
  const events = await recordedEvents(parent, 'fork');
  const started = events[0]?.type === 'run.started' ? events[0] : null;
  // --log names the fork's log, which `fork` takes; the harness's own log option is for new runs.
  const { sharedStatePath, ...options } = optionsForRecordedRun(line, io, started);
  return reportRun('fork', options, line.flags.json, io, ({ pge, progress }) => {
    // The status line counts what the fork takes from its parent, as a resume counts its log.
    const at = events.findIndex((e) => isForkPoint(e, fromStep));
    if (at > 0) progress.resumeFrom(events.slice(0, at));
    return pge.fork(parent, {
      fromStep,
      settings: forkSettingsOf(line),
      ...(sharedStatePath === undefined ? {} : { logPath: sharedStatePath }),
    });
  });
}

/** The settings given as flags that a fork may change (`FORK_SETTINGS`). */
function forkSettingsOf(line: CommandLine): ForkSettings {
  const given = line.flags.options as ForkSettings;
  return Object.fromEntries(
    FORK_SETTINGS.filter((name) => given[name] !== undefined).map((name) => [name, given[name]]),
  );
}

/**
 * `pge fork --nats <url> <runId> --from-step <n>`: submits the fork on `pge.runs.submit`; the
 * coordinator that takes it reads the parent's events from the deployment's events stream, refuses
 * a run that is unknown, has not ended or did not start step n, records the fork's first events and
 * drives it on. It is followed as `pge run --nats` follows a run, and exits as the embedded fork does.
 */
async function forkRemote(
  runId: string,
  fromStep: number,
  servers: string,
  line: CommandLine,
  io: CliIo,
): Promise<number> {
  if (!ID_PATTERN.test(runId))
    throw new ConfigurationError(
      `"${runId}" is not a run id: pge fork --nats forks a run of the deployment by its id (pge runs --nats lists them)`,
    );
  const [{ refuseWorkerFlags, followSubmission }, { natsOptionsOf }] = await Promise.all([
    import('./remote-run.js'),
    import('./nats-options.js'),
  ]);
  refuseWorkerFlags(line.flags.options, { settings: FORK_SETTINGS });
  const { options } = resolveConfig({ flags: line.flags, env: io.env, cwd: io.cwd });
  const settings = forkSettingsOf(line);
  const fork = { runId, fromStep, ...(Object.keys(settings).length === 0 ? {} : { settings }) };
  return followSubmission({ fork }, servers, natsOptionsOf(line.flags, io.env), options, line.flags.json, io);
}
