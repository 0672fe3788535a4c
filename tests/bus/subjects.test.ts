import { describe, expect, it, vi } from 'vitest';
import {
  assertSubjectToken,
  isEventSubject,
  runEventSubjects,
  subjectMatches,
  subjects,
  workerQueue,
} from '../../src/bus/subjects.js';

describe('subjectMatches', () => {
  it.each([
    ['a.b.c', 'a.b.c', true],
    ['a.b.c', 'a.b', false],
    ['a.b', 'a.b.c', false],
    ['a.b.c', 'a.b.d', false],
    ['a.*.c', 'a.b.c', true],
    ['a.*.c', 'a.b.x.c', false],
    ['a.*', 'a', false],
    ['*', 'a', true],
    ['*', 'a.b', false],
    ['a.>', 'a.b', true],
    ['a.>', 'a.b.c.d', true],
    ['a.>', 'a', false],
    ['>', 'a', true],
    ['>', 'a.b', true],
    ['a.>.c', 'a.b.c', false],
    ['*.b.>', 'a.b.c', true],
    ['*.b.>', 'a.x.c', false],
    ['pge.run.*.evt.>', 'pge.run.r1.evt.step.work.completed', true],
    ['pge.run.*.evt.>', 'pge.run.r1.result', false],
    ['pge.run.*.evt.step.>', 'pge.run.r1.evt.run.started', false],
    ['ab.c', 'a.c', false],
    ['a.c', 'ab.c', false],
    ['a.bc', 'a.b', false],
    ['a.b', 'a.bc', false],
    ['abc', 'abd', false],
    ['*.*', 'a.b', true],
    ['*.*', 'a.b.c', false],
    ['a.*.>', 'a.b', false],
  ])('%s against %s is %s', (pattern, subject, expected) => {
    expect(subjectMatches(pattern, subject)).toBe(expected);
  });
});

describe('runEventSubjects', () => {
  it('builds the subjects that subjects.event builds, each type once', () => {
    const subjectOf = runEventSubjects('r-1');
    const built = vi.spyOn(subjects, 'event');
    try {
      expect(subjectOf('step.work.completed')).toBe('pge.run.r-1.evt.step.work.completed');
      expect(subjectOf('run.started')).toBe('pge.run.r-1.evt.run.started');
      expect(subjectOf('step.work.completed')).toBe('pge.run.r-1.evt.step.work.completed');
      expect(built.mock.calls).toEqual([
        ['r-1', 'step.work.completed'],
        ['r-1', 'run.started'],
      ]);
    } finally {
      built.mockRestore();
    }
  });

  it('throws like subjects.event on a run id that is not a subject token, when first used', () => {
    const subjectOf = runEventSubjects('r.1');
    expect(() => subjectOf('run.started')).toThrow(TypeError);
  });
});

describe('isEventSubject', () => {
  it('accepts the subject that subjects.event builds', () => {
    expect(isEventSubject(subjects.event('r-1', 'step.work.completed'), 'r-1', 'step.work.completed')).toBe(
      true,
    );
  });

  it.each([
    ['another run', 'pge.run.r-2.evt.step.work.completed'],
    ['a run id that only starts the same', 'pge.run.r-12.evt.step.work.completed'],
    ['another type', 'pge.run.r-1.evt.step.work.requested'],
    ['a type that only ends the same', 'pge.run.r-1.evt.x.step.work.completed'],
    ['another kind of subject', 'pge.run.r-1.res.step.work.completed'],
    ['another prefix', 'pgx.run.r-1.evt.step.work.completed'],
    ['the result subject', subjects.result('r-1')],
  ])('refuses %s', (_, subject) => {
    expect(isEventSubject(subject, 'r-1', 'step.work.completed')).toBe(false);
  });
});

describe('assertSubjectToken', () => {
  it.each(['a.b', '*', '>', 'a*', 'run 1', ' ', '', 'tab\there', 'new\nline'])('rejects %j', (value) => {
    expect(() => assertSubjectToken('run id', value)).toThrow(TypeError);
  });

  it('names the kind of id in its error', () => {
    expect(() => assertSubjectToken('run id', 'a.b')).toThrow(/run id "a\.b"/);
  });

  it('returns a valid token unchanged', () => {
    expect(assertSubjectToken('run id', 'Run-1_x')).toBe('Run-1_x');
  });
});

describe('subjects', () => {
  it('builds the documented shapes', () => {
    expect(subjects.event('r1', 'step.work.completed')).toBe('pge.run.r1.evt.step.work.completed');
    expect(subjects.events('r1')).toBe('pge.run.r1.evt.>');
    expect(subjects.events('*')).toBe('pge.run.*.evt.>');
    expect(subjects.work('evaluator')).toBe('pge.work.evaluator');
    expect(subjects.result('r1')).toBe('pge.run.r1.result');
    expect(subjects.result('*')).toBe('pge.run.*.result');
    expect(workerQueue('planner')).toBe('pge-planner');
  });

  it('refuses run ids that would change a subject’s shape', () => {
    expect(() => subjects.event('a.b', 'run.started')).toThrow(TypeError);
    expect(() => subjects.events('a>')).toThrow(TypeError);
    expect(() => subjects.result('a b')).toThrow(TypeError);
  });
});
