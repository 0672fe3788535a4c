import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { PgeOptions } from '../../src/api/options.js';
import { PlannerGeneratorEvaluator } from '../../src/api/planner-generator-evaluator.js';
import { ResumeError } from '../../src/errors.js';
import { readLogFile } from '../../src/persistence/index.js';
import { DemoModel, titledDeliverable } from '../../src/roles/demo-model.js';
import type { Model } from '../../src/roles/model.js';
import { replayLog } from '../../src/runtime/replay-log.js';
import type { RunEventType } from '../../src/schemas/index.js';
import { type Script, type ScriptedAnswer, ScriptedModel } from '../../src/testing.js';
import { approve, evaluate, planOf, proposal, times, work } from '../support/scripts.js';

/**
 * `pge replay` as a regression check: a recorded run of each path of the charts replays
 * identically with no model call, and a log whose recorded answers were altered does not.
 */

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'pge-replay-'));
});
afterEach(() => {
  rmSync(dir, { recursive: true, force: true });
});

/**
 * Runs a task with `model` in every role; returns its log's path (whatever the run's outcome).
 * `interrupt`, when given, is set to the instance's `interrupt`, for a model or listener to call.
 */
async function recordedRun(
  model: Model,
  options: PgeOptions = {},
  interrupt?: { run: (reason?: string) => void },
): Promise<string> {
  const log = join(dir, `run-${Math.random().toString(36).slice(2)}.md`);
  const pge = new PlannerGeneratorEvaluator({
    plannerAgent: model,
    generatorAgent: model,
    evaluatorAgent: model,
    workingDirectory: dir,
    sharedStatePath: log,
    maxRepairs: 0,
    ...options,
  });
  if (interrupt) interrupt.run = (reason) => pge.interrupt(reason);
  await pge.run('Write a short guide').catch(() => undefined);
  await pge.close();
  return log;
}

const amend: ScriptedAnswer = {
  json: { status: 'amendments_required', amendments: ['cite'], rationale: 'r' },
};
const planFault: ScriptedAnswer = (request, input) => {
  const answer = (evaluate(3) as (r: typeof request, i: unknown) => { json: object })(request, input);
  return { json: { ...answer.json, failureKind: 'plan' } };
};

/** One script per path of the charts, with the options that lead there and an event it must show. */
const PATHS: [string, Script, PgeOptions, RunEventType][] = [
  [
    'contract imposed at the round bound, refine',
    {
      plan: [{ json: planOf(1) }],
      contract: [proposal],
      contract_review: [amend],
      work: times(2, work()),
      evaluation: [evaluate(5), evaluate(9)],
    },
    { maxContractRounds: 1 },
    'step.contract.imposed',
  ],
  [
    'invalid work and an invalid evaluation fail their attempts',
    {
      plan: [{ json: planOf(1) }],
      contract: [proposal],
      contract_review: [approve],
      work: [{ raw: 'not json' }, work(), work()],
      evaluation: [{ raw: '{"scores": []}' }, evaluate(9)],
    },
    {},
    'step.evaluation.invalid',
  ],
  [
    'exhausted, then a replan',
    {
      plan: [{ json: planOf(1) }, { json: planOf(1) }],
      contract: times(2, proposal),
      contract_review: times(2, approve),
      work: times(3, work()),
      evaluation: [evaluate(3), evaluate(4), evaluate(9)],
    },
    { maxRetriesPerStep: 1, onStepExhausted: 'replan' },
    'step.failed',
  ],
  [
    'a plan-level rejection goes to the planner',
    {
      plan: [{ json: planOf(1) }, { json: planOf(1) }],
      contract: times(2, proposal),
      contract_review: times(2, approve),
      work: times(2, work()),
      evaluation: [planFault, evaluate(9)],
    },
    {},
    'step.plan.rejected',
  ],
  [
    'exhausted under abort',
    {
      plan: [{ json: planOf(2) }],
      contract: [proposal],
      contract_review: [approve],
      work: [work()],
      evaluation: [evaluate(2)],
    },
    { maxRetriesPerStep: 0, onStepExhausted: 'abort' },
    'run.failed',
  ],
  [
    'a budget stops the run',
    { plan: [{ json: planOf(1) }], contract: [proposal], contract_review: [approve] },
    { maxTokens: 400 },
    'run.failed',
  ],
  [
    'a role failure fails the run',
    {
      plan: [{ json: planOf(1) }],
      contract: [proposal],
      contract_review: [approve],
      work: [{ throws: new Error('the model server went away') }],
    },
    { maxRetries: 0 },
    'role.failed',
  ],
];

