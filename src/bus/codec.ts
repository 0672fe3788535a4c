import { z } from 'zod';
import { deepFreeze } from '../deep-freeze.js';
import { MessageRejectedError } from '../errors.js';
import { CallCancel, RunApproval, RunControl, WorkerPresence } from '../schemas/control.js';
import type { Role } from '../schemas/index.js';
import { ROLE_OF_REQUEST, RoleResult, RunEvent } from '../schemas/index.js';
import { CoordinatorPing, RunCancelRequest, RunResumeRequest, RunSubmission } from '../schemas/submission.js';
import { subjectMatches, subjects } from './subjects.js';

/**
 * Which schema each pge subject carries, and the validation both buses run on publish and on
 * receive. Nothing outside `src/bus` touches raw messages.
 */

/** A bad message, as reported on `pge.errors.rejected.<reporter>`. */
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

/** The check that a message naming a run travels on that run's subject (`subjectOf(runId)`). */
function ofItsRun(subjectOf: (runId: string) => string, what: string) {
  return (subject: string, message: { runId: string }): string | null =>
    subject === subjectOf(message.runId)
      ? null
      : `${what} for run ${message.runId} does not belong on ${subject}`;
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
      subject === subjects.result(result.runId, result.role)
        ? null
        : `a ${result.role} result for run ${result.runId} does not belong on ${subject}`,
  },
  { pattern: subjects.rejected('*'), schema: MessageRejection },
  { pattern: subjects.submit, schema: RunSubmission },
  { pattern: subjects.resume, schema: RunResumeRequest },
  { pattern: subjects.cancelRun, schema: RunCancelRequest },
  { pattern: subjects.coordinatorPing, schema: CoordinatorPing },
  { pattern: subjects.control('*'), schema: RunControl, check: ofItsRun(subjects.control, 'a command') },
  {
    pattern: subjects.approval('*'),
    schema: RunApproval,
    check: ofItsRun(subjects.approval, 'a decision'),
  },
  { pattern: subjects.cancel('*'), schema: CallCancel, check: ofItsRun(subjects.cancel, 'a cancel') },
  {
    pattern: subjects.presence('*'),
    schema: WorkerPresence,
    check: (subject, presence: WorkerPresence) =>
      subject === subjects.presence(presence.role)
        ? null
        : `a ${presence.role} worker's presence does not belong on ${subject}`,
  },
];

/** The report of a message refused on receive, for `pge.errors.rejected.<reporter>`. */
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

// Every message looks its rule up when it is validated; subjects repeat within a run.
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

// `z.compile` gives the same results and errors through a generated fast path, about twice as
// fast on pge's events. Compiling takes tens of milliseconds, so each schema is compiled on its
// first message rather than when the module loads (`pge --help` never pays for it).
const compiledSchemas = new Map<z.ZodType, z.ZodType>();

/**
 * The compiled schema that checks `data` against `schema`. For a discriminated union (every run
 * event is one) that is the option its discriminator names, compiled on its own: the union's
 * generated check is one function of over 100 KB, too large for V8 to optimize, while each
 * option's is a few KB. An unknown discriminator gets the union, which reports it.
 */
function compiledFor(schema: z.ZodType, data: unknown): z.ZodType {
  if (schema instanceof z.ZodDiscriminatedUnion && typeof data === 'object' && data !== null) {
    const value = (data as Record<string, unknown>)[schema.def.discriminator];
    const option = optionOf(schema, value);
    if (option !== undefined) return compiledSchema(option);
  }
  return compiledSchema(schema);
}

function optionOf(union: z.ZodDiscriminatedUnion, value: unknown): z.ZodType | undefined {
  try {
    return z.getDiscriminatedOption(union as never, value as never) as z.ZodType | undefined;
  } catch {
    return undefined; // an ambiguous value: let the union decide
  }
}

function compiledSchema(schema: z.ZodType): z.ZodType {
  let compiled = compiledSchemas.get(schema);
  if (compiled === undefined) {
    compiled = z.compile(schema);
    compiledSchemas.set(schema, compiled);
  }
  return compiled;
}

/** Marks a message whose sender handed it over deep-frozen (`freezeMessage`). */
const HANDED_OVER: unique symbol = Symbol('pge.handedOver');

