import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  decodeMessage,
  encodeMessage,
  freezeMessage,
  registerSubjectSchema,
  sealMessage,
  validateMessage,
} from '../../src/bus/codec.js';
import { subjects } from '../../src/bus/subjects.js';
import { MessageRejectedError } from '../../src/errors.js';
import { freshRunId, planFailed, planRequested, runStarted } from './bus-contract.js';

const bytes = (text: string) => new TextEncoder().encode(text);

/** Calls `fn`, which must throw a `MessageRejectedError`, and returns that error. */
function rejection(fn: () => unknown): MessageRejectedError {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(MessageRejectedError);
    return error as MessageRejectedError;
  }
  throw new Error('expected a MessageRejectedError, nothing was thrown');
}

describe('validateMessage', () => {
  it('returns a parsed copy of a valid event', () => {
    const runId = freshRunId();
    const event = runStarted(runId);
    const parsed = validateMessage(subjects.event(runId, 'run.started'), event);
    expect(parsed).toEqual(event);
    expect(parsed).not.toBe(event);
  });

  it('names the subject and the failing field', () => {
    const runId = freshRunId();
    const event = runStarted(runId);
    const subject = subjects.event(runId, 'run.started');
    const settings = { ...event.payload.settings, maxSteps: 0 };
    const error = rejection(() =>
      validateMessage(subject, { ...event, payload: { ...event.payload, settings } }),
    );
    expect(error.subject).toBe(subject);
    expect(error.message).toContain(subject);
    expect(error.message).toMatch(/payload\.settings\.maxSteps/);
  });

  it('rejects an event of a type the contract does not have, handed over or not', () => {
    const runId = freshRunId();
    const subject = subjects.event(runId, 'step.vanished' as never);
    const made = { ...runStarted(runId), type: 'step.vanished' };
    expect(rejection(() => validateMessage(subject, made)).message).toMatch(/type/);
    expect(rejection(() => sealMessage(subject, freezeMessage({ ...made }))).message).toMatch(/type/);
  });

  it('rejects a field the schema does not know', () => {
    const runId = freshRunId();
    const error = rejection(() =>
      validateMessage(subjects.event(runId, 'run.started'), { ...runStarted(runId), extra: true }),
    );
    expect(error.message).toMatch(/extra/);
  });

  it('rejects an event on the subject of another type or another run', () => {
    const runId = freshRunId();
    const event = runStarted(runId);
    const wrongType = rejection(() => validateMessage(subjects.event(runId, 'step.started'), event));
    expect(wrongType.message).toMatch(/does not belong/);
    const other = subjects.event(freshRunId(), 'run.started');
    expect(rejection(() => validateMessage(other, event)).subject).toBe(other);
  });

  it('ties work items to the queue of the role that serves them', () => {
    const request = planRequested(freshRunId());
    expect(validateMessage(subjects.work('planner'), request)).toEqual(request);
    expect(rejection(() => validateMessage(subjects.work('generator'), request)).message).toMatch(
      /plan\.requested does not belong/,
    );
  });

  it('ties a result to its run’s and its role’s subject', () => {
    const runId = freshRunId();
    const result = planFailed(runId, 'req-1');
    expect(validateMessage(subjects.result(runId, 'planner'), result)).toEqual(result);
    expect(
      rejection(() => validateMessage(subjects.result(freshRunId(), 'planner'), result)).message,
    ).toMatch(/does not belong/);
    // A worker of another role cannot answer for the planner, even on the right run.
    expect(rejection(() => validateMessage(subjects.result(runId, 'evaluator'), result)).message).toMatch(
      /a planner result for run .* does not belong on pge\.run\..*\.result\.evaluator/,
    );
  });

  it('validates rejection reports', () => {
    const report = { subject: 'pge.work.planner', problem: 'bad', ts: new Date().toISOString() };
    expect(validateMessage(subjects.rejected('generator'), report)).toEqual(report);
    rejection(() => validateMessage(subjects.rejected('pge'), { ...report, ts: 'yesterday' }));
  });

  it('passes `_INBOX` replies and other subjects outside the contract through unchanged', () => {
    const reply = { anything: [1, 'two'] };
    expect(validateMessage('_INBOX.abc.1', reply)).toBe(reply);
    expect(validateMessage('_INBOX.abc.1', 'text')).toBe('text');
  });

  it('applies a schema registered for a later module’s subject', () => {
    const pattern = `pge.test.${freshRunId()}.*`;
    registerSubjectSchema(pattern, z.strictObject({ task: z.string().min(1) }));
    const subject = pattern.replace('*', 'submit');
    expect(validateMessage(subject, { task: 'x' })).toEqual({ task: 'x' });
    expect(rejection(() => validateMessage(subject, { task: '' })).message).toMatch(/task/);
  });
});

