import { Option } from '@commander-js/extra-typings';
import { CREDS_FLAG, FLAG_GROUPS } from './flag-table.js';

/**
 * The typed options of the commands declared whole that reach a NATS deployment (`follow`, `runs`,
 * `approvals`, `approve`, `cancel`): its servers and the credential to connect with, and where
 * those that list runs read the embedded runs without one.
 */

const NATS_GROUP = `${FLAG_GROUPS.nats}:`;

/** `--nats <url>`, repeatable: the servers of a cluster, one flag each or comma-separated. */
export const natsServersOption = (
  help = 'NATS server(s) of the deployment: repeatable, or comma-separated (default NATS_URL, else nats://127.0.0.1:4222)',
) =>
  new Option('--nats <url>', help)
    .argParser((url: string, before: string[] | undefined) => [...(before ?? []), url])
    .helpGroup(NATS_GROUP);

/** `--creds <file>`: a role's credential, as `pge nats-config` writes them. */
export const credsOption = () => new Option('--creds <file>', CREDS_FLAG.help).helpGroup(NATS_GROUP);

/** The servers `--nats` gave, as nats.js and NATS_URL take them (comma-separated), else null. */
export const serversGiven = (nats: readonly string[] | undefined): string | null => nats?.join(',') ?? null;

/** `--nats` of `pge runs` and `pge approvals`: without it (or NATS_URL), they read the embedded runs' logs. */
export const listingServersOption = () =>
  natsServersOption(
    'NATS server(s) of the deployment: repeatable, or comma-separated (default NATS_URL, else the embedded runs of --working-dir)',
  );

/** `--working-dir <dir>` of `pge runs` and `pge approvals`: where they read the embedded runs. */
export const embeddedLogsOption = () =>
  new Option(
    '--working-dir <dir>',
    'Without --nats or NATS_URL: the directory whose logs hold the embedded runs (default: the current one)',
  ).helpGroup(`${FLAG_GROUPS.output}:`);
