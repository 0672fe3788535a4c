import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { beforeEach, describe, expect, it } from 'vitest';
import { publishEvent, serveWork } from '../../src/bus/channels.js';
import { NatsBus } from '../../src/bus/nats-bus.js';
import { connectNats, natsOptionsFromEnv } from '../../src/bus/nats-connection.js';
import { UNSERVED_MOVE_MS } from '../../src/bus/nats-helpers.js';
import { readStored } from '../../src/bus/nats-stored.js';
import { EVENTS_STREAM, PGE_STREAMS, streamOf, WORK_STREAM } from '../../src/bus/nats-streams.js';
import type { NatsRole } from '../../src/bus/permissions.js';
import { LEASE_BUCKET, RunLeases, readRunLeases } from '../../src/bus/run-leases.js';
import { workerQueue } from '../../src/bus/subjects.js';
import { readLog } from '../../src/persistence/index.js';
import type { RunEvent } from '../../src/schemas/index.js';
import { freshRunId, runStarted } from '../bus/bus-contract.js';
import { closed, passingAnswer, submitRun, until } from '../support/deployment.js';
import { type FakeOpenAI, startFakeOpenAI } from '../support/fake-openai-server.js';
import {
  CLUSTER_START_MS,
  type SecuredNatsCluster,
  startSecuredNatsCluster,
} from '../support/nats-cluster.js';
import type { NatsServerHandle } from '../support/nats-server.js';
import { type PgeProcess, startPge } from '../support/processes.js';
import { schemaOf } from '../support/scripted-deployment.js';
import { describeStuckRun, seqsUpTo, storedEvents } from '../support/stored-events.js';

/**
 * pge on a JetStream cluster of three real nats-servers on loopback (routes between them, the
 * files of `pge nats-config --cluster 3`, each process with its role's credential): its streams
 * and lease bucket kept by all three, and a server SIGKILLed, frozen or cut off by a partition
 * mid-run, with several runs in flight, costing them a pause only.
 */

let cluster: SecuredNatsCluster;
let openai: FakeOpenAI;
let logs: string;
const processes: PgeProcess[] = [];
/** Submissions through server losses: waves of clients, a server SIGKILLed in each. */
const WAVES = 4;
const PER_WAVE = 5;
/**
 * How long a wave's runs may take to end after its server loss: about 15 s when nothing stalls,
 * and a work item the server lost is sent again at its coordinator's second look, 120 s after
 * it was asked (distributed.md, "Publishing through outages").
 */
const WAVE_MS = 150_000;
/** How long the stream may take to answer a read after the last server loss (its elections). */
const READ_AFTER_LOSS_MS = 45_000;

/** The task a `pge run <task> …` client submitted. */
const taskOf = (client: PgeProcess): string => client.child.spawnargs[3] ?? '';

beforeEach(async () => {
  // The cluster first: one that does not come up has stopped its servers, and nothing else is started.
  cluster = await startSecuredNatsCluster(3);
  openai = await startFakeOpenAI();
  logs = mkdtempSync(join(tmpdir(), 'pge-cluster-'));
  return async () => {
    await Promise.all(processes.splice(0).map((p) => p.stop('SIGKILL')));
    await openai.close();
    await cluster.stop();
    rmSync(logs, { recursive: true, force: true });
    // Every process did its job within its credential.
    expect(cluster.refusals()).toEqual([]);
  };
}, CLUSTER_START_MS);

/** Starts `pge worker --role <role>` on every server (or on `only`) with 3 replicas, ready. */
async function worker(role: NatsRole, only?: NatsServerHandle, ...extra: string[]): Promise<PgeProcess> {
  const process = startPge(['worker', '--role', role, '--replicas', '3', '--working-dir', logs, ...extra], {
    ...cluster.env(role, only),
    OPENAI_BASE_URL: openai.url,
    OPENAI_API_KEY: 'sk-test-cluster',
    PGE_MODEL: 'test-model',
  });
  processes.push(process);
  await process.waitFor(/ready/, 30_000);
  return process;
}

