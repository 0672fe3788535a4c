import { describe, expect, it } from 'vitest';
import {
  assertSubjectToken,
  republishedOn,
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
    ['pge.run.*.evt.>', 'pge.run.r1.result.planner', false],
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
    expect(subjects.result('r1', 'generator')).toBe('pge.run.r1.result.generator');
    expect(subjects.result('r1')).toBe('pge.run.r1.result.*');
    expect(subjects.result('*')).toBe('pge.run.*.result.*');
    expect(subjects.result('*', 'evaluator')).toBe('pge.run.*.result.evaluator');
    expect(workerQueue('planner')).toBe('pge-planner');
  });

  it('refuses run ids that would change a subject’s shape', () => {
    expect(() => subjects.event('a.b', 'run.started')).toThrow(TypeError);
    expect(() => subjects.events('a>')).toThrow(TypeError);
    expect(() => subjects.result('a b')).toThrow(TypeError);
  });
});

describe('republishedOn', () => {
  it('maps a subject or filter of events onto where the server republishes it, and nothing else', () => {
    expect(republishedOn(subjects.events('run-1'))).toBe(subjects.storedEvents('run-1'));
    expect(republishedOn(subjects.events('*'))).toBe(subjects.storedEvents('*'));
    expect(republishedOn('pge.run.run-1.evt.step.>')).toBe('pge.stored.run-1.evt.step.>');
    expect(republishedOn(subjects.event('run-1', 'run.completed'))).toBe(
      'pge.stored.run-1.evt.run.completed',
    );
    for (const other of [
      subjects.result('*'),
      subjects.control('run-1'),
      subjects.work('planner'),
      'pge.run.x.evt',
    ])
      expect(republishedOn(other), other).toBeNull();
  });
});
