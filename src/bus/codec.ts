import { z } from 'zod';
import { MessageRejectedError } from '../errors.js';
import { RunControl } from '../schemas/control.js';
import type { Role } from '../schemas/index.js';
import { ROLE_OF_REQUEST, RoleResult, RunEvent } from '../schemas/index.js';
import { RunSubmission } from '../schemas/submission.js';
import { subjectMatches, subjects } from './subjects.js';

/**
 * Which schema each pge subject carries, and the validation both buses run on publish and on
 * receive. Nothing outside `src/bus` touches raw messages.
 */

/** A bad message, as reported on `pge.errors.rejected`. */
export const MessageRejection = z.strictObject({
  subject: z.string(),
  problem: z.string(),
  ts: z.iso.datetime(),
});
export type MessageRejection = z.infer<typeof MessageRejection>;

interface SubjectRule {
  pattern: string;
  schema: z.ZodType;
  /** Extra checks that tie the payload to its subject. */
  check?: (subject: string, data: never) => string | null;
}

const RULES: SubjectRule[] = [
  {
    pattern: subjects.events('*'),
    schema: RunEvent,
    check: (subject, event: RunEvent) =>
      subject === subjects.event(event.runId, event.type)
        ? null
        : `event ${event.type} of run ${event.runId} does not belong on ${subject}`,
  },
  {
    pattern: 'pge.work.*',
    // A work item is the request event itself; parsing it as a RunEvent (then checking that it is
    // a request for this role) is what RoleRequest says, and lets the coordinator's one event
    // serve as both the event and the work item without being parsed twice.
    schema: RunEvent,
    check: (subject, event: RunEvent) => {
      const role = (ROLE_OF_REQUEST as Record<string, string | undefined>)[event.type];
      if (role === undefined) return `${event.type} is not a request: it does not belong on ${subject}`;
      return subject === subjects.work(role as Role) ? null : `${event.type} does not belong on ${subject}`;
    },
  },
  {
    pattern: subjects.result('*'),
    schema: RoleResult,
    check: (subject, result: RoleResult) =>
      subject === subjects.result(result.runId)
        ? null
        : `a result of run ${result.runId} does not belong on ${subject}`,
  },
  { pattern: subjects.rejected, schema: MessageRejection },
  { pattern: subjects.submit, schema: RunSubmission },
  {
    pattern: subjects.control('*'),
    schema: RunControl,
    check: (subject, control: RunControl) =>
      subject === subjects.control(control.runId)
        ? null
        : `a command for run ${control.runId} does not belong on ${subject}`,
  },
];

/** The report of a message refused on receive, for `pge.errors.rejected`. */
export function rejectionOf(subject: string, error: unknown): MessageRejection {
  return {
    subject,
    problem: error instanceof Error ? error.message : String(error),
    ts: new Date().toISOString(),
  };
}

/** Registers the schema of a subject pattern that a later module owns (run submission, …). */
export function registerSubjectSchema(pattern: string, schema: z.ZodType): void {
  RULES.push({ pattern, schema });
  ruleCache.clear();
}

// Every message looks its rule up on publish and on receive; subjects repeat within a run.
const ruleCache = new Map<string, SubjectRule | null>();
const RULE_CACHE_LIMIT = 4096;

/** The rule for a subject, or null for subjects outside pge's contract (e.g. `_INBOX.*` replies). */
function ruleFor(subject: string): SubjectRule | null {
  let rule = ruleCache.get(subject);
  if (rule !== undefined) return rule;
  rule = RULES.find((r) => subjectMatches(r.pattern, subject)) ?? null;
  if (ruleCache.size >= RULE_CACHE_LIMIT) ruleCache.clear();
  ruleCache.set(subject, rule);
  return rule;
}

/** Messages parsed by `sealMessage`, with the rule they were parsed under. */
const sealed = new WeakMap<object, SubjectRule>();
/** Objects their sender froze with `freezeMessage`, and what they were sealed into, by schema. */
const frozenBySender = new WeakSet<object>();
const sealedFrom = new WeakMap<object, { schema: z.ZodType; parsed: unknown }>();

function deepFreeze(value: unknown): void {
  if (value === null || typeof value !== 'object' || Object.isFrozen(value)) return;
  Object.freeze(value);
  for (const child of Object.values(value)) deepFreeze(child);
}

/**
 * Publish-side validation for a transport that hands objects over in memory: validates like
 * `validateMessage` and returns the parsed copy deep-frozen, remembered as valid for its rule.
 */
export function sealMessage(subject: string, data: unknown): unknown {
  const rule = ruleFor(subject);
  const reusable = rule !== null && data !== null && typeof data === 'object' && frozenBySender.has(data);
  if (reusable) {
    // The sender froze it: unchanged since it was last parsed under this schema, so only the
    // subject check is left to run.
    const memo = sealedFrom.get(data);
    if (memo && memo.schema === rule.schema) {
      const problem = rule.check?.(subject, memo.parsed as never) ?? null;
      if (problem) throw new MessageRejectedError(`invalid message on ${subject}: ${problem}`, { subject });
      sealed.set(memo.parsed as object, rule);
      return memo.parsed;
    }
  }
  const parsed = validateMessage(subject, data);
  if (rule && parsed !== null && typeof parsed === 'object') {
    deepFreeze(parsed);
    sealed.set(parsed, rule);
    if (reusable) sealedFrom.set(data, { schema: rule.schema, parsed });
  }
  return parsed;
}

/**
 * Deep-freezes a message its sender will publish more than once (the coordinator's request events
 * go out as an event and as a work item), so that an in-memory bus parses it only once.
 */
export function freezeMessage<T extends object>(message: T): T {
  deepFreeze(message);
  frozenBySender.add(message);
  return message;
}

/**
 * Receive-side validation for an in-memory transport. A sealed message received under the rule it
 * was sealed for is valid by construction — it was parsed on publish and, frozen, cannot have
 * changed since — so it is handed over as it is, shared by every handler (none can alter what
 * another receives). Anything else is parsed as `validateMessage` does.
 */
export function checkReceived(subject: string, data: unknown): unknown {
  if (data !== null && typeof data === 'object' && sealed.get(data) === ruleFor(subject)) return data;
  return validateMessage(subject, data);
}

/**
 * Validates `data` for `subject` and returns the parsed copy. Subjects outside the contract pass
 * through unchanged. Throws `MessageRejectedError` naming the subject and the problem.
 */
export function validateMessage(subject: string, data: unknown): unknown {
  const rule = ruleFor(subject);
  if (!rule) return data;
  const parsed = rule.schema.safeParse(data);
  if (!parsed.success) {
    throw new MessageRejectedError(`invalid message on ${subject}: ${z.prettifyError(parsed.error)}`, {
      subject,
    });
  }
  const problem = rule.check?.(subject, parsed.data as never) ?? null;
  if (problem) throw new MessageRejectedError(`invalid message on ${subject}: ${problem}`, { subject });
  return parsed.data;
}

/** Encodes a message for a wire transport. */
export function encodeMessage(subject: string, data: unknown): Uint8Array {
  return new TextEncoder().encode(JSON.stringify(validateMessage(subject, data)));
}

/** Decodes and validates a message from a wire transport. */
export function decodeMessage(subject: string, bytes: Uint8Array): unknown {
  let data: unknown;
  try {
    data = JSON.parse(new TextDecoder().decode(bytes));
  } catch (cause) {
    throw new MessageRejectedError(`invalid message on ${subject}: not JSON`, { subject, cause });
  }
  return validateMessage(subject, data);
}
