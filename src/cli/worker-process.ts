import { join, resolve } from 'node:path';
import { resolveOptions, systemPromptsOf, validationOf, WORKSPACES_DIR } from '../api/options.js';
import { buildRoleModel } from '../api/role-models.js';
import { NatsBus } from '../bus/nats-bus.js';
import type { NatsConnectionOptions } from '../bus/nats-connection.js';
import {
  credentialNatsRole,
  isCredentialRefused,
  type RefusedPermission,
  refusedPermission,
} from '../bus/nats-credentials.js';
import { MAX_PUBLISH_RETRY_MS } from '../bus/nats-publish.js';
import { ConfigurationError } from '../errors.js';
import { DemoModel } from '../roles/demo-model.js';
import {
  type StopRole,
  startCoordinatorProcess,
  startPersistenceProcess,
  startRoleWorkerProcess,
} from '../runtime/distributed.js';
import { otlpRequested } from '../telemetry/otlp-env.js';
import { resolveConfig } from './config.js';
import { ExitCode } from './exit-codes.js';
import { optionsGiven } from './flag-options.js';
import type { CliIo } from './io.js';
import { serversGiven } from './nats-flags.js';
import { natsConnection } from './nats-options.js';
import {
  credentialNoLongerAccepted,
  credentialOfAnotherRole,
  permissionRefused,
  Refusals,
} from './worker-mistakes.js';
import { WORKER_ROLES, type WorkerFlags, type WorkerRole, workerOptions } from './worker-options.js';

/**
 * A `pge worker --role <role>` process of the distributed deployment on NATS: it checks what the
 * flags say, connects, starts the role with the distributed composition root
 * (`src/runtime/distributed.ts`) and drains on a signal. SIGINT/SIGTERM drains: requests in flight
 * finish (a second signal hands them back to the queue), then the connection closes. Loaded by
 * the command's action (`worker-command.ts`), once its line is known to be good.
 */

/** Waits for SIGINT or SIGTERM; a second one calls `hurry`. */
function untilSignal(io: CliIo, hurry: () => void): Promise<NodeJS.Signals> {
  return new Promise((resolve) => {
    let seen = false;
    const on = (signal: NodeJS.Signals) => {
      if (seen) return hurry();
      seen = true;
      io.stderr.write(`pge worker: ${signal}: draining (send it again to hand work in flight back)\n`);
      resolve(signal);
    };
    process.on('SIGINT', on);
    process.on('SIGTERM', on);
  });
}

/** What a `pge worker` command line asks for, checked before anything connects. */
export interface WorkerPlan {
  role: WorkerRole;
  demo: boolean;
  concurrency: number;
  /** `--publish-retry`: the `publishRetryMs` of the process's bus. */
  publishRetryMs: number;
  id: string;
  nats: NatsConnectionOptions;
  options: ReturnType<typeof resolveOptions>;
  /**
   * A coordinator's: the generators' workspaces directory, where it copies a continued run's
   * workspace (`--workspaces`, else `<working-dir>/workspaces`, as a generator's with the same
   * `--working-dir`). Null for the other roles.
   */
  workspaces: string | null;
}

/**
 * Checks what a `pge worker` command line says (`flags`, and the run `options` the table's flags
 * given set) with its environment; throws `ConfigurationError` on a bad one. Pure but for the
 * working directory check of the options.
 */