function handedOver(data: unknown): data is object {
  return (
    typeof data === 'object' && data !== null && (data as { [HANDED_OVER]?: true })[HANDED_OVER] === true
  );
}

/**
 * Publish-side validation for a transport that hands objects over in memory; returns what every
 * handler gets, deep-frozen so that none can alter what another receives. A message its sender
 * handed over with `freezeMessage` cannot change after it is checked, so it is checked where it
 * is (`validate`: the compiled schema, no copy built) and shared as it is. Anything else is
 * parsed like `validateMessage`, into a copy that is then frozen. `validate` accepts exactly what
 * a parse accepts, but a parse's output can differ from its input (a non-strict object drops
 * unknown keys, criterion names are trimmed and lower-cased); a handed-over message goes out as
 * its sender built it, so senders hand over what they built from parsed data, as pge's do.
 */
export function sealMessage(subject: string, data: unknown): unknown {
  const rule = ruleFor(subject);
  if (checkedInPlace(rule, subject, data)) return data;
  const parsed = validateMessage(subject, data);
  if (rule !== null) deepFreeze(parsed);
  return parsed;
}

/**
 * Whether `data` is a handed-over message found valid for `subject` where it is. False when it
 * was not handed over, or the compiled check refuses it (the caller's parse then says why);
 * throws `MessageRejectedError` when only the subject check fails.
 */
function checkedInPlace(rule: SubjectRule | null, subject: string, data: unknown): boolean {
  if (rule === null || !handedOver(data) || !validInPlace(data, rule.schema)) return false;
  const problem = rule.check?.(subject, data as never) ?? null;
  if (problem) throw new MessageRejectedError(`invalid message on ${subject}: ${problem}`, { subject });
  return true;
}

/**
 * The last handed-over message found valid, and the schema: a request goes out on its event
 * subject and on its work queue one right after the other, and is checked once. Frozen, it cannot
 * have changed in between.
 */
let lastValid: { data: object; schema: z.ZodType } | null = null;

function validInPlace(data: object, schema: z.ZodType): boolean {
  if (lastValid !== null && lastValid.data === data && lastValid.schema === schema) return true;
  if (!compiledFor(schema, data).validate(data)) return false;
  lastValid = { data, schema };
  return true;
}

/**
 * Hands a message over to an in-memory bus: deep-freezes it (the sender must not change it after
 * publishing, as it could not change a message already on the wire) and marks it, so the bus
 * validates it in place instead of parsing a copy. The typed channels do this for every message.
 */
export function freezeMessage<T extends object>(message: T): T {
  if (handedOver(message)) return message;
  if (!Object.isFrozen(message)) Object.defineProperty(message, HANDED_OVER, { value: true });
  deepFreeze(message);
  return message;
}

/**
 * Validates `data` for `subject` and returns the parsed copy. Subjects outside the contract pass
 * through unchanged. Throws `MessageRejectedError` naming the subject and the problem.
 */
export function validateMessage(subject: string, data: unknown): unknown {
  const rule = ruleFor(subject);
  if (!rule) return data;
  const parsed = compiledFor(rule.schema, data).safeParse(data);
  if (!parsed.success) {
    throw new MessageRejectedError(`invalid message on ${subject}: ${z.prettifyError(parsed.error)}`, {
      subject,
    });
  }
  const problem = rule.check?.(subject, parsed.data as never) ?? null;
  if (problem) throw new MessageRejectedError(`invalid message on ${subject}: ${problem}`, { subject });
  return parsed.data;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/**
 * Validates and encodes a message for a wire transport. A handed-over message (`freezeMessage`)
 * is checked in place and encoded as it is; anything else is parsed and its copy encoded.
 */
export function encodeMessage(subject: string, data: unknown): Uint8Array {
  const value = checkedInPlace(ruleFor(subject), subject, data) ? data : validateMessage(subject, data);
  return encoder.encode(JSON.stringify(value));
}

/** Decodes and validates a message from a wire transport. */
export function decodeMessage(subject: string, bytes: Uint8Array): unknown {
  let data: unknown;
  try {
    data = JSON.parse(decoder.decode(bytes));
  } catch (cause) {
    throw new MessageRejectedError(`invalid message on ${subject}: not JSON`, { subject, cause });
  }
  return validateMessage(subject, data);
}
