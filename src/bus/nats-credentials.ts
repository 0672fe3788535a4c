import { errors as natsErrors } from '@nats-io/transport-node';
import { credentialRoleOf, type NatsConnectionOptions } from './nats-connection.js';
import { causeOf, hasCause } from './nats-helpers.js';
import { NATS_ROLES, type NatsRole } from './permissions.js';

/**
 * What a NATS server's refusals of a process's credential mean, for the one sentence a process
 * says before it exits: the credential is another role's, the server refuses something its role
 * must do, or the server no longer accepts the credential at all (revoked, expired).
 */

/** Something the server refused a connection: publishing or subscribing to `subject`. */
export interface RefusedPermission {
  operation: 'publish' | 'subscription';
  subject: string;
}

/**
 * Making or changing a stream or a consumer: every role but the coordinator tries at start and,
 * refused, uses the coordinator's (`ensureStreams`, `ensurePullConsumer`): not a mistake.
 */
const UPKEEP = /^\$JS\.API\.(STREAM\.(CREATE|UPDATE)|CONSUMER\.(CREATE|DURABLE\.CREATE))\./;

/**
 * The permission the server refused in `error` (a `PermissionViolationError` among its causes),
 * or null; null too for the upkeep a process of any role tries and does without (`UPKEEP`).
 */
export function refusedPermission(error: unknown): RefusedPermission | null {
  const violation = causeOf(error, natsErrors.PermissionViolationError);
  if (violation === null || UPKEEP.test(violation.subject)) return null;
  return { operation: violation.operation, subject: violation.subject };
}

/**
 * True when the server refused the connection's credential itself (an `Authorization Violation`,
 * as a revoked credential gets when the server reloads its accounts, or a JWT that expired): the
 * process cannot go on with it, and reconnecting will not help.
 */
export function isCredentialRefused(error: unknown): boolean {
  return (
    hasCause(error, natsErrors.AuthorizationError) ||
    hasCause(error, natsErrors.UserAuthenticationExpiredError)
  );
}

/**
 * The role of `pge nats-config` a connection's credential was issued for (its private inbox names
 * it: `credentialRoleOf`), or null when the credential is none of pge's roles'.
 */
export async function credentialNatsRole(options: NatsConnectionOptions): Promise<NatsRole | null> {
  const role = await credentialRoleOf(options);
  return NATS_ROLES.find((known) => known === role) ?? null;
}
