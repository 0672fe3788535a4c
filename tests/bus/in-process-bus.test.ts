import { describe, expect, it, vi } from 'vitest';
import { reportToConsole } from '../../src/bus/bus.js';
import {
  enqueueWork,
  publishEvent,
  publishResult,
  serveWork,
  subscribeEvents,
  subscribeRejections,
  subscribeResults,
} from '../../src/bus/channels.js';
import type { MessageRejection } from '../../src/bus/codec.js';
import { InProcessBus } from '../../src/bus/in-process-bus.js';
import { subjects } from '../../src/bus/subjects.js';
import { BusError, ConfigurationError } from '../../src/errors.js';
import type { RoleRequest, RoleResult, RunEvent } from '../../src/schemas/index.js';
import {
  describeBusContract,
  freshRunId,
  planFailed,
  planRequested,
  runStarted,
  stepStarted,
} from './bus-contract.js';

describeBusContract('InProcessBus', async () => new InProcessBus(), { decodesOnReceive: false });

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
const seqOf = (data: unknown): number => (data as { seq: number }).seq;

describe('InProcessBus', () => {
  it('never delivers inside the publish call', async () => {
    const bus = new InProcessBus();
    const runId = freshRunId();
    const seen: number[] = [];
    bus.subscribe(subjects.events(runId), (message) => void seen.push(seqOf(message.data)));
    const published = bus.publish(subjects.event(runId, 'run.started'), runStarted(runId));
    expect(seen).toEqual([]);
    await published;
    await bus.flush();
    expect(seen).toEqual([1]);
  });

  it('reports a throwing or rejecting handler to onHandlerError and goes on delivering', async () => {
    const onHandlerError = vi.fn();
    const bus = new InProcessBus({ onHandlerError });
    const runId = freshRunId();
    const subject = subjects.event(runId, 'run.started');
    const handled: number[] = [];
    bus.subscribe(subject, async (message) => {
      const seq = seqOf(message.data);
      if (seq === 1) throw new Error('sync boom');
      await sleep(1);
      if (seq === 2) throw new Error('async boom');
      handled.push(seq);
    });
    for (const seq of [1, 2, 3]) await bus.publish(subject, runStarted(runId, seq));
    await bus.flush();
    expect(handled).toEqual([3]);
    expect(onHandlerError.mock.calls.map(([error, at]) => [(error as Error).message, at])).toEqual([
      ['sync boom', subject],
      ['async boom', subject],
    ]);
  });

  it('keeps delivering when onHandlerError itself throws', async () => {
    const consoleError = vi.spyOn(console, 'error').mockImplementation(() => undefined);
    try {
      const bus = new InProcessBus({
        onHandlerError: () => {
          throw new Error('reporter down');
        },
      });
      const runId = freshRunId();
      const subject = subjects.event(runId, 'run.started');
      const handled: number[] = [];
      bus.subscribe(subject, (message) => {
        if (seqOf(message.data) === 1) throw new Error('boom');
        handled.push(seqOf(message.data));
      });
      await bus.publish(subject, runStarted(runId, 1));
      await bus.publish(subject, runStarted(runId, 2));
      await bus.flush();
      expect(handled).toEqual([2]);
      expect(consoleError).toHaveBeenCalledTimes(1);
    } finally {
      consoleError.mockRestore();
    }
  });

  it('drops messages not yet handed to a handler that unsubscribed', async () => {
    const bus = new InProcessBus();
    const runId = freshRunId();
    const subject = subjects.event(runId, 'run.started');
    const handled: number[] = [];
    const sub = bus.subscribe(subject, async (message) => {
      handled.push(seqOf(message.data));
      sub.unsubscribe();
      await sleep(1);
    });
    // Published in one go, so that 2 and 3 are queued for the subscription before it unsubscribes.
    await Promise.all([1, 2, 3].map((seq) => bus.publish(subject, runStarted(runId, seq))));
    await bus.flush();
    expect(handled).toEqual([1]);
  });

  it('flushes only after the messages that handlers published in turn were handled', async () => {
    const bus = new InProcessBus();
    const runId = freshRunId();
    const finished: string[] = [];
    bus.subscribe(subjects.event(runId, 'run.started'), async () => {
      await sleep(5);
      await bus.publish(subjects.event(runId, 'step.started'), stepStarted(runId));
    });
    bus.subscribe(subjects.event(runId, 'step.started'), async () => {
      await sleep(5);
      finished.push('step');
    });
    await bus.publish(subjects.event(runId, 'run.started'), runStarted(runId));
    await bus.flush();
    expect(finished).toEqual(['step']);
  });

  it('shares a queue group round-robin, even across patterns', async () => {
    const bus = new InProcessBus();
    const runId = freshRunId();
    const subject = subjects.event(runId, 'run.started');
    const counts = [0, 0, 0];
    const patterns = [subject, subjects.events(runId), subjects.events('*')];
    patterns.forEach((pattern, i) => {
      bus.subscribe(pattern, () => void counts[i]!++, { queue: 'shared' });
    });
    for (let seq = 1; seq <= 9; seq++) await bus.publish(subject, runStarted(runId, seq));
    await bus.flush();
    expect(counts).toEqual([3, 3, 3]);
  });

  it('runs up to `concurrency` handler calls of a queue member at once, and no more', async () => {
    const bus = new InProcessBus();
    const runId = freshRunId();
    const subject = subjects.event(runId, 'run.started');
    let inFlight = 0;
    let most = 0;
    let calls = 0;
    let release = () => {};
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    const sub = bus.subscribe(
      subject,
      async () => {
        calls++;
        inFlight++;
        most = Math.max(most, inFlight);
        await gate;
        inFlight--;
      },
      { queue: 'wide', concurrency: 3 },
    );
    for (let seq = 1; seq <= 7; seq++) await bus.publish(subject, runStarted(runId, seq));
    await new Promise((resolve) => setTimeout(resolve, 10));
    expect(inFlight).toBe(3);
    release();
    await bus.flush();
    expect(most).toBe(3);
    expect(calls).toBe(7);
    // Unsubscribing the member unsubscribes all it is made of.
    sub.unsubscribe();
    await bus.publish(subject, runStarted(runId, 8));
    await bus.flush();
    expect(calls).toBe(7);
  });

  it('hands a message to its subscribers in the order they subscribed, across patterns', async () => {
    const bus = new InProcessBus();
    const runId = freshRunId();
    const subject = subjects.event(runId, 'run.started');
    const calls: string[] = [];
    // Interleaved patterns: grouping subscriptions by pattern must not regroup their deliveries.
    bus.subscribe(subjects.events('*'), () => void calls.push('all 1'));
    bus.subscribe(subject, () => void calls.push('exact 1'));
    bus.subscribe(subjects.events('*'), () => void calls.push('all 2'));
    const gone = bus.subscribe(subjects.events(runId), () => void calls.push('run'));
    bus.subscribe(subject, () => void calls.push('exact 2'));
    gone.unsubscribe();
    await bus.publish(subject, runStarted(runId));
    await bus.flush();
    expect(calls).toEqual(['all 1', 'exact 1', 'all 2', 'exact 2']);
  });

  it('routes to subscriptions made after earlier publishes on the same subject', async () => {
    const bus = new InProcessBus();
    const runId = freshRunId();
    const subject = subjects.event(runId, 'run.started');
    const early: number[] = [];
    const late: number[] = [];
    bus.subscribe(subject, (message) => void early.push(seqOf(message.data)));
    await bus.publish(subject, runStarted(runId, 1));
    bus.subscribe(subjects.events('*'), (message) => void late.push(seqOf(message.data)));
    await bus.publish(subject, runStarted(runId, 2));
    await bus.flush();
    expect(early).toEqual([1, 2]);
    expect(late).toEqual([2]);
  });

  it('routes correctly past the route cache bound', async () => {
    const bus = new InProcessBus();
    const seen = new Set<string>();
    bus.subscribe('t.>', (message) => void seen.add(message.subject));
    for (let i = 0; i < 5000; i++) await bus.publish(`t.${i}`, { i });
    await bus.flush();
    expect(seen.size).toBe(5000);
    await bus.publish('t.0', { again: true });
    await bus.flush();
    expect(seen.size).toBe(5000);
  });

  it('refuses malformed subjects and unknown options', async () => {
    const bus = new InProcessBus();
    for (const pattern of ['a..b', '.a', 'a.', 'a.>.b', 'a b', '']) {
      expect(() => bus.subscribe(pattern, () => undefined), pattern).toThrow(TypeError);
    }
    expect(() => bus.subscribe('a', () => undefined, { queue: 'has space' })).toThrow(TypeError);
    for (const subject of ['a.*', 'a.>', 'a..b']) {
      await expect(bus.publish(subject, {}), subject).rejects.toBeInstanceOf(TypeError);
    }
    expect(() => new InProcessBus({ validate: false } as never)).toThrow(ConfigurationError);
  });

  it('rejects a request still waiting for its reply when the bus closes', async () => {
    const bus = new InProcessBus();
    bus.subscribe('test.silent', () => undefined);
    const pending = bus.request('test.silent', {}, { timeoutMs: 60_000 });
    await bus.close();
    await expect(pending).rejects.toThrow(/closed/);
    await expect(pending).rejects.toBeInstanceOf(BusError);
  });
});

