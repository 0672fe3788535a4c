import { type NatsConnectionOptions, natsOptionsFromEnv } from '../bus/nats-connection.js';
import type { ParsedFlags } from './command-line.js';

/**
 * How a command connects to NATS: the environment's settings (`NATS_URL`, `NATS_CREDS`, …; see
 * `natsOptionsFromEnv`), then its flags: `--creds <file>` takes the place of any credential the
 * environment gives.
 */
export function natsOptionsOf(flags: ParsedFlags, env: NodeJS.ProcessEnv): NatsConnectionOptions {
  const { creds } = flags.values;
  return natsConnection(typeof creds === 'string' ? creds : undefined, env);
}

/** How a command given `--creds <creds>` (or not) connects to NATS, as `natsOptionsOf` says. */
export function natsConnection(creds: string | undefined, env: NodeJS.ProcessEnv): NatsConnectionOptions {
  const options = natsOptionsFromEnv(env);
  if (creds !== undefined && creds !== '') {
    for (const key of ['user', 'pass', 'token', 'nkeyFile'] as const) delete options[key];
    options.credsFile = creds;
  }
  return options;
}
