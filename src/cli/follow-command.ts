import { Command, Option } from '@commander-js/extra-typings';
import { ConfigurationError } from '../errors.js';
import { ID_PATTERN } from '../schemas/setting-values.js';
import { addTableFlags, configFileOption, optionsGiven } from './flag-options.js';
import { FLAG_GROUPS, FLAGS } from './flag-table.js';
import { integerArgument } from './flag-values.js';
import type { CliIo } from './io.js';
import { credsOption, natsServersOption, serversGiven } from './nats-flags.js';

/**
 * `pge follow <runId> [--nats <url>]`: shows a run of a distributed deployment as `pge run --nats`
 * shows it (`followToEnd`), and exits with the run's exit code when it ends. It is also how
 * `pge run --nats` hands over when it stops following. Declared here whole, as commander takes a
 * command: its own flags typed, `--follow-timeout` and `--verbose` from the flag table (they set
 * options, which `run` shares), and its action; `program.ts` adds the help's prose.
 */

/** `pge follow`, declared: it shows the run; `done` is given the run's exit code. */
export function followCommand(io: CliIo, done: (code: number) => void) {
  const command = new Command('follow')
    .argument('<runId>')
    .addOption(natsServersOption())
    .addOption(credsOption())
    .addOption(
      new Option(
        '--from-seq <n>',
        "Print the run's progress from its event <n> on (the events before still count)",
      )
        .argParser(integerArgument('from-seq'))
        .default(1)
        .helpGroup(`${FLAG_GROUPS.nats}:`),
    );
  addTableFlags(
    command,
    FLAGS.filter((f) => f.name === 'follow-timeout' || f.name === 'verbose'),
  );
  return command
    .addOption(
      new Option('--json', 'Print the result object (lastResult) as JSON on stdout instead').helpGroup(
        `${FLAG_GROUPS.output}:`,
      ),
    )
    .addOption(configFileOption())
    .action(async (runId, flags, parsed) => {
      if (!ID_PATTERN.test(runId))
        throw new ConfigurationError(`"${runId}" is not a run id: run ids hold letters, digits, "-" and "_"`);
      if (flags.fromSeq < 1) throw new ConfigurationError('--from-seq must be >= 1');
      // Loaded once the line is known to be good: the help and a usage error load no NATS client.
      const { resolveConfig } = await import('./config.js');
      const { natsConnection } = await import('./nats-options.js');
      const { NatsBus } = await import('../bus/nats-bus.js');
      const { followDisplayOf, followToEnd } = await import('./follower.js');
      const config = resolveConfig({
        flags: { options: optionsGiven(parsed), configPath: flags.config ?? null },
        env: io.env,
        cwd: io.cwd,
      });
      const servers = serversGiven(flags.nats) ?? io.env.NATS_URL?.trim() ?? '';
      const connection = natsConnection(flags.creds, io.env);
      const bus = await NatsBus.connect({
        ...connection,
        ...(servers ? { servers } : {}),
        name: 'pge-follow',
      });
      try {
        done(
          await followToEnd(
            bus,
            runId,
            followDisplayOf(config.options, {
              json: flags.json === true,
              fromSeq: flags.fromSeq,
              servers: servers || 'nats://127.0.0.1:4222',
              credsFile: connection.credsFile,
            }),
            io,
          ),
        );
      } finally {
        await bus.close();
      }
    });
}
