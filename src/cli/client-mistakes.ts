import { errors as natsErrors } from '@nats-io/transport-node';
import { credentialNatsRole, isCredentialRefused, refusedPermission } from '../bus/nats-credentials.js';
import { causeOf } from '../bus/nats-helpers.js';
import type { NatsRole } from '../bus/permissions.js';
import { errorMessage, exitCodeOfError } from './exit-codes.js';
import type { Command } from './flag-table.js';
import type { CliIo } from './io.js';
import { natsConnection } from './nats-options.js';
import { credentialNoLongerAccepted, credentialOfAnotherRole, permissionRefused } from './worker-mistakes.js';

/**
 * What to do when a command cannot use its NATS server, said where a usage error says to read the
 * help: no server listens at the URL tried, the server asks for a credential and none was given,
 * or the credential given is another role's (the words of `worker-mistakes.ts`, with the command
 * to give the right file to).
 */

/**
 * The credential of `pge nats-config` a command connects with: a worker its role's, a read-only
 * dashboard the observer's (it only reads events), every other command the client's.
 */
function roleOf(command: Command, values: Readonly<Record<string, unknown>>): NatsRole {
  const { role, control } = values;
  if (command === 'worker' && typeof role === 'string') return role as NatsRole;
  return command === 'dashboard' && control !== true ? 'observer' : 'client';
}

const capitalized = (text: string) => `${text.charAt(0).toUpperCase()}${text.slice(1)}.`;

/**
 * Says what to do about `error`, thrown by `pge <command>` whose flags held `values` (by name:
 * `creds`, `role`, `control`), when it is a NATS server refusing the connection or its credential:
 * writes the error and the advice to stderr and returns the exit code; null for any other error.
 */
export async function reportNatsFailure(
  error: unknown,
  command: Command,
  values: Readonly<Record<string, unknown>>,
  io: CliIo,
): Promise<number | null> {
  const advice = await natsAdvice(error, command, values, io);
  if (advice === null) return null;
  io.stderr.write(`pge: ${errorMessage(error)}\n${advice}\n`);
  return exitCodeOfError(error);
}

/** The sentence of `reportNatsFailure` that tells what to do, or null. */
async function natsAdvice(
  error: unknown,
  command: Command,
  values: Readonly<Record<string, unknown>>,
  io: CliIo,
): Promise<string | null> {
  const role = roleOf(command, values);
  const { creds } = values;
  const { credsFile } = natsConnection(typeof creds === 'string' ? creds : undefined, io.env);
  const giveIt = command === 'worker' ? `start the ${role} with` : `give pge ${command} --creds`;
  if (isCredentialRefused(error)) {
    if (credsFile !== undefined) {
      const refusal =
        causeOf(error, natsErrors.AuthorizationError) ??
        causeOf(error, natsErrors.UserAuthenticationExpiredError) ??
        new Error(String(error));
      return capitalized(credentialNoLongerAccepted(role, refusal, credsFile, giveIt));
    }
    return capitalized(
      `the server asks for a credential and none was given: ${giveIt} ${role}.creds of pge nats-config (or NATS_CREDS)`,
    );
  }
  const refused = refusedPermission(error);
  if (refused !== null) {
    const holder = credsFile === undefined ? null : await credentialNatsRole({ credsFile }).catch(() => null);
    return capitalized(
      holder !== null && holder !== role
        ? credentialOfAnotherRole(role, holder, credsFile, giveIt)
        : permissionRefused(role, refused, credsFile, giveIt),
    );
  }
  if (causeOf(error, natsErrors.ConnectionError) !== null)
    return capitalized(
      'no NATS server answers at that URL: start one (nats-server -js, or a secured one: pge nats-config), or give this command the URL of yours with --nats <url> or NATS_URL',
    );
  return null;
}
