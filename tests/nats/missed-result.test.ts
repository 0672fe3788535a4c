import { describe, expect, it } from 'vitest';
import { resolveOptions } from '../../src/api/options.js';
import { readRunEvents } from '../../src/bus/channels.js';
import { NatsBus } from '../../src/bus/nats-bus.js';
import { RunLeases } from '../../src/bus/run-leases.js';
import { subjects } from '../../src/bus/subjects.js';
import { createRoleWorker } from '../../src/roles/role-worker.js';
import { startCoordinatorService } from '../../src/runtime/coordinator-service.js';
import { natsRunOwnership } from '../../src/runtime/nats-ownership.js';
import type { RoleResult } from '../../src/schemas/index.js';
import { ScriptedModel } from '../../src/testing.js';
import { until } from '../support/deployment.js';
import { passingScript } from '../support/scripts.js';
import { serverPerTest } from '../support/server-per-test.js';

/**
 * A result the worker stored in PGE_RESULTS that never reached the coordinator (its reading lost
 * it): the call that waits for it looks for it in the stream, and the run goes on, where it would
 * otherwise wait for the call's deadline (30 min by default).
 */

const each = serverPerTest('pge-missed-result-');
const { closing } = each;

describe('a result stored but missed by the coordinator', () => {
  it('is found in the stream by the call that waits for it, and applied once', async () => {
    const workerBus = await NatsBus.connect({ servers: each.nats.url });
    const model = new ScriptedModel(passingScript(1));
    const workers = (['planner', 'generator', 'evaluator'] as const).map((role) =>
      createRoleWorker({ bus: workerBus, role, model, workerId: role }),
    );
    closing.push(async () => {
      await Promise.all(workers.map((w) => w.stop('abort')));
      await workerBus.close();
    });

    // The coordinator's reading of results drops the work's result, as a reading lost across a
    // server loss would: the result is in the stream, and never delivered.
    const bus = await NatsBus.connect({ servers: each.nats.url, reporter: 'coordinator' });
    const dropped: string[] = [];
    const subscribeOrdered = bus.subscribeOrdered.bind(bus);
    bus.subscribeOrdered = (subject, handler, options) =>
      subscribeOrdered(
        subject,
        (message) => {
          const result = message.data as RoleResult;
          if (subject === subjects.result('*') && result.result.phase === 'work' && dropped.length === 0) {
            dropped.push(result.requestId);
            return;
          }
          return handler(message);
        },
        options,
      );
    const leases = await RunLeases.open(bus.connection, {
      owner: 'coordinator-1',
      onExpired: () => undefined,
      onLost: () => undefined,
    });
    const service = startCoordinatorService({
      bus,
      options: resolveOptions({ workingDirectory: each.dir }),
      models: { planner: model.name, generator: model.name, evaluator: model.name },
      ownership: natsRunOwnership(bus, leases),
      resultCheckMs: 300,
    });
    closing.push(async () => {
      await service.stop();
      leases.stop();
      await bus.close();
    });

    // Submitted on the coordinator's own connection, after its subscriptions reached the server.
    await bus.flush();
    const { runId } = (await bus.request(subjects.submit, { task: 'one step' })) as { runId: string };
    const events = await until(
      () => readRunEvents(workerBus, runId),
      (stored) => stored.some((e) => e.type === 'run.completed' || e.type === 'run.failed'),
      'the run to end',
      20_000,
    );
    expect(dropped).toHaveLength(1);
    expect(events.at(-1)?.type).toBe('run.completed');
    // The dropped result was applied from the stream, once: its model call is recorded once.
    const [work] = dropped;
    expect(
      events.filter((e) => e.type === 'model.call.completed' && e.payload.requestId === work),
    ).toHaveLength(1);
    expect(events.some((e) => e.type === 'request.cancelled')).toBe(false);
  });
});