describe('pge on a three-server JetStream cluster', () => {
  it('keeps its streams and its lease bucket on all three servers', async () => {
    await worker('coordinator');
    const nc = await connect(cluster.connectOptions('admin'));
    try {
      const jsm = await jetstreamManager(nc);
      for (const name of [...PGE_STREAMS.map((s) => s.name), `KV_${LEASE_BUCKET}`]) {
        const info = await jsm.streams.info(name);
        expect(info.config.num_replicas, name).toBe(3);
        // pge reads the lease bucket from its leader only (a direct get may reach a lagging replica).
        if (name === `KV_${LEASE_BUCKET}`) expect(info.config.allow_direct, name).toBe(false);
        // The leader and two current replicas.
        expect(info.cluster?.leader, name).toMatch(/^pge-[123]$/);
        expect(
          info.cluster?.replicas?.filter((r) => r.current),
          name,
        ).toHaveLength(2);
      }
    } finally {
      await nc.close();
    }
  });

  it('has a process started while the cluster has no quorum wait for it, not exit', async () => {
    // Two of three servers down: JetStream cannot elect a leader, and its API does not answer.
    await Promise.all([cluster.servers[1]!.kill(), cluster.servers[2]!.kill()]);
    const coordinator = startPge(['worker', '--role', 'coordinator', '--replicas', '3'], {
      ...cluster.env('coordinator', cluster.servers[0]),
    });
    processes.push(coordinator);
    await sleep(4_000);
    expect(coordinator.child.exitCode).toBeNull();
    expect(coordinator.stderr()).not.toMatch(/ready/);
    await Promise.all([cluster.servers[1]!.restart(), cluster.servers[2]!.restart()]);
    await coordinator.waitFor(/ready/, 45_000);
    const nc = await connect(cluster.connectOptions('admin'));
    try {
      expect((await (await jetstreamManager(nc)).streams.info(EVENTS_STREAM)).config.num_replicas).toBe(3);
    } finally {
      await nc.close();
    }
  }, 90_000);

  it('takes a connection off a server that stops answering to another server of the cluster within its ping interval', async () => {
    const nc = await connectNats({ ...natsOptionsFromEnv(cluster.env('coordinator')), pingIntervalMs: 500 });
    const port = nc.info?.port;
    const frozen = cluster.servers.find((server) => server.port === port)!;
    try {
      frozen.freeze();
      // Two pings unanswered (1 to 1.5 s), then a reconnect to a server that answers; a try of the
      // frozen one again (nats.js may pick it) costs a connect timeout (5 s). With pge's default
      // interval (10 s), or nats.js's own (2 minutes), it would take far longer.
      await until(
        () => nc.info?.port,
        (now) => now !== undefined && now !== port,
        'a reconnect to another server',
        10_000,
      );
      await nc.flush();
    } finally {
      frozen.thaw();
      await nc.close();
    }
  });

  it('moves a process whose publishes its server answers "no responders" for 10 s to another server of the cluster', async () => {
    const { bus, reported } = await busOn('coordinator', cluster.servers[0]!, 3);
    const admin = await connect(cluster.connectOptions('admin'));
    try {
      // Without the events' stream every server answers "no responders" to an event, as a server
      // can alone after a pause or a partition; the one the bus is on is what the test watches.
      const jsm = await jetstreamManager(admin);
      const { config } = await jsm.streams.info(EVENTS_STREAM);
      await jsm.streams.delete(EVENTS_STREAM);
      const runId = freshRunId();
      const since = Date.now();
      const published = publishEvent(bus, runStarted(runId));
      await expectMovedOff(bus, cluster.servers[0]!, reported, since, 'publishes');
      // The next server serves nothing either: the next move waits twice as long (20 s).
      await sleep(15_000);
      expect(reported.filter((report) => report.includes('moving to another server'))).toHaveLength(1);
      // The publish goes on from the new server and is stored once its stream answers.
      await jsm.streams.add(config);
      await published;
      expect(await storedEvents(cluster.connectOptions('client'), `pge.run.${runId}.evt.>`)).toHaveLength(1);
    } finally {
      await bus.close();
      await admin.close();
    }
  }, 120_000);

  it('moves a worker whose pulls its server leaves unserved for 10 s to another server of the cluster', async () => {
    // The work queue kept by one server only (one replica), frozen: the worker's server answers it,
    // but forwards its pulls to a server that serves none (no heartbeat comes).
    const coordinator = await NatsBus.connect({
      ...natsOptionsFromEnv(cluster.env('coordinator')),
      replicas: 1,
    });
    const admin = await connect(cluster.connectOptions('admin'));
    const consumer = await (await jetstreamManager(admin)).consumers.info(
      WORK_STREAM,
      workerQueue('generator'),
    );
    await admin.close();
    const keeper = cluster.named(consumer.cluster!.leader!);
    const on = cluster.servers.find((server) => server !== keeper)!;
    const { bus, reported } = await busOn('generator', on);
    try {
      const served = serveWork(bus, 'generator', async () => undefined);
      await bus.flush();
      keeper.freeze();
      await expectMovedOff(bus, on, reported, Date.now(), 'pulls');
      served.unsubscribe();
    } finally {
      keeper.thaw();
      await bus.close();
      await coordinator.close();
    }
  }, 90_000);

  it('has a worker ask whether a run is live again while the lease bucket has no leader, not fail', async () => {
    const admin = await connect(cluster.connectOptions('admin'));
    const leases = await RunLeases.open(admin, {
      owner: 'coordinator-1',
      replicas: 3,
      onExpired: () => undefined,
      onLost: () => undefined,
    });
    const [kept, ...lost] = cluster.servers;
    const worker = await connect({ ...cluster.connectOptions('generator'), servers: kept!.url });
    try {
      expect(await leases.claim('run-through-an-election')).toBe(true);
      // Asked again for up to 60 s: the 15 s outage, the restarts and an election, which take
      // seconds more on a loaded machine (CI once went past 30 s).
      const isLiveRun = await readRunLeases(worker, 60_000);
      expect(await isLiveRun('run-through-an-election')).toBe(true);
      // Two of three servers gone: the bucket's stream has no leader. The one left answers a lookup
      // not at all at first, then (after some seconds) with 503, JetStream temporarily unavailable:
      // both are asked again until the servers are back. With a 503 taken as final, this fails.
      await Promise.all(lost.map((server) => server.kill()));
      const asked = isLiveRun('run-through-an-election');
      await sleep(15_000);
      await Promise.all(lost.map((server) => server.restart()));
      expect(await asked).toBe(true);
    } finally {
      leases.stop();
      await worker.close();
      await admin.close();
    }
  }, 90_000);

  it('reads a stream from its leader, so a replica that stops answering delays no read', async () => {
    await worker('coordinator');
    const admin = await connect(cluster.connectOptions('admin'));
    const adminJsm = await jetstreamManager(admin);
    const js = jetstream(admin);
    for (let i = 1; i <= 30; i++) await js.publish(`pge.run.r1.evt.step.n${i}`, `${i}`);
    const { leader, replicas } = (await adminJsm.streams.info(EVENTS_STREAM)).cluster!;
    await admin.close();
    // A replica that is not the leader: no leader is elected, so only reads that went to the
    // frozen replica (direct gets, which any replica answers) would fail.
    const frozen = cluster.named(replicas!.find((r) => r.name !== leader)!.name);
    const reader = await connect({
      ...cluster.connectOptions('client'),
      servers: cluster.named(leader!).url,
    });
    // Made first: it asks for the account's JetStream info, which the metadata leader answers.
    const jsm = await jetstreamManager(reader, { timeout: 2_000 });
    frozen.freeze();
    try {
      const read = await readStored(jsm, streamOf('pge.run.r1.evt.>')!, 'pge.run.r1.evt.>');
      expect(read.map((m) => new TextDecoder().decode(m.data))).toEqual(seqsUpTo(30).map(String));
    } finally {
      frozen.thaw();
      await reader.close();
    }
  });

  it('loses no run and no event when the leader of PGE_EVENTS is SIGKILLed with runs in flight', async () => {
    const { lost, runIds } = await runsInFlight('a lost server');
    await lost.kill();
    const applied = await expectEveryRunWhole(runIds, Date.now());
    // At most the calls in flight at the kill, one per run, were made twice.
    expect(openai.completions().length - applied).toBeLessThanOrEqual(runIds.length);
  }, 180_000);

  it('loses no run and no event when the leader of PGE_EVENTS stops answering for a while with runs in flight', async () => {
    // The server hangs (SIGSTOP): it keeps its connections, so only pings and unserved pulls tell
    // the processes on it; once thawed it may leave JetStream unserved a while, and they move.
    const { lost, runIds } = await runsInFlight('a frozen server');
    lost.freeze();
    const frozenAt = Date.now();
    await sleep(15_000);
    lost.thaw();
    const applied = await expectEveryRunWhole(runIds, frozenAt);
    expect(openai.completions().length - applied).toBeLessThanOrEqual(PAUSE_REPEATS * runIds.length);
  }, 240_000);

  it(
    'loses no run and no event when the leader of PGE_EVENTS is cut off from the others for a while with runs in flight',
    async () => {
      // A partition: the server runs on and keeps its clients (the only generator among them), but
      // its routes to the two others are cut, and cannot be made again, until the network heals.
      // Routes through relays, so that the test can cut one server off from the others.
      await cluster.stop();
      cluster = await startSecuredNatsCluster(3, { partitionable: true });
      const { lost, leader, runIds } = await runsInFlight('a partitioned server');
      cluster.partition(lost);
      const cutAt = Date.now();
      // The two others see it gone: they elect a leader of their own.
      const majority = await connect({
        ...cluster.connectOptions('admin'),
        servers: cluster.servers.filter((server) => server !== lost).map((server) => server.url),
      });
      try {
        // No account info asked first: its metadata leader may be the server cut off.
        const jsm = await jetstreamManager(majority, { timeout: 2_000, checkAPI: false });
        await until(
          () =>
            jsm.streams.info(EVENTS_STREAM).then(
              (info) => info.cluster?.leader,
              () => undefined,
            ),
          (now) => now !== undefined && now !== leader,
          'a leader of PGE_EVENTS on the two other servers',
          // Its election takes seconds on an idle machine, and has taken more than 15 s on a loaded one.
          45_000,
        );
      } finally {
        await majority.close();
      }
      await sleep(Math.max(0, cutAt + 15_000 - Date.now()));
      cluster.heal();
      const applied = await expectEveryRunWhole(runIds, cutAt);
      expect(openai.completions().length - applied).toBeLessThanOrEqual(PAUSE_REPEATS * runIds.length);
    },
    240_000 + CLUSTER_START_MS,
  );

  /**
   * `pge run --nats` while a server of three is SIGKILLed at a random moment of each wave of
   * submissions (and started again before the next): a submission whose answer is lost, or that a
   * coordinator cannot admit while the cluster elects leaders, is sent again under the same run id,
   * and a coordinator that finds that run started answers with it instead of starting a second.
   */
  it(
    'starts every run submitted while a server of three is SIGKILLed exactly once, and each passes',
    async () => {
      openai.script((body) => passingAnswer(body, 20));
      await Promise.all([worker('coordinator'), worker('planner'), worker('generator'), worker('evaluator')]);
      const tasks: string[] = [];
      const clients: PgeProcess[] = [];
      for (let wave = 0; wave < WAVES; wave++) {
        const started = Array.from({ length: PER_WAVE }, (_, i) => {
          const task = `submission ${wave * PER_WAVE + i + 1} through a server loss`;
          tasks.push(task);
          const client = startPge(['run', task, '--nats', cluster.urls, '--json'], cluster.env('client'));
          processes.push(client);
          return client;
        });
        clients.push(...started);
        // A client starts (loads pge, connects) in about a second on an idle machine: the loss lands
        // before, while or after the submissions are answered.
        await sleep(300 + Math.random() * 2_500);
        const lost = cluster.servers[Math.floor(Math.random() * cluster.servers.length)]!;
        await lost.kill();
        await sleep(2_000);
        await lost.restart();
        const exited = Promise.all(started.map((client) => client.exited()));
        // A run that stalls is described from the stream while its client still waits: where it stopped.
        const ended = await Promise.race([exited.then(() => true), sleep(WAVE_MS).then(() => false)]);
        if (!ended) {
          const waiting = started.filter((client) => client.child.exitCode === null);
          const described = await Promise.all(
            waiting.map((client) => describeStuckRun(cluster.connectOptions('admin'), taskOf(client))),
          );
          expect.fail(
            `${waiting.length} runs not ended ${WAVE_MS / 1000} s after a server was SIGKILLed:\n${described.join('\n')}\n---\n${waiting.map((c) => c.stderr()).join('\n---\n')}`,
          );
        }
        const codes = await exited;
        expect(codes, started.map((c) => c.stderr()).join('\n---\n')).toEqual(started.map(() => 0));
      }
      // Each prints the run's result, as an embedded run does.
      const results = clients.map(
        (client) => JSON.parse(client.stdout()) as { runId: string; passed: boolean },
      );
      expect(results.map((r) => r.passed)).toEqual(clients.map(() => true));
      // The stream holds one run.started per task, each under the run id its client followed. Read
      // as a client reads: through the last loss's elections, which may outlast its runs.
      const events = (await until(
        () => storedEvents(cluster.connectOptions('client'), 'pge.run.*.evt.>').catch(String),
        (read) => typeof read !== 'string',
        'the stored events after the last server loss (the last read error)',
        READ_AFTER_LOSS_MS,
      )) as RunEvent[];
      const starts = events.filter((e) => e.type === 'run.started');
      expect(starts.map((e) => (e.type === 'run.started' ? e.payload.task : '')).toSorted()).toEqual(
        tasks.toSorted(),
      );
      expect(new Set(starts.map((e) => e.runId)).size).toBe(starts.length);
      expect(starts.map((e) => e.runId).toSorted()).toEqual(results.map((r) => r.runId).toSorted());
    },
    WAVES * 60_000 + WAVE_MS + READ_AFTER_LOSS_MS,
  );
});

