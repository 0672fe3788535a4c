import { describe, expect, it } from 'vitest';
import { resolveOptions } from '../../src/api/options.js';
import { readRunEvents } from '../../src/bus/channels.js';
import { NatsBus } from '../../src/bus/nats-bus.js';
import { RunLeases } from '../../src/bus/run-leases.js';
import { subjects } from '../../src/bus/subjects.js';
import type { Model, ModelRequest } from '../../src/roles/model.js';
import { createRoleWorker, type RoleWorker } from '../../src/roles/role-worker.js';
import { startCoordinatorService } from '../../src/runtime/coordinator-service.js';
import { natsRunOwnership } from '../../src/runtime/nats-ownership.js';
import type { CoordinatorService } from '../../src/runtime/services.js';
import type { RunEvent } from '../../src/schemas/index.js';
import { ScriptedModel } from '../../src/testing.js';
import { until } from '../support/deployment.js';
import { passingScript } from '../support/scripts.js';
import { serverPerTest } from '../support/server-per-test.js';

/**
 * Two coordinators on one run, on purpose: the first keeps driving it after the second took it
 * over (its lease renewals stopped, and it was never told), and both record the run's next events.
 * The stream keeps one event per seq, the second coordinator's, and the first lets the run go.
 */

const each = serverPerTest('pge-deposed-');
const { closing } = each;

/** Answers as `inner` does, but holds the first work call until `gate` resolves. */
class FirstWorkHeld implements Model {
  readonly name: string;
  held = false;
  constructor(
    private readonly inner: Model,
    private readonly gate: Promise<void>,
  ) {
    this.name = inner.name;
  }
  calls = 0;
  async complete(request: ModelRequest) {
    this.calls++;
    if (request.phase === 'work' && !this.held) {
      this.held = true;
      await this.gate;
    }
    return this.inner.complete(request);
  }
}

/** A coordinator service of `owner` on a bus of its own, sharing runs through leases. */
async function coordinator(
  owner: string,
  model: Model,
  onExpired: (runId: string) => void = () => undefined,
): Promise<{ bus: NatsBus; leases: RunLeases; service: CoordinatorService }> {
  const bus = await NatsBus.connect({ servers: each.nats.url, reporter: 'coordinator' });
  const leases = await RunLeases.open(bus.connection, {
    owner,
    leaseMs: 600,
    onExpired,
    // Never told: a coordinator cut off from the bucket keeps driving what it holds.
    onLost: () => undefined,
  });
  const service = startCoordinatorService({
    bus,
    options: resolveOptions({ workingDirectory: each.dir }),
    models: { planner: model.name, generator: model.name, evaluator: model.name },
    ownership: natsRunOwnership(bus, leases),
  });
  closing.push(async () => {
    await service.stop();
    leases.stop();
    await bus.close();
  });
  return { bus, leases, service };
}

describe('a coordinator that drives on after its run was taken over', () => {
  it('has its next event refused at the seq the new owner recorded, and lets the run go; the run holds one event per seq', async () => {
    let release = () => {};
    // One answer per call: a call the deposed coordinator asked for would find the script empty.
    const model = new FirstWorkHeld(
      new ScriptedModel(passingScript(1)),
      new Promise<void>((resolve) => {
        release = resolve;
      }),
    );
    const workerBus = await NatsBus.connect({ servers: each.nats.url });
    const workers: RoleWorker[] = (['planner', 'generator', 'evaluator'] as const).map((role) =>
      createRoleWorker({ bus: workerBus, role, model, workerId: role }),
    );
    closing.push(async () => {
      release();
      await Promise.all(workers.map((w) => w.stop('abort')));
      await workerBus.close();
    });

    const a = await coordinator('coordinator-a', model);
    const { runId } = (await a.bus.request(subjects.submit, { task: 'one step' })) as { runId: string };
    await until(() => model.held, Boolean, 'the work call', 15_000);
    // a's lease goes unrenewed: a drives on, unaware.
    a.leases.stop();

    const events = () => readRunEvents(workerBus, runId);
    let b: Awaited<ReturnType<typeof coordinator>> | undefined;
    b = await coordinator('coordinator-b', model, (expired) => void b?.service.takeOver(expired));
    await until(
      events,
      (stored) => stored.some((e) => e.type === 'run.resumed'),
      'b to take the run over',
      15_000,
    );

    // The work call answers: both coordinators take its result and record the run's next events.
    release();
    await until(events, (stored) => stored.some((e) => e.type === 'run.completed'), 'the run to end', 15_000);
    await until(
      () => a.service.active.has(runId),
      (active) => !active,
      'a to let the run go',
      15_000,
    );

    const stored: RunEvent[] = await events();
    const seqs = stored.map((e) => e.seq).sort((x, y) => x - y);
    expect(seqs).toEqual(seqs.map((_, i) => i + 1));
    const resumed = stored.find((e) => e.type === 'run.resumed');
    expect(resumed?.type === 'run.resumed' && resumed.payload.owner).toBe('coordinator-b');
    // The work result is recorded once, after b took the run over, and the run ends passing.
    const work = stored.filter((e) => e.type === 'step.work.completed');
    expect(work).toHaveLength(1);
    expect(work[0]!.seq).toBeGreaterThan(resumed!.seq);
    // The deposed coordinator's next request was never queued as work: its event was refused.
    expect(stored.some((e) => e.type === 'result.rejected')).toBe(false);
    expect(model.calls).toBe(5);
    expect(stored.at(-1)).toMatchObject({ type: 'run.completed', payload: { passed: true } });
  });
});
