import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { type PgeOptions, workingDirectoryOf } from '../api/options.js';
import { NatsBus } from '../bus/nats-bus.js';
import { ConfigurationError } from '../errors.js';
import { DemoModel, titledDeliverable } from '../roles/demo-model.js';
import { readCrashedLog } from '../runtime/crashed-log.js';
import { runClient } from '../runtime/run-client.js';
import type { Role, RunEvent, RunEventOf } from '../schemas/index.js';
import { ID_PATTERN } from '../schemas/setting-values.js';
import { RESUME_ACTING_FLAGS } from './command-flags.js';
import type { CommandLine } from './command-line.js';
import { resolveConfig } from './config.js';
import { FLAGS } from './flag-table.js';
import { followDisplayOf, followToEnd } from './follower.js';
import type { CliIo } from './io.js';
import { natsOptionsOf } from './nats-options.js';
import { reportRun } from './run-command.js';

/**
 * `pge resume <log-file>`: continues a run whose process died, from its log, in the same file
 * (`PlannerGeneratorEvaluator.resume`). The run's settings are the ones its log recorded; the
 * models are the log's too, unless a flag, the environment or a config file names them (the
 * harness then refuses other names). The workspace tools and the validators are this process's
 * (`--no-tools`, `--validate`), and must be those the log recorded; the working directory is the
 * run's, from its log, unless given. A run of `pge demo` resumes with the demo model and the
 * demo's validator.
 */

const ROLES: readonly Role[] = ['planner', 'generator', 'evaluator'];
const MODEL_OPTION = {
  planner: 'plannerModelName',
  generator: 'generatorModelName',
  evaluator: 'evaluatorModelName',
} as const satisfies Record<Role, keyof PgeOptions>;

/**
 * The events of the log at `path`, read before the harness is built (which may refuse first for
 * want of an API key): `ResumeError` says why it cannot be read, as `resume` and `fork` would.
 */
export async function recordedEvents(
  path: string,
  verb: 'resume' | 'fork' | 'continue',
): Promise<RunEvent[]> {
  return (await readCrashedLog(path, verb)).tail.events;
}

/**
 * The options to resume (or fork) the run that `started` opened: the log's model names fill in
 * those the configuration leaves open. A run of `pge demo` goes on as `pge demo` runs: from the
 * flags alone (no config file, no environment), with the demo model and, unless validators are
 * given, the demo's validator.
 */
export function optionsForRecordedRun(
  line: CommandLine,
  io: CliIo,
  started: RunEventOf<'run.started'> | null,
): PgeOptions {
  const recorded = started?.payload.settings.models;
  const demo = new DemoModel();
  const ofDemo = recorded !== undefined && ROLES.every((role) => recorded[role] === demo.name);
  const { options } = resolveConfig({ flags: line.flags, env: io.env, cwd: io.cwd, flagsOnly: ofDemo });
  if (recorded === undefined) return options;
  if (ofDemo) {
    const validators = options.validators?.length ? options.validators : [titledDeliverable];
    return { ...options, plannerAgent: demo, generatorAgent: demo, evaluatorAgent: demo, validators };
  }
  const names: PgeOptions = { ...options };
  for (const role of ROLES) names[MODEL_OPTION[role]] ??= options.modelName ?? recorded[role];
  return names;
}

/**
 * `pge resume --nats <url> <runId>`: asks the deployment to take a run over now (a coordinator
 * takes it unless a live one drives it; see docs/distributed.md), then follows it to its end.
 */
async function resumeRemote(runId: string, servers: string, line: CommandLine, io: CliIo): Promise<number> {
  if (!ID_PATTERN.test(runId))
    throw new ConfigurationError(`"${runId}" is not a run id: run ids hold letters, digits, "-" and "_"`);
  const config = resolveConfig({ flags: line.flags, env: io.env, cwd: io.cwd });
  const connection = natsOptionsOf(line.flags, io.env);
  const bus = await NatsBus.connect({ ...connection, servers, name: 'pge-resume' });
  try {
    const reply = await runClient(bus, () => bus.close()).resume(runId);
    io.stderr.write(
      reply.takenOver
        ? `pge: run ${runId} taken over by coordinator ${reply.owner}\n`
        : `pge: run ${runId} is driven by coordinator ${reply.owner}, which is alive\n`,
    );
    return await followToEnd(
      bus,
      runId,
      followDisplayOf(config.options, {
        json: line.flags.json,
        fromSeq: 1,
        servers,
        credsFile: connection.credsFile,
      }),
      io,
    );
  } finally {
    await bus.close();
  }
}

/** `pge resume <log-file> [flags]`, or `pge resume --nats <url> <runId>`. */
export async function resumeCommand(line: CommandLine, io: CliIo): Promise<number> {
  const file = line.positionals[0]!;
  if (line.flags.nats !== null) {
    // A deployment's run has the tools, validators and workspaces of its workers: the flags that
    // give a local resume its own are refused (one named per option: the MCP flags share theirs).
    const workers = [
      ...new Map(
        FLAGS.filter((f) => RESUME_ACTING_FLAGS.includes(f.name))
          .filter((f) => f.option !== undefined && line.flags.options[f.option] !== undefined)
          .map((f) => [f.option, `--${f.name}`]),
      ).values(),
    ];
    if (workers.length > 0)
      throw new ConfigurationError(
        `${workers.join(', ')}: the workers of a deployment have their own; give them to \`pge worker\`, not to \`pge resume --nats\``,
      );
    return resumeRemote(file, line.flags.nats, line, io);
  }
  const path = resolve(io.cwd, file);
  const events = await recordedEvents(path, 'resume');
  const started = events[0]?.type === 'run.started' ? events[0] : null;
  const options = optionsForRecordedRun(line, io, started);
  // The run's workspace is where its log says, unless a working directory is given or it was moved.
  const acting = started?.payload.settings.acting;
  if (acting !== undefined && existsSync(acting.workspace))
    options.workingDirectory ??= workingDirectoryOf(acting);
  return reportRun('resume', options, line.flags.json, io, ({ pge, progress }) => {
    // The status line counts what the log already holds: its steps, tokens and cost.
    progress.resumeFrom(events);
    return pge.resume(path);
  });
}