export function workerPlan(
  flags: WorkerFlags,
  given: ReturnType<typeof optionsGiven>,
  io: Pick<CliIo, 'env' | 'cwd'>,
): WorkerPlan {
  const { role } = flags;
  if (role === undefined) throw new ConfigurationError(`pge worker needs --role ${WORKER_ROLES.join('|')}`);
  // PGE_DEMO=1 is --demo for deployments that set flags through the environment (docker compose).
  const demo = flags.demo === true || /^(1|true|yes)$/i.test(io.env.PGE_DEMO ?? '');
  const { concurrency } = flags;
  if (concurrency < 1) throw new ConfigurationError('--concurrency must be >= 1');
  const config = resolveConfig({
    flags: { options: given, configPath: flags.config ?? null },
    env: io.env,
    cwd: io.cwd,
  });
  const options = resolveOptions({ ...config.options, verbose: false });
  const nats = natsConnection(flags.creds, io.env);
  const servers = serversGiven(flags.nats);
  if (servers) nats.servers = servers;
  const id = flags.workerId ?? `${role}-${process.pid}`;
  const publishRetryMs = flags.publishRetry;
  if (publishRetryMs < 1 || publishRetryMs > MAX_PUBLISH_RETRY_MS)
    throw new ConfigurationError(
      `--publish-retry must be between 1ms and ${MAX_PUBLISH_RETRY_MS / 1000}s (within the streams' duplicate window)`,
    );
  const workspacesGiven = flags.workspaces;
  if (workspacesGiven !== undefined && role !== 'coordinator')
    throw new ConfigurationError(
      `--workspaces is the coordinator's (where it copies a continued run's workspace): a ${role} worker keeps runs' workspaces under --working-dir`,
    );
  const workspaces =
    role !== 'coordinator'
      ? null
      : workspacesGiven !== undefined
        ? resolve(io.cwd, workspacesGiven)
        : join(options.workingDirectory, WORKSPACES_DIR);
  return { role, demo, concurrency, publishRetryMs, id, nats, options, workspaces };
}

/** Reads and checks a `pge worker` command line (the arguments after `worker`), as the command does. */
export function parseWorkerCommand(argv: readonly string[], io: Pick<CliIo, 'env' | 'cwd'>): WorkerPlan {
  const parsed = workerOptions()
    .exitOverride()
    .parse([...argv], { from: 'user' });
  return workerPlan(parsed.opts(), optionsGiven(parsed), io);
}

/** Runs the worker `plan` says; returns its exit code when the process has drained. */
export async function runWorker(plan: WorkerPlan, io: CliIo): Promise<number> {
  const { role, publishRetryMs, id, nats, options } = plan;
  const say = (sentence: string) => io.stderr.write(`pge worker ${role} (${id}): ${sentence}\n`);
  // Another role's credential is told before anything connects: its refusals would say less.
  const holder = await credentialNatsRole(nats);
  if (holder !== null && holder !== role) {
    say(credentialOfAnotherRole(role, holder, nats.credsFile));
    return ExitCode.usage;
  }
  // The first thing the server refuses this role ends the process: retrying is refused as well.
  const refusals = new Refusals();
  let bus: NatsBus;
  try {
    bus = await NatsBus.connect({
      ...nats,
      name: `pge-${id}`,
      publishRetryMs,
      // Its reports of refused messages go out on its role's subject, with or without a credential.
      reporter: role,
      // Every worker applies the deployment's stream limits; clients that only follow runs do not.
      streamMaxAgeMs: options.streamMaxAgeMs,
      streamMaxBytes: options.streamMaxBytes,
      ...(options.replicas === undefined ? {} : { replicas: options.replicas }),
      onHandlerError: (error, subject) => refusals.report(error, subject),
    });
  } catch (error) {
    const refused = refusedPermission(error);
    if (refused === null) throw error;
    say(permissionRefused(role, refused, nats.credsFile));
    return ExitCode.usage;
  }

  const started = await startOrRefusal(plan, bus, io, refusals);
  if ('refused' in started) {
    say(permissionRefused(role, started.refused, nats.credsFile));
    await bus.close();
    return ExitCode.usage;
  }
  const { stop } = started;
  io.stderr.write(`pge worker ${role} ready (${id}) on ${nats.servers ?? 'nats://127.0.0.1:4222'}\n`);
  let hurried = false;
  // The client reconnects through any outage; it gives up only when the server refuses it (a
  // revoked credential, say). A worker with no connection left exits, so that its supervisor
  // (docker's restart policy, systemd) starts it again, with the credential it has now.
  const lost = bus.connection
    .closed()
    .then((error) => ({ lost: error ?? new Error('closed by the server') }));
  const signalled = untilSignal(io, () => {
    hurried = true;
    void stop(true);
  }).then(() => null);
  const gone = await Promise.race([signalled, lost, refusals.first]);
  if (gone === null) {
    await stop(hurried);
    await bus.close();
    io.stderr.write(`pge worker ${role} (${id}) stopped\n`);
    return 0;
  }
  if ('lost' in gone) {
    say(
      isCredentialRefused(gone.lost)
        ? credentialNoLongerAccepted(role, gone.lost, nats.credsFile)
        : `the NATS connection is gone for good: ${gone.lost.message}`,
    );
  } else {
    say(permissionRefused(role, gone, nats.credsFile));
  }
  await stop(true).catch(() => undefined);
  await bus.close();
  return 'lost' in gone ? ExitCode.model : ExitCode.usage;
}

