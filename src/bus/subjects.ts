import type { Role, RunEventType } from '../schemas/index.js';
import { ID_PATTERN } from '../schemas/setting-values.js';

/**
 * The one place subjects are built. Events of a run: `pge.run.<runId>.evt.<type>` (the type's dots
 * become subject tokens, so `pge.run.*.evt.step.>` follows every step event); work for a role:
 * `pge.work.<role>`; a worker's reply to a request: `pge.run.<runId>.result.<role>` (one subject per
 * role, so that a credential can allow a worker its own role's results only); commands for a run:
 * `pge.run.<runId>.control`; cancelled requests of a run: `pge.run.<runId>.cancel`; run submission:
 * `pge.runs.submit`; reports of refused messages: `pge.errors.rejected.<reporter>`.
 */

/** Rejects ids that would change a subject's shape: `.`, `*`, `>`, white space, empty. */
export function assertSubjectToken(kind: string, value: string): string {
  if (!ID_PATTERN.test(value)) {
    throw new TypeError(
      `${kind} "${value}" cannot be used in a subject: use only letters, digits, "-" and "_"`,
    );
  }
  return value;
}

const RUN_PREFIX = 'pge.run.';
const STORED_PREFIX = 'pge.stored.';
const EVENT_INFIX = '.evt.';
const WORK_SUBJECTS: Readonly<Record<Role, string>> = {
  planner: 'pge.work.planner',
  generator: 'pge.work.generator',
  evaluator: 'pge.work.evaluator',
};

/** The run id a run's subject (`pge.run.<runId>.…`) names, or null for a subject of no run. */
export function runIdOfSubject(subject: string): string | null {
  if (!subject.startsWith(RUN_PREFIX)) return null;
  const end = subject.indexOf('.', RUN_PREFIX.length);
  return end === -1 ? null : subject.slice(RUN_PREFIX.length, end);
}

export const subjects = {
  /** The subject of one event of a run. */
  event(runId: string, type: RunEventType): string {
    return `${RUN_PREFIX}${assertSubjectToken('run id', runId)}${EVENT_INFIX}${type}`;
  },
  /** Every event of one run (`'*'` for every run). */
  events(runId: string | '*'): string {
    return `${RUN_PREFIX}${runId === '*' ? '*' : assertSubjectToken('run id', runId)}${EVENT_INFIX}>`;
  },
  /**
   * Where the server republishes each event of one run (`'*'` for every run) as PGE_EVENTS stores
   * it: `pge.stored.<runId>.evt.<type>`, with its stream sequence in the header `Nats-Sequence` and
   * its subject in `Nats-Subject`. Nothing but the server publishes there.
   */
  storedEvents(runId: string | '*'): string {
    return `${STORED_PREFIX}${runId === '*' ? '*' : assertSubjectToken('run id', runId)}${EVENT_INFIX}>`;
  },
  /** Where a role's work items are queued: one string per role, whose hash the bus's maps keep. */
  work(role: Role): string {
    return Object.hasOwn(WORK_SUBJECTS, role) ? WORK_SUBJECTS[role] : `pge.work.${role}`;
  },
  /**
   * Where the workers of `role` reply to requests of one run; `'*'` for every run, and for every
   * role (the default, for reading).
   */
  result(runId: string | '*', role: Role | '*' = '*'): string {
    const run = runId === '*' ? '*' : assertSubjectToken('run id', runId);
    return `${RUN_PREFIX}${run}.result.${role === '*' ? '*' : assertSubjectToken('role', role)}`;
  },
  /** Commands for one run from outside its coordinator (`'*'` for every run). */
  control(runId: string | '*'): string {
    return `${RUN_PREFIX}${runId === '*' ? '*' : assertSubjectToken('run id', runId)}.control`;
  } /** A person's decisions at a run's gates (`'*'` for every run). */,
  approval(runId: string | '*'): string {
    return `${RUN_PREFIX}${runId === '*' ? '*' : assertSubjectToken('run id', runId)}.approval`;
  },

  /** Requests of one run that its coordinator cancelled (`'*'` for every run); every worker hears them. */
  cancel(runId: string | '*'): string {
    return `${RUN_PREFIX}${runId === '*' ? '*' : assertSubjectToken('run id', runId)}.cancel`;
  },
  /**
   * Where the workers of `role` say that they are there and which model serves them (`'*'` for
   * every role), every `PRESENCE_INTERVAL_MS`; not stored. One subject per role, so that a
   * credential allows a worker to speak for its own role only.
   */
  presence(role: Role | '*'): string {
    return `pge.workers.${role === '*' ? '*' : assertSubjectToken('role', role)}`;
  },
  /** Where runs are submitted by request/reply, answered within `SUBMIT_ANSWER_MS`. */
  submit: 'pge.runs.submit',
  /**
   * Where a run is asked to be taken over now, by request/reply (`pge resume --nats`), answered
   * within `RESUME_ANSWER_MS`.
   */
  resume: 'pge.runs.resume',
  /**
   * Where a person asks to cancel a run (`pge cancel`), by request/reply: every coordinator hears
   * it, the one that drives the run answers within `CANCEL_ANSWER_MS`.
   */
  cancelRun: 'pge.runs.cancel',
  /**
   * Where a client asks whether any coordinator runs, by request/reply, answered at once
   * (`COORDINATOR_PING_MS`): across the accounts of a secured server a request nobody serves gets
   * no "no responders", only silence, and a submission's silence may be a busy coordinator's.
   */
  coordinatorPing: 'pge.coordinators.ping',
  /**
   * Where a process reports the messages it refused: `pge.errors.rejected.<reporter>`, the reporter
   * being its role (`'*'` for every reporter). One subject per reporter, so that a credential can
   * allow a process its own reports only, and reports can cross between NATS accounts.
   */
  rejected(reporter: string | '*'): string {
    return `pge.errors.rejected.${reporter === '*' ? '*' : assertSubjectToken('reporter', reporter)}`;
  },
} as const;