describe('pge replay', () => {
  it('replays the demo run (a negotiation, refine, pivot, tool calls, a failed validator) with no model call', async () => {
    const log = await recordedRun(new DemoModel(), { validators: [titledDeliverable] });
    const events = await readLogFile(log);
    expect(
      events.some((e) => e.type === 'step.work.completed' && e.payload.validation?.some((v) => !v.passed)),
    ).toBe(true);
    expect(await replayLog(log)).toEqual({
      runId: events[0]!.runId,
      identical: true,
      events: events.length,
      modelCalls: 0,
      firstDifference: null,
    });
  });

  it('replays the committed fixture of a demo run: a change to the charts that alters a recorded run fails here', async () => {
    // Recorded with `pge demo --log demo-run.md`; record it again only for a change meant to alter runs.
    const report = await replayLog(join(import.meta.dirname, '../fixtures/logs/demo-run.md'));
    expect(report).toMatchObject({ identical: true, events: 95, modelCalls: 0 });
  });

  it.each(PATHS)('replays a recorded run identically: %s', async (_path, script, options, shows) => {
    const log = await recordedRun(new ScriptedModel(script), options);
    const events = await readLogFile(log);
    expect(events.map((e) => e.type)).toContain(shows);
    expect(await replayLog(log)).toMatchObject({ identical: true, modelCalls: 0, firstDifference: null });
  });

  it('replays a run a person interrupted in the middle of a call, through its interruption', async () => {
    const scripted = new ScriptedModel({
      plan: [{ json: planOf(2) }],
      contract: [proposal, proposal],
      contract_review: [approve, approve],
      work: [work()],
      evaluation: [evaluate(9)],
    });
    const interrupt = { run: (_reason?: string) => {} };
    let works = 0;
    // The second step's work never answers: the person interrupts the run while it waits.
    const model: Model = {
      name: 'scripted-then-stuck',
      complete: (request) => {
        if (request.phase !== 'work' || ++works < 2) return scripted.complete(request);
        interrupt.run('the reviewer has seen enough');
        return new Promise((_, reject) =>
          request.signal?.addEventListener('abort', () => reject(request.signal?.reason), { once: true }),
        );
      },
    };
    const log = await recordedRun(model, {}, interrupt);
    const events = await readLogFile(log);
    expect(events.at(-1)).toMatchObject({
      type: 'run.failed',
      payload: { reason: 'interrupted', message: 'the run was interrupted: the reviewer has seen enough' },
    });
    expect(events.map((e) => e.type)).toContain('request.cancelled');
    const report = await replayLog(log);
    expect(report).toMatchObject({ identical: true, modelCalls: 0, firstDifference: null });
    expect(report.events).toBe(events.length);
  });

  it('replays a log written before run.failed carried interruptReason, reading the reason from its message', async () => {
    const interrupt = { run: (_reason?: string) => {} };
    for (const reason of ['the reviewer has seen enough', undefined]) {
      const scripted = new ScriptedModel({ plan: [{ json: planOf(1) }], contract: [proposal] });
      // The contract's review never answers: the run is interrupted while it waits.
      const model: Model = {
        name: 'scripted-then-stuck',
        complete: (request) => {
          if (request.phase !== 'contract_review') return scripted.complete(request);
          interrupt.run(reason);
          return new Promise((_, reject) =>
            request.signal?.addEventListener('abort', () => reject(request.signal?.reason), { once: true }),
          );
        },
      };
      const log = await recordedRun(model, {}, interrupt);
      expect((await readLogFile(log)).at(-1)!.payload).toMatchObject({ interruptReason: reason ?? null });
      // The same log as a pge that did not record the field wrote it.
      const text = readFileSync(log, 'utf8');
      const older = text.replace(/,"interruptReason":(null|"[^"]*")/, '');
      expect(older).not.toBe(text);
      writeFileSync(log, older);
      const closing = (await readLogFile(log)).at(-1)!;
      expect(closing.payload).not.toHaveProperty('interruptReason');
      expect(closing.payload).toMatchObject({
        message: reason ? `the run was interrupted: ${reason}` : 'the run was interrupted',
      });
      expect(await replayLog(log)).toMatchObject({ identical: true, modelCalls: 0, firstDifference: null });
      // A log whose field disagrees with the interrupt the replay gives is found out.
      writeFileSync(
        log,
        text.replace(/"interruptReason":(null|"[^"]*")/, '"interruptReason":"another reason"'),
      );
      expect((await replayLog(log)).identical).toBe(false);
    }
  });

  it('replays a run interrupted at an approval gate, through its interruption', async () => {
    const interrupt = { run: (_reason?: string) => {} };
    const log = await recordedRun(
      new ScriptedModel({ plan: [{ json: planOf(1) }] }),
      {
        approve: ['plan'],
        onEvent: (event) => {
          if (event.type === 'approval.requested') interrupt.run();
        },
      },
      interrupt,
    );
    const events = await readLogFile(log);
    expect(events.map((e) => e.type).slice(-2)).toEqual(['approval.requested', 'run.failed']);
    expect(await replayLog(log)).toMatchObject({ identical: true, modelCalls: 0, firstDifference: null });
  });

  it('finds where a log whose recorded answer was altered parts from its replay', async () => {
    const log = await recordedRun(
      new ScriptedModel({
        plan: [{ json: planOf(1) }],
        contract: [proposal],
        contract_review: [approve],
        work: [work()],
        evaluation: [evaluate(9)],
      }),
    );
    const events = await readLogFile(log);
    // The evaluation said 9 for accuracy: the log is edited to say 2, so the recorded verdict no longer follows.
    const text = readFileSync(log, 'utf8');
    const edited = text.replace(
      '"criterion":"accuracy","score":9,"evidence"',
      '"criterion":"accuracy","score":2,"evidence"',
    );
    expect(edited).not.toBe(text);
    writeFileSync(log, edited);
    const judged = events.find((e) => e.type === 'step.attempt.judged')!;
    const report = await replayLog(log);
    expect(report).toMatchObject({ identical: false, modelCalls: 0 });
    expect(report.firstDifference).toEqual({
      seq: judged.seq,
      problem: expect.stringMatching(/^step\.attempt\.judged differs at payload\./),
    });
  });

  it('refuses a run that has not ended, and a file that is no log', async () => {
    const log = await recordedRun(new ScriptedModel({ plan: [{ json: planOf(1) }] }));
    const events = readFileSync(log, 'utf8');
    // Cut the log before its closing event: a run still going is resumed, not replayed.
    writeFileSync(log, events.slice(0, events.lastIndexOf('### [')));
    await expect(replayLog(log)).rejects.toThrow(ResumeError);
    await expect(replayLog(log)).rejects.toThrow(/has not ended .*: resume it instead/);
    writeFileSync(join(dir, 'notes.md'), '# notes\n');
    await expect(replayLog(join(dir, 'notes.md'))).rejects.toThrow(/cannot replay/);
  });
});
