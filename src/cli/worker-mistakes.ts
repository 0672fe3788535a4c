import { reportToConsole } from '../bus/bus.js';
import { type RefusedPermission, refusedPermission } from '../bus/nats-credentials.js';
import type { NatsRole } from '../bus/permissions.js';

/**
 * The one sentence a `pge worker` says when its credential cannot serve its role, and exits on:
 * a retry would be refused the same, and a loop of stack traces would hide the cause (docs/security.md,
 * "Troubleshooting"). Another role's credential, or a refusal of what its role must do, is a
 * mistake in the command (exit 2); a credential the server stopped accepting ends a worker that
 * was running (exit 3), for its supervisor to start it again with the current one.
 */

const named = (credsFile: string | undefined) => (credsFile === undefined ? '' : ` (${credsFile})`);

/**
 * How the process is given its role's credential, before the file's name: a worker is started
 * with it; a client command (`pge run`, `pge runs`, …) names its own (`client-mistakes.ts`).
 */
const startWith = (role: NatsRole) => `start the ${role} with`;

/** Its credential is `holder`'s (as `pge nats-config` issued it), not its role's. */
export function credentialOfAnotherRole(
  role: NatsRole,
  holder: NatsRole,
  credsFile?: string,
  giveIt = startWith(role),
): string {
  return `this credential${named(credsFile)} is for the ${holder}, not the ${role}: ${giveIt} ${role}.creds of pge nats-config`;
}

/**
 * The server refused something a process of `role` must do: its credential is not a `role`'s, or
 * it was issued before the role needed it (docs/security.md: rotate after upgrading pge).
 */
export function permissionRefused(
  role: NatsRole,
  refused: RefusedPermission,
  credsFile?: string,
  giveIt = startWith(role),
): string {
  const what = refused.operation === 'publish' ? 'publish to' : 'subscribe to';
  return `the server does not let this credential${named(credsFile)} ${what} ${refused.subject}, which the ${role} must: it is another role's, or was issued by an earlier pge; ${giveIt} ${role}.creds of pge nats-config (--rotate after an upgrade)`;
}

/** The server closed the connection refusing the credential itself: revoked, expired, or another server's. */
export function credentialNoLongerAccepted(
  role: NatsRole,
  error: Error,
  credsFile?: string,
  giveIt = startWith(role),
): string {
  return `the server no longer accepts this credential${named(credsFile)} (${error.message}): it was revoked (pge nats-config --rotate) or is not this server's; ${giveIt} its current ${role}.creds`;
}

/**
 * The bus's reports of a worker: the first permission the server refuses is kept (`first`), and
 * said once; anything else goes to the console as before.
 */
export class Refusals {
  readonly first: Promise<RefusedPermission>;
  #resolve: (refused: RefusedPermission) => void = () => undefined;

  constructor() {
    this.first = new Promise((resolve) => {
      this.#resolve = resolve;
    });
  }

  #refused = false;

  /**
   * The bus's `onHandlerError`. After a refusal, what fails is its consequence (a close that cannot
   * flush what a consumer never took): the refusal alone is said.
   */
  report(error: unknown, subject: string): void {
    const refused = refusedPermission(error);
    if (refused !== null) {
      this.#refused = true;
      this.#resolve(refused);
    } else if (!this.#refused) {
      reportToConsole(error, subject);
    }
  }
}
