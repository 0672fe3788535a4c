import { Command, Option } from '@commander-js/extra-typings';
import { CONFIG_FILE_NAME, ENV_VARS } from './defaults.js';
import { addTableFlags, configFileOption, LOCAL_RUN_FLAGS, optionsGiven } from './flag-options.js';
import { FLAG_GROUPS } from './flag-table.js';
import type { CliIo } from './io.js';

/**
 * `pge config [flags]`: the options a `pge run` with the same flags would use, and where each came
 * from. It creates nothing and calls nothing; the API key is shown only as set or not set. Declared
 * here whole, as commander takes a command: the flags of a run's options from the flag table
 * (which `run` shares), its own typed, and its action; `program.ts` adds the help's prose.
 */

/** `pge config`, declared: it writes the options and their sources to `io.stdout`. */
export function configCommand(io: CliIo) {
  const command = new Command('config');
  addTableFlags(command, LOCAL_RUN_FLAGS);
  return command
    .addOption(
      new Option(
        '--json',
        "Print the options as JSON on stdout: the config file read, and each option's value and source",
      ).helpGroup(`${FLAG_GROUPS.output}:`),
    )
    .addOption(configFileOption())
    .action(async ({ json, config: configPath }, parsed) => {
      // Loaded here: the help and a usage error answer without zod and the option schema.
      const { describeConfig, resolveConfig, showLine } = await import('./config.js');
      const config = resolveConfig({
        flags: { options: optionsGiven(parsed), configPath: configPath ?? null },
        env: io.env,
        cwd: io.cwd,
      });
      const lines = describeConfig(config, io.cwd);
      if (json) {
        const options = Object.fromEntries(
          lines.map(({ key, value, ...rest }) => [key, { value: value ?? null, ...rest }]),
        );
        io.stdout.write(`${JSON.stringify({ configFile: config.configFile, options }, null, 2)}\n`);
        return;
      }
      const file = config.configFile ?? `none (no ${CONFIG_FILE_NAME} in ${io.cwd})`;
      const env = ENV_VARS.map(([name]) => `${name}${io.env[name] ? ' (set)' : ''}`).join(', ');
      io.stdout.write(
        [
          `Config file: ${file}`,
          `Environment: ${env}`,
          'Precedence: flag > env > config file > default',
          '',
          ...lines.map(showLine),
          '',
        ].join('\n'),
      );
    });
}
