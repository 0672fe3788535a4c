import { randomUUID } from 'node:crypto';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import type { Bus, BusHandler, BusSubscription, SubscribeOptions } from '../../src/bus/bus.js';
import type { MessageRejection } from '../../src/bus/codec.js';
import { registerSubjectSchema } from '../../src/bus/codec.js';
import { subjects } from '../../src/bus/subjects.js';
import { BusError, MessageRejectedError } from '../../src/errors.js';
import type { RoleRequest, RoleResult, RunEventOf } from '../../src/schemas/index.js';

/**
 * The behaviour every `Bus` must show, whatever carries the messages. It relies only on the `Bus`
 * interface: assertions follow `flush()` (which the interface defines as "everything published so
 * far has reached its handlers and they returned"), so the same suite runs against a real
 * nats-server. Every test uses a fresh run id, so buses that share a server do not see each other.
 */

/** A run id no other test uses. */
export function freshRunId(): string {
  return `run-${randomUUID()}`;
}

/** A valid `run.started` event of `runId`; `seq` tells events of one run apart. */
export function runStarted(runId: string, seq = 1): RunEventOf<'run.started'> {
  return {
    id: `${runId}-${seq}`,
    runId,
    seq,
    ts: new Date().toISOString(),
    type: 'run.started',
    payload: {
      task: 'write a haiku about queues',
      logPath: `/tmp/pge_shared_state_${runId}.md`,
      settings: {
        maxSteps: 3,
        maxRetriesPerStep: 2,
        maxContractRounds: 3,
        onStepExhausted: 'advance',
        maxReplans: 1,
        maxParallelSteps: 1,
        budgets: { maxCostUsd: null, maxTokens: null, maxDurationMs: null },
        callTimeoutMs: 60_000,
        models: { planner: 'm-plan', generator: 'm-gen', evaluator: 'm-eval' },
      },
    },
  };
}

/** A valid `plan.requested` work item of `runId`; `seq` tells requests of one run apart. */
export function planRequested(runId: string, seq = 2): RoleRequest {
  return {
    id: `${runId}-${seq}`,
    runId,
    seq,
    ts: new Date().toISOString(),
    type: 'plan.requested',
    payload: { phase: 'plan', input: { task: 'write a haiku', maxSteps: 3, replan: null } },
  };
}

/** A planner's failed result of request `requestId` of run `runId`. */
export function planFailed(runId: string, requestId: string): RoleResult {
  return {
    requestId,
    runId,
    role: 'planner',
    worker: 'w1',
    calls: [],
    result: {
      status: 'error',
      phase: 'plan',
      error: { name: 'ModelTransportError', message: 'down', retryable: true },
      raw: null,
    },
  };
}

/** A valid `step.started` event of `runId`. */
export function stepStarted(runId: string, seq = 2): RunEventOf<'step.started'> {
  return {
    id: `${runId}-${seq}`,
    runId,
    seq,
    ts: new Date().toISOString(),
    type: 'step.started',
    payload: { stepId: 's1', stepNumber: 1, title: 'Draft' },
  };
}

/** Subscribes and records the data of every message received. */
function collect(
  bus: Bus,
  subject: string,
  options?: SubscribeOptions,
): { data: unknown[]; sub: BusSubscription } {
  const data: unknown[] = [];
  const sub = bus.subscribe(subject, (message) => void data.push(message.data), options);
  return { data, sub };
}

const seqOf = (data: unknown): number => (data as { seq: number }).seq;
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Runs the bus contract against buses made by `makeBus` (one per test, closed after it). */
/** What differs between transports, and which tests apply. */
export interface BusContractOptions {
  /**
   * The bus decodes every message again on receive with the receiver's schema (a wire transport),
   * so a receiver whose schema drifted from the sender's rejects it. An in-memory bus shares one
   * schema registry between sender and receiver, so no drift can happen there.
   */
  decodesOnReceive: boolean;
}