describe('encodeMessage / decodeMessage', () => {
  it('round-trips a valid event', () => {
    const runId = freshRunId();
    const subject = subjects.event(runId, 'run.started');
    const event = runStarted(runId);
    expect(decodeMessage(subject, encodeMessage(subject, event))).toEqual(event);
  });

  it('refuses to encode an invalid message', () => {
    const runId = freshRunId();
    const error = rejection(() =>
      encodeMessage(subjects.event(runId, 'run.started'), { type: 'run.started' }),
    );
    expect(error.message).toMatch(/payload/);
  });

  it('rejects bytes that are not JSON, naming the subject', () => {
    const subject = subjects.work('planner');
    const error = rejection(() => decodeMessage(subject, bytes('{"type": "plan.req')));
    expect(error.subject).toBe(subject);
    expect(error.message).toBe(`invalid message on ${subject}: not JSON`);
    expect(error.cause).toBeInstanceOf(SyntaxError);
    expect(rejection(() => decodeMessage('_INBOX.abc.1', bytes('not json'))).subject).toBe('_INBOX.abc.1');
  });

  it('rejects JSON that fails the subject’s schema', () => {
    const runId = freshRunId();
    const subject = subjects.event(runId, 'run.started');
    const { payload: _payload, ...envelope } = runStarted(runId);
    const error = rejection(() => decodeMessage(subject, bytes(JSON.stringify(envelope))));
    expect(error.message).toMatch(/payload/);
  });

  it('decodes any JSON on an `_INBOX` subject', () => {
    expect(decodeMessage('_INBOX.abc.1', bytes('{"ok":true,"n":[1,2]}'))).toEqual({ ok: true, n: [1, 2] });
  });
});

describe('handed-over messages (freezeMessage)', () => {
  it('are checked in place: the sender’s own object is what handlers get, deep-frozen', () => {
    const runId = freshRunId();
    const event = freezeMessage(runStarted(runId));
    expect(Object.isFrozen(event)).toBe(true);
    expect(Object.isFrozen(event.payload.settings.budgets)).toBe(true);
    expect(sealMessage(subjects.event(runId, 'run.started'), event)).toBe(event);
    // The mark is invisible to JSON and to key listings.
    expect(Object.keys(event)).toEqual(Object.keys(runStarted(runId)));
    expect(
      JSON.parse(new TextDecoder().decode(encodeMessage(subjects.event(runId, 'run.started'), event))),
    ).toEqual(JSON.parse(JSON.stringify(event)));
  });

  it('are still refused when invalid, with the schema’s own message', () => {
    const runId = freshRunId();
    const bad = freezeMessage({ ...runStarted(runId), seq: -1 });
    const error = rejection(() => sealMessage(subjects.event(runId, 'run.started'), bad));
    expect(error.message).toMatch(/invalid message on pge\.run\..*\.evt\.run\.started/);
    expect(error.message).toMatch(/seq/);
    rejection(() => encodeMessage(subjects.event(runId, 'run.started'), bad));
  });

  it('are refused on the subject of another type, even just after passing on their own', () => {
    const runId = freshRunId();
    const request = freezeMessage(planRequested(runId));
    expect(sealMessage(subjects.event(runId, 'plan.requested'), request)).toBe(request);
    expect(sealMessage(subjects.work('planner'), request)).toBe(request);
    rejection(() => sealMessage(subjects.work('generator'), request));
    rejection(() => sealMessage(subjects.event(runId, 'run.started'), request));
  });

  it('a message not handed over is parsed into a frozen copy, the sender’s object left as it was', () => {
    const runId = freshRunId();
    const event = runStarted(runId);
    const sealed = sealMessage(subjects.event(runId, 'run.started'), event);
    expect(sealed).not.toBe(event);
    expect(sealed).toEqual(event);
    expect(Object.isFrozen(sealed)).toBe(true);
    expect(Object.isFrozen(event)).toBe(false);
  });
});
