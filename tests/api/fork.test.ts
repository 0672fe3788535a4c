import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { PgeOptions } from '../../src/api/options.js';
import { PlannerGeneratorEvaluator } from '../../src/api/planner-generator-evaluator.js';
import { ResumeError } from '../../src/errors.js';
import { readLogFile } from '../../src/persistence/index.js';
import { inputOf } from '../../src/roles/prompts.js';
import { replayLog } from '../../src/runtime/replay-log.js';
import type { RunEventOf } from '../../src/schemas/index.js';
import { type FakeOpenAI, type FakeStep, startFakeOpenAI } from '../support/fake-openai-server.js';
import { answers, asksForTools, schemaOf, toolAnswers } from '../support/scripted-deployment.js';

/**
 * `fork`: a new run that takes a recorded run's events before step N and calls models from step N
 * on, counted on the model server's wire, through the real openai SDK.
 */

let dir: string;
let openai: FakeOpenAI;
// biome-ignore lint/suspicious/noExplicitAny: request bodies as the SDK sent them.
type Body = any;

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'pge-fork-'));
  openai = await startFakeOpenAI();
  openai.script((body: Body): FakeStep => {
    const schema = schemaOf(body) ?? '';
    // The first work of each step writes a file, so that the workspace has something to carry over.
    if (schema === 'pge_work' && toolAnswers(body).length === 0 && body.tools) {
      const { stepNumber } = inputOf(body.messages) as { stepNumber: number };
      return asksForTools([
        { name: 'write_file', arguments: { path: `step-${stepNumber}.md`, content: 'x' } },
      ]);
    }
    // Scores 5 on the first attempt of every step, then 9: each step has one retry.
    const input = inputOf(body.messages) as { attempt?: number };
    return { content: answers(input.attempt === 1 ? 5 : 9, 3)[schema] ?? {} };
  });
});
afterEach(async () => {
  await openai.close();
  rmSync(dir, { recursive: true, force: true });
});

function harness(options: PgeOptions = {}): PlannerGeneratorEvaluator {
  return new PlannerGeneratorEvaluator({
    modelName: 'test-model',
    baseURL: openai.url,
    apiKey: 'sk-test-fork',
    workingDirectory: dir,
    maxRetries: 0,
    ...options,
  });
}

/** The requests the model server received after the first `from`. */
const askedSince = (from: number) => openai.completions().slice(from);

describe('fork', () => {
  it('reuses the plan and the steps before N, calls models from step N on, and names its parent', async () => {
    const parent = harness();
    await parent.run('Write a three-part guide');
    await parent.close();
    const parentLog = parent.lastResult!.outputPath;
    const parentEvents = await readLogFile(parentLog);
    const since = openai.completions().length;

    // In a working directory of its own: the parent's workspace is found where its log says.
    const fork = harness({ generatorModelName: 'other-generator', workingDirectory: join(dir, 'forks') });
    const forkLog = join(dir, 'fork.md');
    await fork.fork(parentLog, { fromStep: 2, logPath: forkLog, settings: { maxRetriesPerStep: 1 } });
    await fork.close();

    // Counted on the wire: nothing for the plan or step 1; steps 2 and 3 are asked again.
    const asked = askedSince(since).map(
      (r) => (inputOf((r.body as Body).messages) as { stepNumber?: number }).stepNumber ?? 0,
    );
    expect(asked.length).toBeGreaterThan(0);
    expect(asked.every((step) => step >= 2)).toBe(true);
    const works = askedSince(since).filter((r) => schemaOf(r.body) === 'pge_work');
    expect(works.every((r) => (r.body as Body).model === 'other-generator')).toBe(true);

    const events = await readLogFile(forkLog);
    const started = events[0]!;
    expect(started.runId).not.toBe(parentEvents[0]!.runId);
    expect(started).toMatchObject({
      type: 'run.started',
      payload: {
        logPath: forkLog,
        parent: { runId: parentEvents[0]!.runId, logPath: parentLog, fromStep: 2 },
        settings: { maxRetriesPerStep: 1, models: { generator: 'other-generator' } },
      },
    });
    expect(readFileSync(forkLog, 'utf8')).toContain(`- **Forked from**: run ${parentEvents[0]!.runId}`);
    // The events before step 2 are the parent's, under the fork's id.
    const before = parentEvents.findIndex((e) => e.type === 'step.started' && e.payload.stepNumber === 2);
    expect(events.slice(1, before).map((e) => [e.seq, e.type, e.payload])).toEqual(
      parentEvents
        .slice(1, before)
        .map((e) => [
          e.seq,
          e.type,
          JSON.parse(JSON.stringify(e.payload).replaceAll(e.runId, started.runId)),
        ]),
    );
    expect(events.at(-1)).toMatchObject({ type: 'run.completed', payload: { passed: true, stepsPassed: 3 } });
    // Its workspace started as the parent's: step 1's file is there, written by the parent.
    const workspace = join(dir, 'forks', 'workspaces', started.runId);
    expect((started as RunEventOf<'run.started'>).payload.settings.acting?.workspace).toBe(workspace);
    expect(readdirSync(workspace).sort()).toEqual(['step-1.md', 'step-2.md', 'step-3.md']);
    // A fork's log replays like any other.
    expect(await replayLog(forkLog)).toMatchObject({ identical: true, modelCalls: 0 });
  });

  it('refuses settings that would change the steps before N, before any call, leaving no log', async () => {
    const parent = harness();
    await parent.run('Write a three-part guide');
    await parent.close();
    const since = openai.completions().length;
    const fork = harness();
    const forkLog = join(dir, 'fork.md');
    // Step 1 took a retry: with no retries it would have gone another way.
    const forked = fork.fork(parent.lastResult!.outputPath, {
      fromStep: 2,
      logPath: forkLog,
      settings: { maxRetriesPerStep: 0 },
    });
    await expect(forked).rejects.toThrow(ResumeError);
    await expect(forked).rejects.toThrow(
      /cannot fork .* from step 2 with these settings: .*at seq \d+: the log has step\.retry\.scheduled/,
    );
    await fork.close();
    expect(askedSince(since)).toHaveLength(0);
    expect(existsSync(forkLog)).toBe(false);
    await expect(fork.fork(parent.lastResult!.outputPath, { fromStep: 7 })).rejects.toThrow(
      /cannot fork .* from step 7: its run started steps 1, 2, 3/,
    );
  });
});
