import { afterEach, describe, expect, it } from 'vitest';
import { InProcessBus } from '../../src/bus/in-process-bus.js';
import { subjects } from '../../src/bus/subjects.js';
import { MessageRejectedError } from '../../src/errors.js';
import { OpenAIModel } from '../../src/roles/openai-model.js';
import { modelNames } from '../../src/runtime/services.js';
import { announcePresence, hearWorkers, PRESENCE_TTL_MS } from '../../src/runtime/worker-presence.js';

/** Which workers a coordinator knows, and their models: what `run.started` names and a cost budget checks. */

const bus = new InProcessBus();
afterEach(async () => {
  await bus.flush();
});

const presence = (
  role: 'planner' | 'generator' | 'evaluator',
  worker: string,
  model: string,
  priced = true,
) => ({
  role,
  worker,
  model,
  priced,
  ts: new Date().toISOString(),
});

describe('worker presence', () => {
  it('names each role by the distinct models of the workers heard lately, and forgets a silent one', async () => {
    let now = 1_000_000;
    const heard = hearWorkers(bus, () => now);
    try {
      await bus.publish(subjects.presence('generator'), presence('generator', 'gen-a', 'gpt-4.1'));
      await bus.publish(subjects.presence('generator'), presence('generator', 'gen-b', 'gpt-4.1-mini'));
      await bus.publish(subjects.presence('generator'), presence('generator', 'gen-c', 'gpt-4.1'));
      await bus.publish(subjects.presence('planner'), presence('planner', 'plan-a', 'local-llm', false));
      await bus.flush();
      expect(modelNames(heard)).toEqual({
        planner: 'local-llm',
        generator: 'gpt-4.1, gpt-4.1-mini',
        evaluator: 'unknown (no evaluator worker heard yet)',
      });
      expect(heard.unpriced().map((p) => p.worker)).toEqual(['plan-a']);
      // gen-b keeps saying it; the others fall silent past the TTL.
      now += PRESENCE_TTL_MS - 1;
      await bus.publish(subjects.presence('generator'), presence('generator', 'gen-b', 'gpt-4.1-mini'));
      await bus.flush();
      now += 2;
      expect(heard.models('generator')).toEqual(['gpt-4.1-mini']);
      expect(heard.unpriced()).toEqual([]);
      expect(heard.models('planner')).toEqual([]);
    } finally {
      heard.stop();
    }
  });

  it('says whether a worker of a role held a request since a time, when every worker of it says what it holds', async () => {
    let now = 1_000_000;
    const heard = hearWorkers(bus, () => now);
    const say = async (worker: string, holding?: string[]) => {
      const said = { ...presence('generator', worker, 'gpt-4.1'), ...(holding ? { holding } : {}) };
      await bus.publish(subjects.presence('generator'), said);
      await bus.flush();
    };
    try {
      // No generator heard: it cannot be told.
      expect(heard.heldSince('generator', 'req-1', now)).toBeNull();
      await say('gen-a', ['req-1']);
      await say('gen-b', []);
      expect(heard.heldSince('generator', 'req-1', now)).toBe(true);
      expect(heard.heldSince('generator', 'req-2', now)).toBe(false);
      expect(heard.heldSince('planner', 'req-1', now)).toBeNull();
      // Said before `since`: not held since.
      const said = now;
      now += 1_000;
      expect(heard.heldSince('generator', 'req-1', said + 1)).toBe(false);
      // A worker that does not say what it holds (an earlier pge): it cannot be told.
      await say('gen-c');
      expect(heard.heldSince('generator', 'req-2', said)).toBeNull();
    } finally {
      heard.stop();
    }
  });

  it('refuses a presence on another role’s subject', async () => {
    await expect(
      bus.publish(subjects.presence('generator'), presence('planner', 'plan-a', 'gpt-4.1')),
    ).rejects.toThrow(MessageRejectedError);
  });

  it('is said at once by a worker with its model and price, then again until stopped', async () => {
    const heard = hearWorkers(bus);
    const unpriced = new OpenAIModel({ model: 'my-local-model', baseURL: 'http://127.0.0.1:9/v1' });
    const priced = new OpenAIModel({ model: 'gpt-4.1-2025-04-14', baseURL: 'http://127.0.0.1:9/v1' });
    expect([unpriced.priced, priced.priced]).toEqual([false, true]);
    const stops = [
      announcePresence(
        bus,
        { role: 'evaluator', worker: 'ev-1', model: unpriced.name, priced: unpriced.priced },
        () => {},
      ),
      announcePresence(
        bus,
        { role: 'evaluator', worker: 'ev-2', model: priced.name, priced: priced.priced },
        () => {},
      ),
    ];
    try {
      await bus.flush();
      expect(heard.models('evaluator')).toEqual(['gpt-4.1-2025-04-14', 'my-local-model']);
      expect(heard.unpriced().map((p) => `${p.worker}:${p.model}`)).toEqual(['ev-1:my-local-model']);
    } finally {
      for (const stop of stops) stop();
      heard.stop();
    }
  });
});
