import { describe, expect, it } from 'vitest';
import { describeEvent as cliLine, newRunState } from '../../src/cli/event-lines.js';
import { describeEvent as timelineText } from '../../src/dashboard/event-text.js';
import { describeEvent, describeLine } from '../../src/events/describe-event.js';
import { inline, renderEvent } from '../../src/persistence/index.js';
import { RunEvent, type RunEventType } from '../../src/schemas/index.js';
import { fullRun, HOSTILE, IMPOSED_CONTRACT, makeEvent } from '../persistence/fixtures.js';

/**
 * The one event → text description: every event type has one, and the log's notes, the CLI's
 * lines and the dashboard's timeline all say its words.
 */

const EVENT_TYPES = RunEvent.options.map((s) => s.shape.type.value as RunEventType);

const run = fullRun('run-a');
const totals = {
  byPhase: [],
  passed: false,
  stepsPassed: 0,
  stepsTotal: 1,
  totalRetries: 0,
  usage: { calls: 2, promptTokens: 900, completionTokens: 300, costUsd: 0.5 },
  durationMs: 1500,
  summary: 'Stopped.',
};
const ref = { stepId: 's1', stepNumber: 1 };

/** One event of every type: the fixture run, and the types a passing run does not publish. */
const SAMPLES: RunEvent[] = [
  ...run,
  makeEvent('run-a', 39, {
    type: 'step.carried',
    payload: { ...ref, title: 'Kept step', fromRunId: 'run-0' },
  }),
  makeEvent('run-a', 40, {
    type: 'plan.truncated',
    payload: { from: 12, to: 10, droppedStepIds: ['s11', 's12'] },
  }),
  makeEvent('run-a', 41, {
    type: 'step.contract.imposed',
    payload: { ...ref, contract: IMPOSED_CONTRACT, outstandingAmendments: ['Cite sources'] },
  }),
  makeEvent('run-a', 42, {
    type: 'step.work.invalid',
    payload: { ...ref, attempt: 2, problem: 'no output', raw: null },
  }),
  makeEvent('run-a', 43, {
    type: 'step.evaluation.invalid',
    payload: { ...ref, attempt: 2, problem: 'criterion "form" has no score', raw: HOSTILE },
  }),
  makeEvent('run-a', 44, {
    type: 'step.failed',
    payload: { ...ref, attempts: 4, bestAttempt: null, policy: 'replan' },
  }),
  makeEvent('run-a', 45, {
    type: 'role.failed',
    payload: {
      requestId: 'q',
      role: 'evaluator',
      phase: 'evaluation',
      error: { name: 'ModelTransportError', message: 'down', retryable: true },
      raw: null,
    },
  }),
  makeEvent('run-a', 46, {
    type: 'request.cancelled',
    payload: { requestId: 'run-a-30', phase: 'work', reason: 'interrupted by the operator' },
  }),
  makeEvent('run-a', 47, {
    type: 'result.rejected',
    payload: { requestId: 'run-a-12', worker: 'generator-2', reason: 'duplicate' },
  }),
  makeEvent('run-a', 48, {
    type: 'run.resumed',
    payload: {
      owner: 'build-host:4242',
      fromSeq: 47,
      logPath: '/tmp/pge_shared_state_run-a.md',
      repeated: ['run-a-30'],
      pausedMs: 61_500,
      discardedBytes: 120,
    },
  }),
  makeEvent('run-a', 48, { type: 'step.plan.rejected', payload: { ...ref, attempt: 2 } }),
  makeEvent('run-a', 48, {
    type: 'approval.requested',
    payload: { gate: 'plan', stepId: null, stepNumber: null, attempt: null, summary: 'scope\n1. Step' },
  }),
  makeEvent('run-a', 48, {
    type: 'approval.decided',
    payload: { requestId: 'run-a-48', gate: 'plan', decision: 'reject', reason: 'add safety', by: 'ana' },
  }),
  makeEvent('run-a', 49, {
    type: 'run.failed',
    payload: { ...totals, reason: 'budget', message: 'maxCostUsd 0.50 reached' },
  }),
];

