import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { resolveOptions } from '../../src/api/options.js';
import { readRunEvents } from '../../src/bus/channels.js';
import { NatsBus } from '../../src/bus/nats-bus.js';
import { RunLeases } from '../../src/bus/run-leases.js';
import { subjects } from '../../src/bus/subjects.js';
import type { Model, ModelRequest } from '../../src/roles/model.js';
import { createRoleWorker } from '../../src/roles/role-worker.js';
import { startCoordinatorService } from '../../src/runtime/coordinator-service.js';
import { natsLostWork, natsRunOwnership } from '../../src/runtime/nats-ownership.js';
import { announcePresence, hearWorkers } from '../../src/runtime/worker-presence.js';
import type { RoleRequest, RunEvent } from '../../src/schemas/index.js';
import { ScriptedModel } from '../../src/testing.js';
import { until } from '../support/deployment.js';
import { passingScript } from '../support/scripts.js';
import { serverPerTest } from '../support/server-per-test.js';

/**
 * A work item the server counts as handed out but that no worker holds, answers or gets again
 * (nats-server has had consumers stop redelivering after a leader change): the call that waits
 * for it sees, at two looks, every item of its role handed out and no worker saying it holds
 * this one, and sends it again as a new item. A long call that a worker holds is left alone.
 */

const each = serverPerTest('pge-lost-work-');
const { closing } = each;

/**
 * Between two looks a worker says what it holds more than twice (every `PRESENCE_INTERVAL_MS`),
 * so that one late presence on a loaded machine is not taken for a worker holding nothing.
 */
const LOOK_MS = 5_000;

/** Answers as `inner` does, the work call after `workMs`. */
class SlowWork implements Model {
  readonly name: string;
  constructor(
    private readonly inner: Model,
    private readonly workMs: number,
  ) {
    this.name = inner.name;
  }
  async complete(request: ModelRequest) {
    if (request.phase === 'work') await sleep(this.workMs);
    return this.inner.complete(request);
  }
}

/**
 * Role workers that say what they hold, and a coordinator that looks for lost work every
 * `LOOK_MS`; with `loseFirstWork`, the first work item reaches no worker: the generators'
 * subscription settles it (the server takes it as done) without handing it to the worker.
 */
async function deployment(model: Model, loseFirstWork: boolean) {
  const workerBus = await NatsBus.connect({ servers: each.nats.url });
  const lost: string[] = [];
  const subscribe = workerBus.subscribe.bind(workerBus);
  workerBus.subscribe = (subject, handler, options) =>
    subscribe(
      subject,
      (message) => {
        const request = message.data as RoleRequest;
        if (loseFirstWork && subject === subjects.work('generator') && request.payload.phase === 'work') {
          if (lost.length === 0) {
            lost.push(request.id);
            return;
          }
        }
        return handler(message);
      },
      options,
    );
  const silences: (() => void)[] = [];
  const workers = (['planner', 'generator', 'evaluator'] as const).map((role) => {
    const worker = createRoleWorker({ bus: workerBus, role, model, workerId: role });
    const presence = { role, worker: role, model: model.name, priced: true };
    silences.push(
      announcePresence(
        workerBus,
        presence,
        () => undefined,
        () => worker.holding(),
      ),
    );
    return worker;
  });
  closing.push(async () => {
    for (const silence of silences) silence();
    await Promise.all(workers.map((w) => w.stop('abort')));
    await workerBus.close();
  });

  const bus = await NatsBus.connect({ servers: each.nats.url, reporter: 'coordinator' });
  const heard = hearWorkers(bus);
  const leases = await RunLeases.open(bus.connection, {
    owner: 'coordinator-1',
    onExpired: () => undefined,
    onLost: () => undefined,
  });
  const sentAgain: string[] = [];
  const service = startCoordinatorService({
    bus,
    options: resolveOptions({ workingDirectory: each.dir }),
    models: { planner: model.name, generator: model.name, evaluator: model.name },
    ownership: natsRunOwnership(bus, leases),
    resultCheckMs: LOOK_MS,
    lostWork: natsLostWork(bus, heard, (_request, why) => sentAgain.push(why)),
  });
  closing.push(async () => {
    await service.stop();
    heard.stop();
    leases.stop();
    await bus.close();
  });
  // Submitted once the coordinator's subscriptions reached the server, and it heard the workers.
  await bus.flush();
  await until(
    async () => heard.models('generator'),
    (models) => models.length > 0,
    'the workers to be heard',
    5_000,
  );
  const { runId } = (await bus.request(subjects.submit, { task: 'one step' })) as { runId: string };
  const events = await until(
    () => readRunEvents(workerBus, runId),
    (stored) => stored.some((e) => e.type === 'run.completed' || e.type === 'run.failed'),
    'the run to end',
    45_000,
  );
  return { events, lost, sentAgain };
}

const workRequests = (events: readonly RunEvent[]) =>
  events.filter((e) => e.type === 'step.work.requested').map((e) => e.id);

describe('a work item that no worker holds', () => {
  it('is sent again as a new item, and the run goes on with one answer', async () => {
    const model = new ScriptedModel(passingScript(1));
    const { events, lost, sentAgain } = await deployment(model, true);
    expect(lost).toHaveLength(1);
    expect(events.at(-1)?.type).toBe('run.completed');
    const [work] = lost;
    expect(workRequests(events)).toEqual([work]);
    expect(sentAgain).toHaveLength(1);
    expect(sentAgain[0]).toContain(`${work} was handed out, and no generator worker held it`);
    // Answered once, by the item sent again: one model call recorded, nothing cancelled.
    expect(
      events.filter((e) => e.type === 'model.call.completed' && e.payload.requestId === work),
    ).toHaveLength(1);
    expect(events.some((e) => e.type === 'request.cancelled')).toBe(false);
  }, 60_000);

  it('is not taken for one a worker holds through a long call', async () => {
    const model = new SlowWork(new ScriptedModel(passingScript(1)), 3 * LOOK_MS);
    const { events, lost, sentAgain } = await deployment(model, false);
    expect(lost).toEqual([]);
    expect(events.at(-1)?.type).toBe('run.completed');
    expect(sentAgain).toEqual([]);
    expect(workRequests(events)).toHaveLength(1);
  }, 60_000);
});
