import { Command, Option } from '@commander-js/extra-typings';
import { DEFAULT_PUBLISH_RETRY_MS, DEFAULT_WORKER_CONCURRENCY, ROLES } from '../schemas/setting-values.js';
import { addTableFlags, configFileOption } from './flag-options.js';
import { DEPLOYMENT_FLAGS, FLAG_GROUPS, FLAGS } from './flag-table.js';
import { durationArgument, integerArgument } from './flag-values.js';
import { credsOption, natsServersOption } from './nats-flags.js';
import { formatDuration } from './units.js';

/**
 * The options of `pge worker`, declared as commander takes them: its own typed, the deployment's
 * stream limits and a run's options from the flag table (`run` shares them). Apart from its
 * action (`worker-command.ts`), so that `parseWorkerCommand` reads a line as the command does.
 */

/** The roles a `pge worker` process can take. */
export const WORKER_ROLES = [...ROLES, 'persistence', 'coordinator'] as const;
export type WorkerRole = (typeof WORKER_ROLES)[number];

const NATS = `${FLAG_GROUPS.nats}:`;

/** `pge worker`'s options, declared: the table's, then its own typed. */
export function workerOptions() {
  const command = new Command('worker');
  // The table's first: its sections (Model, …) come before Distributed (NATS) in the help, as in run's.
  addTableFlags(command, [
    ...DEPLOYMENT_FLAGS,
    ...FLAGS.filter((f) => f.group !== 'nats' && f.name !== 'config'),
  ]);
  return command
    .addOption(
      new Option('--role <role>', 'What this process does (required)').choices(WORKER_ROLES).helpGroup(NATS),
    )
    .addOption(
      new Option('--concurrency <n>', 'Requests a role worker handles at once')
        .argParser(integerArgument('concurrency'))
        .default(DEFAULT_WORKER_CONCURRENCY)
        .helpGroup(NATS),
    )
    .addOption(natsServersOption())
    .addOption(credsOption())
    .addOption(
      new Option(
        '--publish-retry <ms>',
        'How long an event, work item or result is sent again while NATS does not acknowledge it, before its publish fails; at most 118s',
      )
        .argParser(durationArgument('publish-retry'))
        .default(DEFAULT_PUBLISH_RETRY_MS, formatDuration(DEFAULT_PUBLISH_RETRY_MS))
        .helpGroup(NATS),
    )
    .addOption(
      new Option('--demo', 'Answer with the built-in demo model (not an AI): no key needed').helpGroup(NATS),
    )
    .addOption(
      new Option('--worker-id <id>', 'Name reported in model-call events (default <role>-<pid>)').helpGroup(
        NATS,
      ),
    )
    .addOption(
      new Option(
        '--workspaces <dir>',
        "Coordinator: the generators' workspaces directory (their <working-dir>/workspaces, on this machine or a shared volume), where a continued run's workspace is copied from the earlier run's (default: <working-dir>/workspaces)",
      ).helpGroup(NATS),
    )
    .addOption(configFileOption());
}

/** What the typed flags of `pge worker` say. */
export type WorkerFlags = ReturnType<ReturnType<typeof workerOptions>['opts']>;
