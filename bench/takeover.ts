import type { ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { Kvm } from '@nats-io/kv';
import { connect } from '@nats-io/transport-node';
import { NatsBus } from '../src/bus/nats-bus.js';
import { LEASE_BUCKET } from '../src/bus/run-leases.js';
import { DemoModel } from '../src/roles/demo-model.js';
import type { Model, ModelAnswer, ModelRequest } from '../src/roles/model.js';
import { createRoleWorker } from '../src/roles/role-worker.js';
import type { RunEvent } from '../src/schemas/index.js';
import { medianValue } from './measure.js';
import { startBenchNatsServer, startCoordinatorProcess } from './nats-deployment.js';

/**
 * Section 9: coordinator takeover. Two coordinators run as real processes (`pge worker --role
 * coordinator`, from the sources); the role workers run in this process, the generator's work
 * call taking `workDelayMs`. Each trial submits a run, waits until its work call is in flight,
 * SIGKILLs the coordinator that owns the run (the one its lease in the KV bucket names), and times
 * how long the other coordinator takes to record the run's `run.resumed`; then it waits
 * for the run to complete and starts a new coordinator in place of the dead one.
 */

/** Settings of the takeover section. */
export interface TakeoverSettings {
  dir: string;
  trials: number;
  /** How long the generator's work call takes: the owner is killed while it runs. */
  workDelayMs: number;
}

/** What the section measured. */
export interface TakeoverResults {
  settings: Omit<TakeoverSettings, 'dir'>;
  /** Milliseconds from each SIGKILL to the run's `run.resumed`, in trial order. */
  killToResumedMs: number[];
  medianMs: number;
  maxMs: number;
}

/** The demo model, with the work call made slow so that the owner dies while it runs. */
class SlowWork implements Model {
  readonly name = 'bench-takeover (demo model, slow work)';
  readonly #demo = new DemoModel();
  constructor(private readonly delayMs: number) {}
  async complete(request: ModelRequest): Promise<ModelAnswer> {
    if (request.phase === 'work') await new Promise((resolve) => setTimeout(resolve, this.delayMs));
    return this.#demo.complete(request);
  }
}

export async function measureTakeover(settings: TakeoverSettings): Promise<TakeoverResults> {
  const server = await startBenchNatsServer(join(settings.dir, 'takeover-nats.pid'));
  const coordinators = new Map<string, ChildProcess>();
  const buses: NatsBus[] = [];
  const nc = await connect({ servers: server.url });
  try {
    for (const id of ['coord-1', 'coord-2'])
      coordinators.set(id, await startCoordinatorProcess(server.url, id));
    for (const role of ['planner', 'generator', 'evaluator'] as const) {
      const bus = await NatsBus.connect({ servers: server.url, name: `bench-${role}` });
      buses.push(bus);
      createRoleWorker({
        bus,
        role,
        model: role === 'generator' ? new SlowWork(settings.workDelayMs) : new DemoModel(),
      });
    }
    const leases = await new Kvm(nc).open(LEASE_BUCKET);
    const times: number[] = [];
    for (let trial = 1; trial <= settings.trials; trial++) {
      const runId = `takeover-${trial}`;
      const events: RunEvent[] = [];
      let notify = () => {};
      const sub = nc.subscribe(`pge.run.${runId}.evt.>`, {
        callback: (_error, msg) => {
          events.push(msg.json<RunEvent>());
          notify();
        },
      });
      /** Resolves with the first event at or after index `from` that `accept` takes. */
      const next = (from: number, accept: (event: RunEvent) => boolean) =>
        new Promise<RunEvent>((resolve) => {
          notify = () => {
            const found = events.slice(from).find(accept);
            if (found) resolve(found);
          };
          notify();
        });
      await nc.request('pge.runs.submit', JSON.stringify({ task: `takeover trial ${trial}`, runId }), {
        timeout: 10_000,
      });
      await next(0, (e) => e.type === 'step.work.requested');
      const owner = (await leases.get(runId))?.json<{ owner: string }>().owner;
      const doomed = owner === undefined ? undefined : coordinators.get(owner);
      if (doomed === undefined) throw new Error(`takeover: no live coordinator owns ${runId} (${owner})`);
      const seen = events.length;
      doomed.kill('SIGKILL');
      const killed = performance.now();
      // Events the owner sent just before it died may still arrive first (another step's call,
      // with steps side by side): the takeover is the other coordinator's run.resumed.
      await next(seen, (e) => e.type === 'run.resumed');
      times.push(performance.now() - killed);
      const closing = await next(seen, (e) => e.type === 'run.completed' || e.type === 'run.failed');
      if (closing.type !== 'run.completed') throw new Error(`takeover: run ${runId} ended ${closing.type}`);
      sub.unsubscribe();
      coordinators.delete(owner!);
      const replacement = `coord-${trial + 2}`;
      coordinators.set(replacement, await startCoordinatorProcess(server.url, replacement));
    }
    return {
      settings: { trials: settings.trials, workDelayMs: settings.workDelayMs },
      killToResumedMs: times,
      medianMs: medianValue(times),
      maxMs: Math.max(...times),
    };
  } finally {
    for (const child of coordinators.values()) child.kill('SIGKILL');
    await Promise.all(buses.map((bus) => bus.close()));
    await nc.close();
    await server.stop();
  }
}

/** The section's lines in the report. */
export function takeoverLines(
  results: TakeoverResults | { skipped: string },
  table: (header: readonly string[], rows: readonly (readonly string[])[]) => string,
): string[] {
  if ('skipped' in results) return [`9. Coordinator takeover: skipped (${results.skipped})`, ''];
  return [
    "9. Coordinator takeover on NATS (two coordinator processes; the owner SIGKILLed while its run's",
    `   work call runs; time from the kill to the run's run.resumed by the other; lease 3 s)`,
    table(
      ['trials', 'median ms', 'max ms', 'target'],
      [
        [
          String(results.killToResumedMs.length),
          results.medianMs.toFixed(0),
          results.maxMs.toFixed(0),
          '≤ 5000',
        ],
      ],
    ),
    '',
  ];
}
