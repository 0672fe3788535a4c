import { describeConfig, resolveConfig, showLine } from './config.js';
import { CONFIG_FILE_NAME, ENV_VARS } from './defaults.js';
import type { CommandLine } from './flags.js';
import type { CliIo } from './io.js';

/**
 * `pge config [flags]`: the options a `pge run` with the same flags would use, and where each came
 * from. It creates nothing and calls nothing; the API key is shown only as set or not set.
 */

/** `pge config [flags]`. */
export async function configCommand(line: CommandLine, io: CliIo): Promise<number> {
  const config = resolveConfig({ flags: line.flags, env: io.env, cwd: io.cwd });
  const lines = describeConfig(config, io.cwd);
  if (line.flags.json) {
    const options = Object.fromEntries(
      lines.map(({ key, value, ...rest }) => [key, { value: value ?? null, ...rest }]),
    );
    io.stdout.write(`${JSON.stringify({ configFile: config.configFile, options }, null, 2)}\n`);
    return 0;
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
  return 0;
}