/**
 * Calls per run made again at most through a pause of 15 s or so (a server frozen, or cut off until
 * the others have elected new leaders), besides
 * the ones applied. Unlike a kill, a pause outlasts the run leases (3 s) and the work items' ack
 * wait, so the call a run had in flight may be made again by the worker its item is redelivered to
 * and by a coordinator that took the run over, one answer being applied and the others dropped; CI
 * has seen up to 2 per run.
 */
const PAUSE_REPEATS = 3;

/** A bus of `role` given `server` only (it learns the others from it), and what it reports. */
async function busOn(
  role: NatsRole,
  server: NatsServerHandle,
  replicas?: number,
): Promise<{ bus: NatsBus; reported: string[] }> {
  const reported: string[] = [];
  const bus = await NatsBus.connect({
    ...natsOptionsFromEnv(cluster.env(role, server)),
    ...(replicas === undefined ? {} : { replicas }),
    onHandlerError: (error) => reported.push(String(error)),
  });
  return { bus, reported };
}

/** Waits for `bus` to leave `from`, no sooner than `UNSERVED_MOVE_MS` after `since`, saying why. */
async function expectMovedOff(
  bus: NatsBus,
  from: NatsServerHandle,
  reported: readonly string[],
  since: number,
  what: 'publishes' | 'pulls',
): Promise<void> {
  await until(
    () => bus.connection.info?.port,
    (port) => port !== undefined && port !== from.port,
    'a move to another server',
    60_000,
  ).catch((error: Error) => {
    throw new Error(`${error.message}; the bus reported:\n${reported.join('\n')}`);
  });
  expect(Date.now() - since).toBeGreaterThanOrEqual(UNSERVED_MOVE_MS);
  expect(reported.join('\n')).toMatch(
    new RegExp(
      `:${from.port} has left JetStream ${what} unserved for \\d+ s; moving to another server of its cluster`,
    ),
  );
}

