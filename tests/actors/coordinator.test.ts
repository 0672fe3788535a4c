import { afterEach, describe, expect, it } from 'vitest';
import { createCoordinator, type RunSpec } from '../../src/actors/coordinator.js';
import { createRoleWorker, type RoleWorker } from '../../src/actors/role-worker.js';
import type { Bus } from '../../src/bus/bus.js';
import { subscribeEvents } from '../../src/bus/channels.js';
import { InProcessBus } from '../../src/bus/in-process-bus.js';
import type { RunEvent } from '../../src/schemas/index.js';
import { ScriptedModel } from '../../src/testing.js';
import { runInput } from '../support/chart-fixtures.js';
import { passingScript } from '../support/scripts.js';

/**
 * The coordinator on a bus that is not the in-process one: the in-process bus hands back one
 * shared promise for a publish it took at once, which lets the coordinator skip waiting; any other
 * bus's promises are awaited, and a rejected publish stops the run.
 */

/** A run of the chart fixtures' settings (`runInput`), started by the coordinator. */
function spec(runId: string): RunSpec {
  const { startedAt: _, ...settings } = runInput({ logPath: `/nonexistent/pge_shared_state_${runId}.md` });
  return {
    ...settings,
    runId,
    models: { planner: 'scripted', generator: 'scripted', evaluator: 'scripted' },
  };
}

/** A bus that publishes through `inner` and answers publish `n` with `answer(n, published, subject)`. */
function wrapped(
  inner: InProcessBus,
  answer: (n: number, published: Promise<void>, subject: string) => Promise<void>,
): Bus {
  let n = 0;
  return {
    publish: (subject, data) => answer(++n, inner.publish(subject, data), subject),
    subscribe: (subject, handler, options) => inner.subscribe(subject, handler, options),
    request: (subject, data, options) => inner.request(subject, data, options),
    flush: () => inner.flush(),
    close: () => inner.close(),
  };
}

let cleanup: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const step of cleanup.reverse()) await step();
  cleanup = [];
});

/** Runs a 2-step passing script on `makeBus(inner)`; returns the outcome (or error) and the events. */
async function run(makeBus: (inner: InProcessBus) => Bus) {
  const inner = new InProcessBus();
  const bus = makeBus(inner);
  const events: RunEvent[] = [];
  subscribeEvents(inner, '*', (event) => void events.push(event));
  const model = new ScriptedModel(passingScript(2));
  const workers: RoleWorker[] = (['planner', 'generator', 'evaluator'] as const).map((role) =>
    createRoleWorker({ bus, role, model, workerId: role }),
  );
  const coordinator = createCoordinator({ bus });
  cleanup.push(async () => {
    await Promise.all(workers.map((w) => w.stop('abort')));
    coordinator.close();
    await inner.close();
  });
  const handle = coordinator.startRun(spec(`run-${cleanup.length}`));
  const settled = await handle.done.then(
    (outcome) => ({ outcome, error: null }),
    (error: unknown) => ({ outcome: null, error }),
  );
  await inner.flush();
  return { ...settled, events };
}

describe('coordinator on a bus with promises of its own', () => {
  it('runs the same events when each publish resolves with a promise of its own', async () => {
    const plain = await run((inner) => inner);
    const other = await run((inner) => wrapped(inner, (_, published) => published.then(() => undefined)));
    expect(plain.outcome?.status).toBe('completed');
    expect(other.outcome?.status).toBe('completed');
    expect(other.events.map((e) => e.type)).toEqual(plain.events.map((e) => e.type));
  });

  it('stops a run whose event could not be published, and rejects with that error', async () => {
    const boom = new Error('the transport refused it');
    const { outcome, error, events } = await run((inner) =>
      wrapped(inner, (n, published) => (n === 5 ? Promise.reject(boom) : published)),
    );
    expect(outcome).toBeNull();
    expect(error).toBe(boom);
    expect(events.at(-1)?.type).toBe('run.failed');
    const failed = events.at(-1) as Extract<RunEvent, { type: 'run.failed' }>;
    expect(JSON.stringify(failed.payload)).toContain('could not be published');
  });

  it('stops a run whose request was published as an event but could not be queued as work', async () => {
    // The event goes out on the in-process bus's fast path; the work item's promise rejects.
    const refused = new Error('the work queue refused it');
    let queued = 0;
    const { error, events } = await run((inner) =>
      wrapped(inner, (_, published, subject) =>
        subject.startsWith('pge.work.') && ++queued === 2 ? Promise.reject(refused) : published,
      ),
    );
    expect(error).toBe(refused);
    expect(events.at(-1)?.type).toBe('run.failed');
  });
});