export function describeBusContract(
  name: string,
  makeBus: () => Promise<Bus>,
  options: BusContractOptions = { decodesOnReceive: true },
): void {
  describe(`Bus contract: ${name}`, () => {
    let bus: Bus;
    let runId: string;

    beforeEach(async () => {
      bus = await makeBus();
      runId = freshRunId();
    });
    afterEach(async () => {
      await bus.close();
    });

    it('delivers a message to subscribers of its exact subject only', async () => {
      const exact = collect(bus, subjects.event(runId, 'run.started'));
      const other = collect(bus, subjects.event(runId, 'step.started'));
      const event = runStarted(runId);
      await bus.publish(subjects.event(runId, 'run.started'), event);
      await bus.flush();
      expect(exact.data).toEqual([event]);
      expect(other.data).toEqual([]);
      expect(exact.sub.subject).toBe(subjects.event(runId, 'run.started'));
      expect(exact.sub.queue).toBeNull();
    });

    it('matches `*` to exactly one token', async () => {
      // The subject is pge.run.<runId>.evt.run.started: six tokens.
      const oneToken = collect(bus, 'pge.run.*.evt.run.started');
      const inner = collect(bus, `pge.run.${runId}.evt.*.started`);
      const tooShort = collect(bus, `pge.run.${runId}.evt.*`);
      const tooLong = collect(bus, `pge.run.${runId}.evt.run.started.*`);
      await bus.publish(subjects.event(runId, 'run.started'), runStarted(runId));
      await bus.flush();
      // Other buses on a shared server may publish on pge.run.*: keep this run's messages.
      expect(oneToken.data.filter((d) => (d as { runId: string }).runId === runId)).toHaveLength(1);
      expect(inner.data).toHaveLength(1);
      expect(tooShort.data).toEqual([]);
      expect(tooLong.data).toEqual([]);
    });

    it('matches `>` to one or more trailing tokens, never to none', async () => {
      const rest = collect(bus, `pge.run.${runId}.>`);
      const lastOne = collect(bus, `pge.run.${runId}.evt.run.>`);
      const none = collect(bus, `pge.run.${runId}.evt.run.started.>`);
      await bus.publish(subjects.event(runId, 'run.started'), runStarted(runId));
      await bus.publish(subjects.event(runId, 'step.started'), stepStarted(runId));
      await bus.flush();
      expect(rest.data.map(seqOf)).toEqual([1, 2]);
      expect(lastOne.data.map(seqOf)).toEqual([1]);
      expect(none.data).toEqual([]);
    });

    it('hands each message of a queue group to exactly one member, spreading the load', async () => {
      const subject = subjects.event(runId, 'run.started');
      const queue = `workers-${runId}`;
      const members = [0, 1, 2].map(() => collect(bus, subject, { queue }));
      const total = 30;
      for (let seq = 1; seq <= total; seq++) await bus.publish(subject, runStarted(runId, seq));
      await bus.flush();
      const handled = members.flatMap((m) => m.data.map(seqOf)).sort((a, b) => a - b);
      expect(handled).toEqual(Array.from({ length: total }, (_, i) => i + 1));
      for (const member of members) expect(member.data.length).toBeGreaterThan(0);
      expect(members[0]!.sub.queue).toBe(queue);
    });

    it('hands a queue member with concurrency each of its messages once, and refuses a concurrency it cannot honour', async () => {
      const subject = subjects.event(runId, 'run.started');
      const wide = collect(bus, subject, { queue: `wide-${runId}`, concurrency: 3 });
      for (let seq = 1; seq <= 6; seq++) await bus.publish(subject, runStarted(runId, seq));
      await bus.flush();
      expect(wide.data.map(seqOf).sort()).toEqual([1, 2, 3, 4, 5, 6]);
      expect(wide.sub.queue).toBe(`wide-${runId}`);
      // A plain subscriber takes its messages in order; a count must be a whole number >= 1.
      expect(() => bus.subscribe(subject, () => {}, { concurrency: 2 })).toThrow(TypeError);
      for (const concurrency of [0, 1.5, Number.NaN])
        expect(() => bus.subscribe(subject, () => {}, { queue: 'q', concurrency })).toThrow(TypeError);
    });

    it('gives a message to every plain subscriber and to one member of each queue group', async () => {
      const subject = subjects.event(runId, 'run.started');
      const plain = [collect(bus, subject), collect(bus, subject)];
      const groupA = [
        collect(bus, subject, { queue: `a-${runId}` }),
        collect(bus, subject, { queue: `a-${runId}` }),
      ];
      const groupB = [collect(bus, subject, { queue: `b-${runId}` })];
      for (let seq = 1; seq <= 4; seq++) await bus.publish(subject, runStarted(runId, seq));
      await bus.flush();
      for (const p of plain) expect(p.data.map(seqOf)).toEqual([1, 2, 3, 4]);
      for (const group of [groupA, groupB]) {
        expect(group.flatMap((m) => m.data.map(seqOf)).sort()).toEqual([1, 2, 3, 4]);
      }
    });

    it('hands a message over with the headers it was published with, and refuses headers NATS would', async () => {
      const subject = subjects.event(runId, 'run.started');
      const got: unknown[] = [];
      bus.subscribe(subject, (message) => void got.push(message.headers));
      const headers = { traceparent: `00-${'1'.repeat(32)}-${'2'.repeat(16)}-01`, 'x-note': 'a b' };
      await bus.publish(subject, runStarted(runId, 1), { headers });
      await bus.publish(subject, runStarted(runId, 2));
      const hostiles: Record<string, string>[] = [
        { 'bad name': 'v' },
        { 'a:b': 'v' },
        { ok: 'two\r\nlines' },
      ];
      for (const hostile of hostiles)
        await expect(bus.publish(subject, runStarted(runId, 3), { headers: hostile })).rejects.toThrow(
          TypeError,
        );
      await bus.flush();
      expect(got).toHaveLength(2);
      expect(got[0]).toMatchObject(headers);
      expect(got[1]).not.toHaveProperty('traceparent');
    });

    it('stops delivering after unsubscribe', async () => {
      const subject = subjects.event(runId, 'run.started');
      const kept = collect(bus, subject);
      const dropped = collect(bus, subject);
      await bus.publish(subject, runStarted(runId, 1));
      await bus.flush();
      dropped.sub.unsubscribe();
      await bus.publish(subject, runStarted(runId, 2));
      await bus.flush();
      expect(dropped.data.map(seqOf)).toEqual([1]);
      expect(kept.data.map(seqOf)).toEqual([1, 2]);
    });

    it('lets no handler change what another handler or the publisher sees', async () => {
      const subject = subjects.event(runId, 'run.started');
      const tried: string[] = [];
      // Mutates what it got: a bus must either hand it a copy of its own or refuse the change.
      bus.subscribe(subject, (message) => {
        try {
          (message.data as { payload: { task: string } }).payload.task = 'tampered';
        } catch {
          tried.push('refused');
        }
      });
      const second = collect(bus, subject);
      const event = runStarted(runId);
      const original = structuredClone(event);
      await bus.publish(subject, event);
      await bus.flush();
      expect(second.data[0]).toEqual(original);
      expect(event).toEqual(original);
      expect(second.data[0]).not.toBe(event);
    });

    it('keeps the order of a subscription and never overlaps its handler calls', async () => {
      const subject = subjects.event(runId, 'run.started');
      const total = 10;
      const seen: number[] = [];
      let inFlight = 0;
      let maxInFlight = 0;
      bus.subscribe(subject, async (message) => {
        inFlight++;
        maxInFlight = Math.max(maxInFlight, inFlight);
        const seq = seqOf(message.data);
        // Early messages wait longest: a bus that overlapped calls would record them out of order.
        await sleep(total - seq);
        seen.push(seq);
        inFlight--;
      });
      for (let seq = 1; seq <= total; seq++) await bus.publish(subject, runStarted(runId, seq));
      await bus.flush();
      expect(seen).toEqual(Array.from({ length: total }, (_, i) => i + 1));
      expect(maxInFlight).toBe(1);
    });

    describe('request/reply', () => {
      it('resolves with the reply sent to the request’s inbox', async () => {
        const subject = `test.${runId}.echo`;
        const replySubjects: (string | null)[] = [];
        bus.subscribe(subject, async (message) => {
          replySubjects.push(message.reply);
          await message.respond({ echo: message.data });
        });
        await expect(bus.request(subject, { ping: 1 })).resolves.toEqual({ echo: { ping: 1 } });
        expect(replySubjects).toHaveLength(1);
        expect(replySubjects[0]).toMatch(/^_INBOX\./);
      });

      it('gets one reply from a queue group of responders', async () => {
        const subject = `test.${runId}.work`;
        const calls: number[] = [];
        for (const worker of [1, 2, 3]) {
          bus.subscribe(
            subject,
            (message) => {
              calls.push(worker);
              return message.respond({ worker });
            },
            { queue: `responders-${runId}` },
          );
        }
        const reply = (await bus.request(subject, {})) as { worker: number };
        await bus.flush();
        expect(calls).toEqual([reply.worker]);
      });

      it('rejects with BusError when no reply comes before the timeout', async () => {
        const subject = `test.${runId}.silent`;
        bus.subscribe(subject, () => undefined);
        const error = await bus.request(subject, {}, { timeoutMs: 50 }).catch((e: unknown) => e);
        expect(error).toBeInstanceOf(BusError);
        expect((error as Error).message).toMatch(/timed out|timeout/i);
      });

      it('rejects with BusError "no responders" at once when nothing subscribes', async () => {
        const started = Date.now();
        const error = await bus
          .request(`test.${runId}.nobody`, {}, { timeoutMs: 5_000 })
          .catch((e: unknown) => e);
        expect(error).toBeInstanceOf(BusError);
        expect((error as Error).message).toMatch(/no responders/i);
        expect(Date.now() - started).toBeLessThan(1_000);
      });

      it('answers "no responders" once the only responder unsubscribed', async () => {
        const subject = `test.${runId}.gone`;
        const sub = bus.subscribe(subject, (message) => message.respond('here'));
        await expect(bus.request(subject, {})).resolves.toBe('here');
        sub.unsubscribe();
        await expect(bus.request(subject, {}, { timeoutMs: 5_000 })).rejects.toThrow(/no responders/i);
      });

      it('refuses to respond to a message that has no reply subject', async () => {
        const subject = subjects.event(runId, 'run.started');
        const outcomes: unknown[] = [];
        bus.subscribe(subject, async (message) => {
          outcomes.push(message.reply, await message.respond({}).catch((e: unknown) => e));
        });
        await bus.publish(subject, runStarted(runId));
        await bus.flush();
        expect(outcomes[0]).toBeNull();
        expect(outcomes[1]).toBeInstanceOf(BusError);
      });
    });

    describe('validation', () => {
      it('rejects an event with a missing field and delivers nothing', async () => {
        const all = collect(bus, subjects.events(runId));
        const event = runStarted(runId, 1);
        const { task: _task, ...payload } = event.payload;
        const subject = subjects.event(runId, 'run.started');
        const error = await bus.publish(subject, { ...event, payload }).catch((e: unknown) => e);
        expect(error).toBeInstanceOf(MessageRejectedError);
        expect((error as MessageRejectedError).subject).toBe(subject);
        expect((error as Error).message).toMatch(/payload\.task/);
        await bus.publish(subject, runStarted(runId, 2));
        await bus.flush();
        expect(all.data.map(seqOf)).toEqual([2]);
      });

      it('rejects an event published on the subject of another type or run', async () => {
        const all = collect(bus, `pge.run.*.evt.>`);
        const wrongType = subjects.event(runId, 'step.started');
        const wrongRun = subjects.event(freshRunId(), 'run.started');
        for (const subject of [wrongType, wrongRun]) {
          await expect(bus.publish(subject, runStarted(runId))).rejects.toBeInstanceOf(MessageRejectedError);
        }
        await bus.flush();
        expect(all.data.filter((d) => (d as { runId: string }).runId === runId)).toEqual([]);
      });

      // Only a transport that decodes on receive can meet a receiver whose schema drifted.
      if (options.decodesOnReceive)
        it('reports a message that fails validation on receive instead of delivering it', async () => {
          // A receiver whose schema is stricter than the sender's: this schema accepts only the first
          // validation of a message, which is the sender's (publish validates exactly once).
          const subject = `pge.test.${runId}.drift`;
          let validations = 0;
          registerSubjectSchema(
            subject,
            z.object({ n: z.number() }).refine(() => ++validations === 1, 'rejected by the receiver'),
          );
          const rejections = collect(bus, subjects.rejected('*'));
          const delivered = collect(bus, subject);
          await bus.publish(subject, { n: 1 });
          await bus.flush();
          expect(delivered.data).toEqual([]);
          const mine = rejections.data.filter((r) => (r as MessageRejection).subject === subject);
          expect(mine).toHaveLength(1);
          const rejection = mine[0] as MessageRejection;
          expect(rejection.problem).toMatch(/rejected by the receiver/);
          expect(Number.isNaN(Date.parse(rejection.ts))).toBe(false);
        });
    });

    it('flushes on close, then refuses to publish, subscribe or request', async () => {
      const subject = subjects.event(runId, 'run.started');
      const handled: number[] = [];
      const handler: BusHandler = async (message) => {
        await sleep(5);
        handled.push(seqOf(message.data));
      };
      bus.subscribe(subject, handler);
      const published = bus.publish(subject, runStarted(runId, 1));
      await bus.close();
      await published;
      expect(handled).toEqual([1]);
      await expect(bus.publish(subject, runStarted(runId, 2))).rejects.toBeInstanceOf(BusError);
      await expect(bus.request(subject, runStarted(runId, 3))).rejects.toBeInstanceOf(BusError);
      expect(() => bus.subscribe(subject, handler)).toThrow(BusError);
      await bus.flush();
      expect(handled).toEqual([1]);
    });
  });
}