/**
 * A deployment on the cluster with 4 runs submitted and working, for the loss of the leader of
 * `PGE_EVENTS` (returned): the only generator knows only that server, so it must carry on
 * through another, learnt from the cluster; the other processes are given every server.
 */
async function runsInFlight(
  what: string,
): Promise<{ lost: NatsServerHandle; leader: string; runIds: string[] }> {
  // Every call takes a while, so that each run is in the middle of a call at the loss.
  openai.script((body) => passingAnswer(body, 100));
  await worker('coordinator');
  const nc = await connect(cluster.connectOptions('admin'));
  const leader = (await (await jetstreamManager(nc)).streams.info(EVENTS_STREAM)).cluster!.leader!;
  await nc.close();
  const lost = cluster.named(leader);
  await worker('generator', lost, '--worker-id', 'gen-on-lost');
  await Promise.all([worker('planner'), worker('evaluator'), worker('persistence'), worker('coordinator')]);
  const client = cluster.connectOptions('client');
  const runIds = await Promise.all([1, 2, 3, 4].map((i) => submitRun(client, `run ${i} through ${what}`)));
  const workCalls = () => openai.completions().filter((r) => schemaOf(r.body) === 'pge_work').length;
  await until(workCalls, (n) => n >= 2, 'the first work calls');
  return { lost, leader, runIds };
}

