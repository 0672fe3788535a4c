import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { resolveOptions } from '../../src/api/options.js';
import { publishControl } from '../../src/bus/channels.js';
import { InProcessBus } from '../../src/bus/in-process-bus.js';
import { subjects } from '../../src/bus/subjects.js';
import { BusError, ConfigurationError, EventSeqTakenError, WorkerStoppedError } from '../../src/errors.js';
import { readLogFile } from '../../src/persistence/index.js';
import { createPersistenceActor } from '../../src/persistence/persistence-actor.js';
import { DemoModel } from '../../src/roles/demo-model.js';
import type { Model } from '../../src/roles/model.js';
import { createRoleWorker } from '../../src/roles/role-worker.js';
import { startCoordinatorService } from '../../src/runtime/coordinator-service.js';
import { type RunOwnership, submitAndFollow } from '../../src/runtime/services.js';
import type { RunEvent } from '../../src/schemas/index.js';
import { stepStarted } from '../bus/bus-contract.js';
import { withPublish } from '../support/delegating-bus.js';
import { until } from '../support/deployment.js';

/** The distributed services, on the in-process bus: submission, coordination, persistence, following. */

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'pge-services-'));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

function deployment(
  model: Model = new DemoModel(),
  runExists?: (runId: string) => Promise<boolean>,
  maxTaskBytes?: number,
) {
  const handlerErrors: unknown[] = [];
  // Requests abandoned when the workers stop are expected; anything else fails the test below.
  const bus = new InProcessBus({
    onHandlerError: (error) => {
      if (!(error instanceof WorkerStoppedError)) handlerErrors.push(error);
    },
  });
  const workers = (['planner', 'generator', 'evaluator'] as const).map((role) =>
    createRoleWorker({ bus, role, model, concurrency: 2 }),
  );
  const errors: unknown[] = [];
  const persistence = createPersistenceActor({ bus, onError: (_runId, error) => errors.push(error) });
  const coordinator = startCoordinatorService({
    bus,
    options: resolveOptions({ workingDirectory: dir, maxRetriesPerStep: 3, maxTaskBytes }),
    models: { planner: model.name, generator: model.name, evaluator: model.name },
    ...(runExists ? { runExists } : {}),
  });
  return {
    bus,
    persistence,
    errors,
    coordinator,
    async close() {
      await coordinator.stop('interrupt');
      // Abort: a request still in flight belongs to a run that is over.
      await Promise.all(workers.map((w) => w.stop('abort')));
      await bus.flush();
      await persistence.close();
      await bus.close();
      expect(handlerErrors).toEqual([]);
    },
  };
}

/** Run ownership that claims every run and knows none: a test replaces what it looks at. */
function noRunsShared(owner: string): RunOwnership {
  return {
    owner,
    claim: async () => true,
    release: async () => undefined,
    letExpire: () => undefined,
    takeOver: async () => false,
    takeOverNow: async () => ({ owner, taken: false }),
    events: async () => [],
    storedResult: async () => null,
  };
}