/**
 * Starts the role and flushes (see `startRole`), or returns the first permission the server
 * refused meanwhile: a refusal of its consumer's info, say, would hold the start for ever. A start
 * that throws closes the bus, and an error that is no refusal is thrown again.
 */
async function startOrRefusal(
  plan: WorkerPlan,
  bus: NatsBus,
  io: CliIo,
  refusals: Refusals,
): Promise<{ stop: StopRole } | { refused: RefusedPermission }> {
  const starting = (async () => {
    const stop = await startRole(plan, bus, io);
    // "ready" means the server knows this process's subscriptions: a submission sent now is taken.
    await bus.flush();
    return { stop };
  })();
  try {
    const first = await Promise.race([starting, refusals.first.then((refused) => ({ refused }))]);
    if ('stop' in first) return first;
    // Left behind, the start fails once the bus is closed: the refusal is what is said.
    starting.then(({ stop }) => stop(true)).catch(() => undefined);
    return first;
  } catch (error) {
    // A role that cannot start (no API key, say) ends the process: its connection must not hold it.
    await bus.close().catch(() => undefined);
    const refused = refusedPermission(error);
    if (refused === null) throw error;
    return { refused };
  }
}

/** Starts what `role` does on `bus` (`src/runtime/distributed.ts`); returns how to stop it. */
async function startRole(plan: WorkerPlan, bus: NatsBus, io: CliIo): Promise<StopRole> {
  const { role, demo, concurrency, publishRetryMs, id, options } = plan;
  const log = (line: string) => io.stderr.write(`${line}\n`);
  // Spans over OTLP when the environment asks for it: a coordinator's of the runs it drives, a
  // role worker's of the requests it serves (in the trace each work item names).
  const otlp =
    otlpRequested(io.env) && role !== 'persistence'
      ? (await import('../telemetry/otlp.js')).otlpTracer()
      : null;
  const base = { bus, id, log, otlp };
  if (role === 'persistence')
    return startPersistenceProcess({ ...base, workingDirectory: options.workingDirectory });
  if (role === 'coordinator')
    // The models are the role workers': each says which serves it, and run.started names those.
    return startCoordinatorProcess({
      ...base,
      settings: options,
      ...(plan.workspaces === null ? {} : { workspaces: plan.workspaces }),
      ...(options.replicas === undefined ? {} : { replicas: options.replicas }),
    });
  const systemPrompt = systemPromptsOf(options)[role];
  return startRoleWorkerProcess({
    ...base,
    role,
    model: demo ? new DemoModel() : buildRoleModel(options, role),
    concurrency,
    maxRepairs: options.maxRepairs,
    publishRetryMs,
    // A tool runs where its role's worker runs: the workspaces are on this machine.
    ...(options.tools
      ? { workspaces: { root: join(options.workingDirectory, WORKSPACES_DIR), images: options.images } }
      : {}),
    mcpServers: options.mcpServers,
    ...(systemPrompt === undefined ? {} : { systemPrompt }),
    ...(role === 'generator' ? { validation: validationOf(options) } : {}),
  });
}