/**
 * Checks that every run closed passing with every event stored once, that the persistence
 * worker's log of each is its stream, and that the generator on the lost server did work after
 * `lostAt`; returns the model calls the runs' events record.
 */
async function expectEveryRunWhole(runIds: readonly string[], lostAt: number): Promise<number> {
  const client = cluster.connectOptions('client');
  let applied = 0;
  for (const runId of runIds) {
    // Reading goes on through the pause while the cluster elects new leaders (a request may time out).
    let last: RunEvent[] = [];
    const events: RunEvent[] = await until(
      async () => (last = await storedEvents(client, `pge.run.${runId}.evt.>`).catch(() => last)),
      (stored) => closed(stored) && seqsUpTo(stored.length).every((seq) => stored.some((e) => e.seq === seq)),
      `run ${runId} to close`,
      90_000,
    ).catch((error: Error) => {
      // What the run's stream holds, in the order stored, rather than its events in full.
      throw new Error(
        `${error.message.slice(0, 120)}…; stored: ${last.map((e) => `${e.seq}:${e.type}`).join(' ')}`,
      );
    });
    applied += events.filter((e) => e.type === 'model.call.completed').length;
    // Every event once. Events published while the stream's new leader was being elected may be
    // stored after later ones: readers and the log order them by seq.
    const bySeq = events.toSorted((a, b) => a.seq - b.seq);
    expect(
      bySeq.map((e) => e.seq),
      runId,
    ).toEqual(seqsUpTo(events.length));
    expect(bySeq.at(-1)?.type, runId).toBe('run.completed');
    // The log the persistence worker wrote is the stream, event for event.
    const started = bySeq[0]!;
    const logPath = started.type === 'run.started' ? started.payload.logPath : '';
    // The persistence worker may still be catching up after the pause.
    const logged = await until(
      () => {
        try {
          return readLog(readFileSync(join(logs, basename(logPath)), 'utf8'));
        } catch {
          return [];
        }
      },
      (events) => events.length >= bySeq.length,
      `the log of ${runId}`,
      30_000,
    );
    expect(logged.map((e) => e.id)).toEqual(bySeq.map((e) => e.id));
    // The generator on the lost server did work after the loss.
    const served = events.filter(
      (e) => e.type === 'model.call.completed' && e.payload.phase === 'work' && Date.parse(e.ts) > lostAt,
    );
    expect(served.length, runId).toBeGreaterThan(0);
  }
  return applied;
}