/** The step an event's payload names, directly or through its request input. */
function stepOf(event: RunEvent): number | null {
  const p = event.payload as { stepNumber?: number; input?: { stepNumber?: number } };
  return p.stepNumber ?? p.input?.stepNumber ?? null;
}

describe('describeEvent', () => {
  it('has a sample here for every event type of the schema', () => {
    // A new event type fails here until it has a sample, and so a description checked below.
    expect([...new Set(SAMPLES.map((e) => e.type))].sort()).toEqual([...EVENT_TYPES].sort());
  });

  it.each(SAMPLES.map((e) => [e.type, e] as const))('describes %s', (_type, event) => {
    const d = describeEvent(event);
    expect(d.text.length).toBeGreaterThan(5);
    expect(d.text).not.toMatch(/undefined|\[object|NaN/);
    expect(d.text).not.toContain(event.type);
    expect(['milestone', 'progress', 'detail']).toContain(d.level);
    expect(d.step).toBe(stepOf(event));
  });

  it('says what a person needs of the events that matter most', () => {
    const by = (type: RunEventType) => describeEvent(SAMPLES.find((e) => e.type === type)!);
    expect(by('step.attempt.judged')).toEqual({
      step: 1,
      text: 'attempt 1 failed (below threshold): form 6/8 ✗, imagery 7/6 ✓; mean 6.33',
      excerpt: null,
      level: 'progress',
    });
    expect(by('step.failed').text).toBe('failed after 4 attempts (no usable attempt); on exhausted: replan');
    expect(by('approval.requested')).toMatchObject({
      step: null,
      text: 'waiting for a decision on the plan (plan gate)',
      level: 'milestone',
    });
    expect(by('approval.decided').text).toBe('plan rejected by ana: add safety');
    expect(by('step.plan.rejected')).toMatchObject({
      step: 1,
      text: 'attempt 2: the evaluator found the plan at fault; the planner revises it',
      level: 'milestone',
    });
    expect(by('run.failed')).toMatchObject({
      step: null,
      text: 'run stopped (budget): maxCostUsd 0.50 reached; 0/1 steps passed, 1,200 tokens, $0.5000',
      level: 'milestone',
    });
    expect(by('run.resumed')).toMatchObject({
      step: null,
      text:
        'run resumed by build-host:4242 after event 47 (paused 61.5s): asking again 1 request in flight ' +
        'at the crash (run-a-30); removed a torn write of 120 bytes',
      level: 'milestone',
    });
    expect(by('step.work.completed').excerpt).toBe(
      'Waves fold into foam\nthe salt wind carries old songs\nthe tide keeps its time',
    );
  });
});

describe('the three readers say the same words', () => {
  it.each(SAMPLES.map((e) => [e.type, e] as const))('%s', (_type, event) => {
    const { text, step } = describeEvent(event);
    const line = cliLine(event, { ...newRunState(0), steps: 3 }, true);
    expect(line?.text).toBe(step === null ? text : `step ${step}/3 ${text}`);
    expect(timelineText(event).startsWith(describeLine(event).replace(/\s+/g, ' ').slice(0, 100))).toBe(true);
    const chunk = renderEvent(event);
    // Sections (the reference's headings) render the event in full; every other event is a note.
    if (chunk.includes('\n#### ')) expect(chunk).toContain(`\n\n${inline(describeLine(event))}\n\n`);
  });

  it('escapes model text in a log note, and keeps it on one line', () => {
    const started = makeEvent('run-a', 5, { type: 'step.started', payload: { ...ref, title: HOSTILE } });
    const chunk = renderEvent(started);
    expect(chunk).toContain(`\n\nStep 1 started: ${inline(HOSTILE)}\n\n`);
    expect(chunk).not.toContain('\n### [STEP 9');
  });

  it('writes a note for an invalid work, which had none', () => {
    const invalid = SAMPLES.find((e) => e.type === 'step.work.invalid')!;
    expect(renderEvent(invalid)).toContain('\n\nStep 1 attempt 2: invalid work: no output\n\n');
  });
});