describe('channels', () => {
  it('publishes events on their subject and follows one run or every run', async () => {
    const bus = new InProcessBus();
    const [a, b] = [freshRunId(), freshRunId()];
    const ofA: RunEvent[] = [];
    const ofAll: RunEvent[] = [];
    subscribeEvents(bus, a, (event) => void ofA.push(event));
    subscribeEvents(bus, '*', (event) => void ofAll.push(event));
    const raw: string[] = [];
    bus.subscribe(subjects.event(b, 'step.started'), (message) => void raw.push(message.subject));
    await publishEvent(bus, runStarted(a));
    await publishEvent(bus, stepStarted(b));
    await bus.flush();
    expect(ofA.map((e) => e.type)).toEqual(['run.started']);
    expect(ofAll.map((e) => e.runId)).toEqual([a, b]);
    expect(raw).toEqual([subjects.event(b, 'step.started')]);
  });

  it('rejects, rather than throws, an event whose run id cannot be a subject token', async () => {
    const bus = new InProcessBus();
    const published = publishEvent(bus, { ...runStarted('x'), runId: 'a.b' });
    await expect(published).rejects.toThrow(/cannot be used in a subject/);
  });

  it('queues work for the role that serves it and shares it among that role’s workers', async () => {
    const bus = new InProcessBus();
    const runId = freshRunId();
    const planners = [[], []] as RoleRequest[][];
    const generator: RoleRequest[] = [];
    for (const got of planners) serveWork(bus, 'planner', async (request) => void got.push(request));
    serveWork(bus, 'generator', async (request) => void generator.push(request));
    for (let seq = 1; seq <= 4; seq++) await enqueueWork(bus, planRequested(runId, seq));
    await bus.flush();
    expect(planners.map((got) => got.length)).toEqual([2, 2]);
    expect(
      planners
        .flat()
        .map((r) => r.seq)
        .sort(),
    ).toEqual([1, 2, 3, 4]);
    expect(generator).toEqual([]);
  });

  it('publishes results on their run’s subject', async () => {
    const bus = new InProcessBus();
    const [a, b] = [freshRunId(), freshRunId()];
    const ofA: RoleResult[] = [];
    const ofAll: RoleResult[] = [];
    subscribeResults(bus, a, (result) => void ofA.push(result));
    subscribeResults(bus, '*', (result) => void ofAll.push(result));
    await publishResult(bus, planFailed(a, 'r1'));
    await publishResult(bus, planFailed(b, 'r2'));
    await bus.flush();
    expect(ofA.map((r) => r.requestId)).toEqual(['r1']);
    expect(ofAll.map((r) => r.requestId)).toEqual(['r1', 'r2']);
  });

  it('follows the rejections reported on pge.errors.rejected.*', async () => {
    const bus = new InProcessBus();
    const rejections: MessageRejection[] = [];
    subscribeRejections(bus, (rejection) => void rejections.push(rejection));
    const report = { subject: 'pge.work.generator', problem: 'not JSON', ts: new Date().toISOString() };
    await bus.publish(subjects.rejected('evaluator'), report);
    await bus.flush();
    expect(rejections).toEqual([report]);
  });

  it('hands every handler the same frozen copy that passed validation on publish', async () => {
    const bus = new InProcessBus();
    const runId = freshRunId();
    const seen: unknown[] = [];
    bus.subscribe(subjects.event(runId, 'run.started'), (m) => void seen.push(m.data));
    bus.subscribe(subjects.event(runId, 'run.started'), (m) => void seen.push(m.data));
    await bus.publish(subjects.event(runId, 'run.started'), runStarted(runId));
    await bus.flush();
    expect(seen).toHaveLength(2);
    expect(seen[0]).toBe(seen[1]);
    expect(Object.isFrozen((seen[0] as { payload: object }).payload)).toBe(true);
  });
});

describe('reportToConsole, the buses’ default onHandlerError', () => {
  it("prints a bus's own report as its message, and a handler's failure whole", () => {
    const printed = vi.spyOn(console, 'error').mockImplementation(() => undefined);
    try {
      reportToConsole(
        new BusError('127.0.0.1:4222 has left JetStream pulls unserved for 11 s'),
        'connection',
      );
      const failure = new TypeError('the handler broke');
      reportToConsole(failure, 'pge.work.generator');
      expect(printed.mock.calls).toEqual([
        ['pge bus: connection: 127.0.0.1:4222 has left JetStream pulls unserved for 11 s'],
        ['pge bus: handler for pge.work.generator failed:', failure],
      ]);
    } finally {
      printed.mockRestore();
    }
  });
});
