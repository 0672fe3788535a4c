import type { Role, RunEventType } from '../schemas/index.js';

/**
 * The one place subjects are built. Events of a run: `pge.run.<runId>.evt.<type>` (the type's dots
 * become subject tokens, so `pge.run.*.evt.step.>` follows every step event); work for a role:
 * `pge.work.<role>`; a worker's reply to a request: `pge.run.<runId>.result`; commands for a run:
 * `pge.run.<runId>.control`; run submission:
 * `pge.runs.submit`.
 */

const TOKEN = /^[A-Za-z0-9_-]+$/;

/** Rejects ids that would change a subject's shape: `.`, `*`, `>`, white space, empty. */
export function assertSubjectToken(kind: string, value: string): string {
  if (!TOKEN.test(value)) {
    throw new TypeError(
      `${kind} "${value}" cannot be used in a subject: use only letters, digits, "-" and "_"`,
    );
  }
  return value;
}

export const subjects = {
  /** The subject of one event of a run. */
  event(runId: string, type: RunEventType): string {
    return `pge.run.${assertSubjectToken('run id', runId)}.evt.${type}`;
  },
  /** Every event of one run (`'*'` for every run). */
  events(runId: string | '*'): string {
    return `pge.run.${runId === '*' ? '*' : assertSubjectToken('run id', runId)}.evt.>`;
  },
  /** Where a role's work items are queued. */
  work(role: Role): string {
    return `pge.work.${role}`;
  },
  /** Where workers reply to requests of one run (`'*'` for every run). */
  result(runId: string | '*'): string {
    return `pge.run.${runId === '*' ? '*' : assertSubjectToken('run id', runId)}.result`;
  },
  /** Commands for one run from outside its coordinator (`'*'` for every run). */
  control(runId: string | '*'): string {
    return `pge.run.${runId === '*' ? '*' : assertSubjectToken('run id', runId)}.control`;
  },
  /** Where runs are submitted by request/reply. */
  submit: 'pge.runs.submit',
  /** Where the bus reports messages it rejected. */
  rejected: 'pge.errors.rejected',
} as const;

/** The queue group that the workers of a role share, so each work item goes to one of them. */
export function workerQueue(role: Role): string {
  return `pge-${role}`;
}

/**
 * True when `subject` matches `pattern` under NATS rules: tokens split on `.`, `*` matches one
 * token, `>` (last token only) matches one or more.
 */
export function subjectMatches(pattern: string, subject: string): boolean {
  const p = pattern.split('.');
  const s = subject.split('.');
  for (let i = 0; i < p.length; i++) {
    const token = p[i];
    if (token === '>') return i === p.length - 1 && s.length > i;
    if (i >= s.length) return false;
    if (token !== '*' && token !== s[i]) return false;
  }
  return p.length === s.length;
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
