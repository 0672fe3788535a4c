import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { ConfigurationError } from '../errors.js';
import { readLogFile } from '../persistence/log-reader.js';
import type { Continuation } from '../runtime/continue-run.js';
import { type GivenPlan, ID_PATTERN, isClosingEvent, type RunEvent } from '../schemas/index.js';
import type { CommandLine } from './command-line.js';
import { resolveConfig } from './config.js';
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
  const file = line.positionals[0]!;
  const nats = line.flags.nats ?? io.env.NATS_URL?.trim();
  if (nats) return continueRemote(file, nats, line, io);
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
      onContinuation: (continuation) => tell(continuation, io),
    }),
  );
}

/** Says what a continued run keeps and what it runs, before it starts. */
function tell({ continues, runs, job }: Continuation, io: CliIo): void {
  const kept = continues.carried.map((c) => c.stepId);
  io.stderr.write(
    `pge: run ${job.run} of job ${job.id}, continuing run ${continues.runId}: ` +
      `${kept.length === 0 ? 'no step kept' : `kept ${kept.join(', ')}`}; runs ${runs.join(', ')}\n`,
  );
}

/**
 * How long `pge continue --nats <runId>` waits for the next event of the earlier run while it
 * reads them: the run has ended (its closing event is stored), so they are all there.
 */
const READ_TIMEOUT_MS = 10_000;

/**
 * `pge continue --nats <url> <runId|log>`: the earlier run's events from its log, when the argument
 * is a file here, else from the deployment's events stream; the continuation is worked out here
 * (thresholds resolved by this command's configuration) and submitted with the plan, then followed
 * as `pge run --nats` follows a run.
 */
async function continueRemote(from: string, servers: string, line: CommandLine, io: CliIo): Promise<number> {
  const [
    { refuseWorkerFlags, remoteRun },
    { natsOptionsOf },
    { NatsBus },
    { continuationOf, rubricBy },
    { followRun },
    { runLevelEvents },
  ] = await Promise.all([
    import('./remote-run.js'),
    import('./nats-options.js'),
    import('../bus/nats-bus.js'),
    import('../runtime/continue-run.js'),
    import('../runtime/follow-run.js'),
    import('../runtime/run-list.js'),
  ]);
  refuseWorkerFlags(line.flags.options);
  const { options } = resolveConfig({ flags: line.flags, env: io.env, cwd: io.cwd });
  const connection = natsOptionsOf(line.flags, io.env);
  const path = resolve(io.cwd, from);
  let events: RunEvent[];
  if (existsSync(path)) events = await readLogFile(path);
  else {
    if (!ID_PATTERN.test(from))
      throw new ConfigurationError(`"${from}" is neither a log file here nor a run id`);
    const bus = await NatsBus.connect({ ...connection, servers, name: 'pge-continue' });
    try {
      // Its run-level events say at once whether the stream holds the run, and whether it ended.
      const level = await runLevelEvents(bus, from);
      const last = level.at(-1);
      if (last === undefined)
        throw new ConfigurationError(`no run ${from} in the deployment's events stream`);
      if (!isClosingEvent(last))
        throw new ConfigurationError(
          `run ${from} has not ended (its latest run event is ${last.type} at ${last.ts}): continue it once it has ended, or resume it (pge resume --nats) if its coordinator died`,
        );
      const read: RunEvent[] = [];
      const follower = followRun(bus, from, { onEvent: (e) => read.push(e), idleTimeoutMs: READ_TIMEOUT_MS });
      // A stream that stops giving them is the deployment's failure: its BusError exits 3.
      await follower.closing;
      events = read;
    } finally {
      await bus.close();
    }
  }
  const started = events[0];
  const logPath = started?.type === 'run.started' ? started.payload.logPath : path;
  const edited = (options.plan ?? null) as GivenPlan | null;
  const continuation = await continuationOf(events, logPath, edited, rubricBy(options));
  tell(continuation, io);
  const { task, plan, continues, job } = continuation;
  return remoteRun(task, servers, connection, { ...options, plan }, line.flags.json, io, { continues, job });
}