describe('coordinator service', () => {
  it('takes a submitted run, and the submitter follows every event in order to the end', async () => {
    const d = deployment();
    try {
      const seen: RunEvent[] = [];
      const { runId, closing } = await submitAndFollow(
        d.bus,
        { task: 'Write a haiku', options: { maxSteps: 2 } },
        (e) => seen.push(e),
      );
      const last = await closing;
      expect(last.type).toBe('run.completed');
      expect(last.payload).toMatchObject({ passed: true, stepsTotal: 2 });
      expect(seen.map((e) => e.seq)).toEqual(seen.map((_, i) => i + 1));
      expect(seen[0]).toMatchObject({ type: 'run.started', runId, payload: { settings: { maxSteps: 2 } } });
      await d.bus.flush();
      await d.persistence.flushed(runId);
      const logged = await readLogFile(join(dir, `pge_shared_state_${runId}.md`));
      expect(logged).toEqual(seen);
      expect(d.errors).toEqual([]);
    } finally {
      await d.close();
    }
  });

  it('runs concurrent submissions independently', async () => {
    const d = deployment();
    try {
      const runs = await Promise.all(
        ['task one', 'task two', 'task three'].map((task) => submitAndFollow(d.bus, { task })),
      );
      const closings = await Promise.all(runs.map((r) => r.closing));
      expect(new Set(runs.map((r) => r.runId)).size).toBe(3);
      expect(closings.every((c) => c.type === 'run.completed' && c.payload.passed)).toBe(true);
    } finally {
      await d.close();
    }
  });

  it('says that no coordinator answered a submission, when none runs', async () => {
    const bus = new InProcessBus();
    try {
      const asked = Date.now();
      const submitted = submitAndFollow(bus, { task: 'Write a haiku' }, () => {}, {
        runId: 'nobody-takes-it',
        submitTimeoutMs: 1_000,
      });
      await expect(submitted).rejects.toBeInstanceOf(BusError);
      // Asked again for the whole submitTimeoutMs (a coordinator may be reconnecting), then told once.
      await expect(submitted).rejects.toThrow(
        /^no coordinator answered the submission of run nobody-takes-it: is one running\? \(pge worker --role coordinator; [3-5] tries in 1 s, the last: no responders on pge\.runs\.submit\)$/,
      );
      expect(Date.now() - asked).toBeGreaterThanOrEqual(700);
    } finally {
      await bus.close();
    }
  });

  it('rejects a submission with unknown options before any run starts', async () => {
    const d = deployment();
    try {
      await expect(d.bus.request(subjects.submit, { task: 'x', options: { maxSteps: 0 } })).rejects.toThrow(
        /maxSteps/,
      );
      expect(d.coordinator.active.size).toBe(0);
    } finally {
      await d.close();
    }
  });

  it('acts on no submission or takeover request that cannot be answered, and reports it as refused', async () => {
    const d = deployment();
    const reports: unknown[] = [];
    d.bus.subscribe(subjects.rejected('*'), (m) => void reports.push(m.data));
    try {
      // As JetStream would deliver a stored copy, or a stray publish: no inbox to answer on.
      await d.bus.publish(subjects.submit, { task: 'Write a haiku', runId: 'never-asked-for' });
      await d.bus.publish(subjects.resume, { runId: 'never-asked-for' });
      await d.bus.flush();
      expect(d.coordinator.active.size).toBe(0);
      expect(reports).toEqual([
        expect.objectContaining({
          subject: subjects.submit,
          problem: expect.stringMatching(/without an inbox to answer on/),
        }),
        expect.objectContaining({
          subject: subjects.resume,
          problem: expect.stringMatching(/without an inbox to answer on/),
        }),
      ]);
      // The same submission as a request is taken.
      await submitAndFollow(d.bus, { task: 'Write a haiku' });
      expect(d.coordinator.active.size).toBe(1);
    } finally {
      await d.close();
    }
  });

  it('refuses a run id it used, while its run goes on and after it ended, and starts nothing', async () => {
    // The model answers once the test lets it: the run is still going at the first resubmission.
    let release = () => {};
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    const demo = new DemoModel();
    const d = deployment({ name: demo.name, complete: (...args) => gate.then(() => demo.complete(...args)) });
    try {
      const runId = 'chosen-by-the-client';
      const first = await submitAndFollow(d.bus, { task: 'Write a haiku' }, () => {}, { runId });
      const again = () => submitAndFollow(d.bus, { task: 'Write another' }, () => {}, { runId });
      await expect(again()).rejects.toThrow(`run id ${runId} is taken`);
      expect(d.coordinator.active.has(runId)).toBe(true);
      release();
      expect((await first.closing).type).toBe('run.completed');
      const refused = again();
      await expect(refused).rejects.toBeInstanceOf(ConfigurationError);
      await expect(refused).rejects.toThrow(/a run id is never reused/);
      expect(d.coordinator.active.size).toBe(0);
    } finally {
      await d.close();
    }
  });

  it('refuses a chosen run id that another coordinator used, asking runExists only for a chosen one', async () => {
    const asked: string[] = [];
    const d = deployment(new DemoModel(), async (runId) => {
      asked.push(runId);
      return runId === 'used-elsewhere';
    });
    try {
      const taken = submitAndFollow(d.bus, { task: 'Write a haiku' }, () => {}, { runId: 'used-elsewhere' });
      await expect(taken).rejects.toThrow('run id used-elsewhere is taken');
      const fresh = await submitAndFollow(d.bus, { task: 'Write a haiku' }, () => {}, { runId: 'new-one' });
      expect((await fresh.closing).type).toBe('run.completed');
      expect(asked).toEqual(['used-elsewhere', 'new-one']);
      // A submission without a run id gets a new one from the coordinator: nothing to look up.
      const picked = await d.bus.request(subjects.submit, { task: 'Write a haiku' });
      expect(picked).toEqual({ runId: expect.stringMatching(/^pge-/) });
      expect(asked).toHaveLength(2);
    } finally {
      await d.close();
    }
  });

  it('answers a task over its maxTaskBytes, or with a NUL, with the error and starts nothing', async () => {
    const d = deployment(new DemoModel(), undefined, 100);
    try {
      const reply = await d.bus.request(subjects.submit, { task: 'x'.repeat(101) });
      expect(reply).toEqual({
        error: {
          name: 'ConfigurationError',
          message: expect.stringContaining('the task is 101 bytes, more than maxTaskBytes allows (100)'),
          retryable: false,
        },
      });
      await expect(submitAndFollow(d.bus, { task: 'a\0b' })).rejects.toThrow(/NUL character/);
      expect(d.coordinator.active.size).toBe(0);
    } finally {
      await d.close();
    }
  });

  it('interrupts a run on a command for it, with the reason in the closing event', async () => {
    // A model that never answers: the run is waiting for its plan when the command comes.
    const silent: Model = { name: 'silent', complete: () => new Promise(() => {}) };
    const d = deployment(silent);
    try {
      const { runId, closing } = await submitAndFollow(d.bus, { task: 'Write a haiku' });
      await publishControl(d.bus, {
        runId: 'some-other-run',
        action: 'interrupt',
        reason: 'not yours',
        ts: new Date().toISOString(),
      });
      // Not bus.flush(): it would wait for the planner's call, which never returns.
      await new Promise((resolve) => setTimeout(resolve, 50));
      expect(d.coordinator.active.has(runId)).toBe(true);
      const reason = 'its log could not be written: disk full';
      await publishControl(d.bus, { runId, action: 'interrupt', reason, ts: new Date().toISOString() });
      const last = await closing;
      expect(last).toMatchObject({ type: 'run.failed', payload: { reason: 'interrupted' } });
      expect(last.type === 'run.failed' && last.payload.message).toContain(reason);
    } finally {
      await d.close();
    }
  });

  it('lets the claim of a run expire, not released, when another coordinator recorded an event of a seq it records', async () => {
    const inner = new InProcessBus();
    const model = new DemoModel();
    const workers = (['planner', 'generator', 'evaluator'] as const).map((role) =>
      createRoleWorker({ bus: inner, role, model }),
    );
    // The coordinator's bus: the stream holds another coordinator's third event of every run.
    const bus = withPublish(inner, (subject, data, options) =>
      subject.includes('.evt.') && (data as RunEvent).seq === 3
        ? Promise.reject(new EventSeqTakenError('its event 3 is stored already'))
        : inner.publish(subject, data, options),
    );
    const calls: string[] = [];
    const ownership: RunOwnership = {
      owner: 'coordinator-a',
      claim: async (runId) => {
        calls.push(`claim ${runId}`);
        return true;
      },
      release: async (runId) => void calls.push(`release ${runId}`),
      letExpire: (runId) => void calls.push(`letExpire ${runId}`),
      takeOver: async () => false,
      takeOverNow: async () => ({ owner: 'coordinator-a', taken: false }),
      events: async () => [],
      storedResult: async () => null,
    };
    const service = startCoordinatorService({
      bus,
      options: resolveOptions({ workingDirectory: dir }),
      models: { planner: model.name, generator: model.name, evaluator: model.name },
      ownership,
    });
    try {
      const { runId } = await submitAndFollow(inner, { task: 'Write a haiku' });
      await until(
        () => service.active.has(runId),
        (active) => !active,
        `run ${runId} to be let go`,
        5_000,
      );
      // The run is the other coordinator's record now: this one neither ends it nor frees its
      // claim for nobody; a claim it still holds expires, and the run is taken over from the stream.
      expect(service.active.has(runId)).toBe(false);
      expect(calls).toEqual([`claim ${runId}`, `letExpire ${runId}`]);
    } finally {
      await service.stop();
      await Promise.all(workers.map((w) => w.stop('abort')));
      await inner.close();
    }
  });

  it('answers a submission sent again with the run an earlier try started, and asks again what the transport did not answer', async () => {
    const bus = new InProcessBus();
    const model = new DemoModel();
    const workers = (['planner', 'generator', 'evaluator'] as const).map((role) =>
      createRoleWorker({ bus, role, model }),
    );
    // The stream as the coordinators share it: every event of every run, and the claims made.
    const stored: RunEvent[] = [];
    bus.subscribe(subjects.events('*'), (m) => void stored.push(m.data as RunEvent));
    const claimed = new Set<string>();
    /** Runs the lookup finds, whose events a read gives as here. */
    const lagging = new Map<string, RunEvent[]>();
    let unanswered = 0;
    const service = startCoordinatorService({
      bus,
      options: resolveOptions({ workingDirectory: dir }),
      models: { planner: 'm', generator: 'm', evaluator: 'm' },
      ownership: {
        ...noRunsShared('coordinator-a'),
        claim: async (runId) => !claimed.has(runId) && claimed.add(runId) !== undefined,
        events: async (runId) => lagging.get(runId) ?? stored.filter((e) => e.runId === runId),
      },
      runExists: async (runId) => {
        // As nats.js rejects a lookup that JetStream, electing a leader, does not answer.
        if (unanswered > 0 && unanswered--)
          throw Object.assign(new Error('timeout'), { name: 'TimeoutError' });
        return lagging.has(runId) || stored.some((e) => e.runId === runId);
      },
    });
    const submit = (task: string, runId: string) => bus.request(subjects.submit, { task, runId });
    const starts = (runId: string) => stored.filter((e) => e.runId === runId && e.type === 'run.started');
    try {
      expect(await submit('Write a haiku', 'sent-twice')).toEqual({ runId: 'sent-twice' });
      await until(
        () => starts('sent-twice').length,
        (n) => n === 1,
        'run.started',
      );
      // The same submission again (its answer was lost): answered with its run, not started twice.
      expect(await submit('Write a haiku', 'sent-twice')).toEqual({ runId: 'sent-twice' });
      // Another task under that id is refused, as ever.
      expect(await submit('Write another', 'sent-twice')).toEqual({
        error: expect.objectContaining({
          name: 'ConfigurationError',
          message: expect.stringContaining('is taken'),
        }),
      });
      // Claimed by a try whose run has stored nothing yet: ask again.
      claimed.add('being-started');
      expect(await submit('Write a haiku', 'being-started')).toEqual({
        error: {
          name: 'BusError',
          message: 'run being-started is claimed but not started yet: ask again',
          retryable: true,
        },
      });
      // Found by the lookup, but none of its events read back yet: ask again, not refused.
      lagging.set('read-lags', []);
      expect(await submit('Write a haiku', 'read-lags')).toEqual({
        error: {
          name: 'BusError',
          message: 'run read-lags is stored but its start is not read yet: ask again',
          retryable: true,
        },
      });
      // Its start no longer in the stream (aged out): refused, as an id is never reused.
      const [later] = await until(
        () => stored.filter((e) => e.runId === 'sent-twice' && e.seq > 1),
        (events) => events.length > 0,
        'an event after run.started',
      );
      lagging.set('start-gone', [{ ...later!, runId: 'start-gone' }]);
      expect(await submit('Write a haiku', 'start-gone')).toEqual({
        error: expect.objectContaining({
          name: 'ConfigurationError',
          message: expect.stringContaining('is taken'),
        }),
      });
      // A lookup not answered twice is a retryable refusal, and the submitter asks again.
      unanswered = 2;
      const { runId, closing } = await submitAndFollow(bus, { task: 'Write a haiku' }, () => {}, {
        runId: 'through-an-election',
      });
      expect(unanswered).toBe(0);
      expect((await closing).type).toBe('run.completed');
      expect(starts(runId)).toHaveLength(1);
      expect(starts('sent-twice')).toHaveLength(1);
    } finally {
      await service.stop('interrupt');
      await Promise.all(workers.map((w) => w.stop('abort')));
      await bus.close();
    }
  });

  it('lets the claim of a run it took over expire when the run cannot be read, rather than hold it undriven', async () => {
    const bus = new InProcessBus();
    const calls: string[] = [];
    const ownership: RunOwnership = {
      owner: 'coordinator-b',
      claim: async () => true,
      release: async (runId) => void calls.push(`release ${runId}`),
      letExpire: (runId) => void calls.push(`letExpire ${runId}`),
      takeOver: async (runId) => {
        calls.push(`takeOver ${runId}`);
        return true;
      },
      takeOverNow: async () => ({ owner: 'coordinator-b', taken: true }),
      events: async () => {
        throw new BusError('cannot read pge.run.run-1.evt.> from PGE_EVENTS: timeout');
      },
      storedResult: async () => null,
    };
    const service = startCoordinatorService({
      bus,
      options: resolveOptions({ workingDirectory: dir }),
      models: { planner: 'm', generator: 'm', evaluator: 'm' },
      ownership,
    });
    try {
      await expect(service.takeOver('run-1')).rejects.toThrow(/timeout/);
      // Claimed, unread, let go: another takeover (here or elsewhere) comes once the claim expires.
      expect(calls).toEqual(['takeOver run-1', 'letExpire run-1']);
      expect(service.active.has('run-1')).toBe(false);
      // Read, but no run's record: released, since no takeover would do better.
      calls.length = 0;
      ownership.events = async () => [stepStarted('run-1', 1)];
      await expect(service.takeOver('run-1')).rejects.toThrow();
      expect(calls).toEqual(['takeOver run-1', 'release run-1']);
    } finally {
      await service.stop();
      await bus.close();
    }
  });
});