/**
 * How long a submission waits for its answer: a coordinator claims the run id (a JetStream write)
 * and answers, in milliseconds unless the server is busy; a deployment that has just started all
 * its processes on a small machine can take seconds.
 */
export const SUBMIT_ANSWER_MS = 30_000;
/**
 * How long a ping of the coordinators waits for its answer: a coordinator answers it without any
 * I/O, so that silence this long means that none runs.
 */
export const COORDINATOR_PING_MS = 2_500;
/** How long a resume request waits for its answer: taking a run over reads its stored events. */
export const RESUME_ANSWER_MS = 30_000;
/** How long a cancel request waits for its answer: the run's coordinator answers at once. */
export const CANCEL_ANSWER_MS = 5_000;

/** How often a role worker says it is there (`subjects.presence`); three missed, it is taken as gone. */
export const PRESENCE_INTERVAL_MS = 2_000;

/** The queue group that the workers of a role share, so each work item goes to one of them. */
export function workerQueue(role: Role): string {
  return `pge-${role}`;
}

/**
 * True when `subject` matches `pattern` under NATS rules: tokens split on `.`, `*` matches one
 * token, `>` (last token only) matches one or more.
 */
export function subjectMatches(pattern: string, subject: string): boolean {
  // Walks both strings token by token without splitting them: this runs for every subscription
  // pattern on every subject the bus has not routed before (every new run brings ~25).
  let p = 0;
  let s = 0;
  for (;;) {
    const pEnd = tokenEnd(pattern, p);
    const sEnd = tokenEnd(subject, s);
    const width = pEnd - p;
    const wildcard = width === 1 ? pattern.charCodeAt(p) : 0;
    // `>` matches the rest, which holds at least this token; it is only valid as the last token.
    if (wildcard === GT) return pEnd === pattern.length;
    if (wildcard !== STAR && !sameToken(pattern, p, subject, s, width, sEnd - s)) return false;
    const patternDone = pEnd === pattern.length;
    const subjectDone = sEnd === subject.length;
    if (patternDone || subjectDone) return patternDone && subjectDone;
    p = pEnd + 1;
    s = sEnd + 1;
  }
}

const STAR = 42; // '*'
const GT = 62; // '>'

/** Where the token that starts at `from` ends: the next `.`, or the end of the string. */
function tokenEnd(text: string, from: number): number {
  const dot = text.indexOf('.', from);
  return dot === -1 ? text.length : dot;
}

function sameToken(
  a: string,
  aFrom: number,
  b: string,
  bFrom: number,
  aWidth: number,
  bWidth: number,
): boolean {
  if (aWidth !== bWidth) return false;
  for (let i = 0; i < aWidth; i++) if (a.charCodeAt(aFrom + i) !== b.charCodeAt(bFrom + i)) return false;
  return true;
}

const WHITE_SPACE = /\s/;

/** NATS subject rules: non-empty tokens without white space; wildcards only in patterns, `>` only last. */
export function checkSubject(subject: string, pattern: boolean): void {
  const tokens = subject.split('.');
  for (let i = 0; i < tokens.length; i++) {
    const token = tokens[i]!;
    const wildcard = token === '*' || token === '>';
    if (
      token === '' ||
      WHITE_SPACE.test(token) ||
      (wildcard && !pattern) ||
      (token === '>' && i < tokens.length - 1)
    ) {
      throw new TypeError(
        `"${subject}" is not a valid ${pattern ? 'subscription subject' : 'subject to publish on'}`,
      );
    }
  }
}

/** The republish of PGE_EVENTS, as its stream configuration says it: `subjects.storedEvents`. */
export const EVENTS_REPUBLISHED = `${STORED_PREFIX}{{wildcard(1)}}${EVENT_INFIX}>`;

/**
 * Where the server republishes what PGE_EVENTS stores on `filter` (a subject or filter of events:
 * `pge.run.<runId>.evt.step.>` is republished on `pge.stored.<runId>.evt.step.>`), or null for a
 * filter outside the events.
 */
export function republishedOn(filter: string): string | null {
  const tokens = filter.split('.');
  if (!filter.startsWith(RUN_PREFIX) || tokens[3] !== EVENT_INFIX.slice(1, -1) || tokens.length < 5)
    return null;
  return `${STORED_PREFIX}${filter.slice(RUN_PREFIX.length)}`;
}
