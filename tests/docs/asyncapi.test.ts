import { readFileSync } from 'node:fs';
import { isDeepStrictEqual } from 'node:util';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { buildAsyncApi, renderAsyncApi } from '../../scripts/gen-asyncapi.js';
import { MessageRejection } from '../../src/bus/codec.js';
import { subjects } from '../../src/bus/subjects.js';
import type { RunEventDraft, RunEventType } from '../../src/schemas/index.js';
import { Role, RoleRequest, RoleResult, RunEvent } from '../../src/schemas/index.js';
import { RunSubmission, RunSubmissionOptions, RunSubmissionReply } from '../../src/schemas/submission.js';
import { fullRun, makeEvent } from '../persistence/fixtures.js';

/**
 * The AsyncAPI document is the contract other languages code against, so these tests hold it to the
 * zod schemas: it is regenerated on every run and compared with the committed file, it names every
 * subject pge builds and every event type, and each message schema accepts real pge messages and
 * rejects what pge's zod schemas reject (checked with the small JSON Schema validator below).
 */

type Json = Record<string, unknown>;

const DOC_PATH = new URL('../../docs/asyncapi.yaml', import.meta.url);
const doc = buildAsyncApi();

const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Follows a local `$ref` (`#/a/b/c`) in the document. */
function deref(pointer: string): unknown {
  if (!pointer.startsWith('#/')) throw new Error(`not a local $ref: ${pointer}`);
  let node: unknown = doc;
  for (const part of pointer.slice(2).split('/')) {
    const key = part.replaceAll('~1', '/').replaceAll('~0', '~');
    if (!isObject(node) || !(key in node)) throw new Error(`$ref ${pointer} does not resolve`);
    node = node[key];
  }
  return node;
}

function at<T = Json>(pointer: string): T {
  return deref(pointer) as T;
}

const TYPE_CHECKS: Record<string, (v: unknown) => boolean> = {
  string: (v) => typeof v === 'string',
  number: (v) => typeof v === 'number' && Number.isFinite(v),
  integer: (v) => Number.isInteger(v),
  boolean: (v) => typeof v === 'boolean',
  null: (v) => v === null,
  array: Array.isArray,
  object: isObject,
};

/** Keywords that describe and never constrain. */
const ANNOTATIONS = new Set(['description', 'title', 'examples', 'default', '$comment']);

/**
 * The subset of JSON Schema draft-07 that zod emits for pge's schemas. An unknown keyword throws,
 * so a schema this validator cannot judge fails the test instead of passing unexamined.
 */
function validate(schema: Json, value: unknown, path = '$'): string[] {
  const problems: string[] = [];
  const fail = (message: string) => problems.push(`${path}: ${message}`);
  for (const [keyword, rule] of Object.entries(schema)) {
    switch (keyword) {
      case '$ref':
        problems.push(...validate(at(rule as string), value, path));
        break;
      case 'type': {
        const types = Array.isArray(rule) ? (rule as string[]) : [rule as string];
        if (!types.some((t) => TYPE_CHECKS[t]?.(value))) fail(`expected ${types.join(' | ')}`);
        break;
      }
      case 'const':
        if (!isDeepStrictEqual(value, rule)) fail(`expected ${JSON.stringify(rule)}`);
        break;
      case 'enum':
        if (!(rule as unknown[]).some((v) => isDeepStrictEqual(v, value)))
          fail(`not one of ${JSON.stringify(rule)}`);
        break;
      case 'properties':
        if (isObject(value)) {
          for (const [key, sub] of Object.entries(rule as Record<string, Json>)) {
            if (key in value) problems.push(...validate(sub, value[key], `${path}.${key}`));
          }
        }
        break;
      case 'required':
        if (isObject(value))
          for (const key of rule as string[]) if (!(key in value)) fail(`"${key}" is missing`);
        break;
      case 'additionalProperties':
        if (isObject(value)) {
          const known = Object.keys((schema.properties as Json | undefined) ?? {});
          for (const key of Object.keys(value).filter((k) => !known.includes(k))) {
            if (rule === false) fail(`"${key}" is not allowed`);
            else if (isObject(rule)) problems.push(...validate(rule, value[key], `${path}.${key}`));
          }
        }
        break;
      case 'propertyNames':
        if (isObject(value))
          for (const key of Object.keys(value)) problems.push(...validate(rule as Json, key, path));
        break;
      case 'items':
        if (Array.isArray(value)) {
          for (const [i, item] of value.entries())
            problems.push(...validate(rule as Json, item, `${path}[${i}]`));
        }
        break;
      case 'minItems':
        if (Array.isArray(value) && value.length < (rule as number)) fail(`fewer than ${rule} items`);
        break;
      case 'maxItems':
        if (Array.isArray(value) && value.length > (rule as number)) fail(`more than ${rule} items`);
        break;
      case 'minLength':
        if (typeof value === 'string' && [...value].length < (rule as number)) fail(`shorter than ${rule}`);
        break;
      case 'maxLength':
        if (typeof value === 'string' && [...value].length > (rule as number)) fail(`longer than ${rule}`);
        break;
      case 'pattern':
        if (typeof value === 'string' && !new RegExp(rule as string, 'u').test(value))
          fail(`does not match ${rule}`);
        break;
      case 'format':
        if (rule !== 'date-time') throw new Error(`unsupported format "${String(rule)}" at ${path}`);
        if (typeof value === 'string' && Number.isNaN(Date.parse(value))) fail('not a date-time');
        break;
      case 'minimum':
        if (typeof value === 'number' && value < (rule as number)) fail(`below ${rule}`);
        break;
      case 'maximum':
        if (typeof value === 'number' && value > (rule as number)) fail(`above ${rule}`);
        break;
      case 'exclusiveMinimum':
        if (typeof value === 'number' && value <= (rule as number)) fail(`not above ${rule}`);
        break;
      case 'exclusiveMaximum':
        if (typeof value === 'number' && value >= (rule as number)) fail(`not below ${rule}`);
        break;
      case 'anyOf':
        if (!(rule as Json[]).some((sub) => validate(sub, value, path).length === 0))
          fail('matches no anyOf branch');
        break;
      case 'oneOf': {
        const matches = (rule as Json[]).filter((sub) => validate(sub, value, path).length === 0).length;
        if (matches !== 1) fail(`matches ${matches} oneOf branches, not 1`);
        break;
      }
      case 'allOf':
        for (const sub of rule as Json[]) problems.push(...validate(sub, value, path));
        break;
      default:
        if (!ANNOTATIONS.has(keyword))
          throw new Error(`unsupported JSON Schema keyword "${keyword}" at ${path}`);
    }
  }
  return problems;
}

/** The payload schema of a message under `components/messages`. */
function payloadOf(message: string): Json {
  return at(at<{ payload: { $ref: string } }>(`#/components/messages/${message}`).payload.$ref);
}

/** The component message of each event type, by the message's `name`. */
function messageOfType(type: RunEventType): string {
  const messages = at<Record<string, { name: string }>>('#/components/messages');
  const found = Object.entries(messages).filter(([, m]) => m.name === type);
  expect(found, `messages named ${type}`).toHaveLength(1);
  return found[0]![0];
}

const EVENT_TYPES = RunEvent.options.map((s) => s.shape.type.value as RunEventType);
const REQUEST_TYPES = RoleRequest.options.map((s) => s.shape.type.value as RunEventType);

/** Events of the types the full-run fixture does not produce, so that every type has a sample. */
const RARER_EVENTS: RunEventDraft[] = [
  { type: 'plan.truncated', payload: { from: 12, to: 10, droppedStepIds: ['s11', 's12'] } },
  {
    type: 'request.cancelled',
    payload: { requestId: 'run-3-7', phase: 'work', reason: 'interrupted by the operator' },
  },
  { type: 'result.rejected', payload: { requestId: 'run-3-7', worker: 'generator-1', reason: 'late' } },
  {
    type: 'step.contract.imposed',
    payload: {
      stepId: 's1',
      stepNumber: 1,
      contract: {
        title: 'Sea haiku',
        acceptanceCriteria: ['Three lines'],
        expectedOutput: 'A haiku',
        verificationMethod: 'Count syllables',
        rounds: 3,
        imposed: true,
      },
      outstandingAmendments: ['Require 5-7-5'],
    },
  },
  {
    type: 'step.work.invalid',
    payload: { stepId: 's1', stepNumber: 1, attempt: 1, problem: 'not JSON', raw: '{' },
  },
  {
    type: 'step.evaluation.invalid',
    payload: { stepId: 's1', stepNumber: 1, attempt: 1, problem: 'criterion "form" has no score', raw: null },
  },
  {
    type: 'step.failed',
    payload: { stepId: 's1', stepNumber: 1, attempts: 4, bestAttempt: 2, policy: 'advance' },
  },
  {
    type: 'role.failed',
    payload: {
      requestId: 'run-1-2',
      role: 'planner',
      phase: 'plan',
      error: { name: 'ModelTransportError', message: 'connection reset', retryable: true },
      raw: null,
    },
  },
  {
    type: 'run.failed',
    payload: {
      byPhase: [],
      passed: false,
      stepsPassed: 0,
      stepsTotal: 1,
      totalRetries: 0,
      usage: { promptTokens: 10, completionTokens: 5, costUsd: 0.001, calls: 1 },
      durationMs: 1200,
      summary: 'Stopped: budget.',
      reason: 'budget',
      message: 'maxCostUsd 0.001 reached',
    },
  },
];

const run = fullRun('run-1');
const SAMPLE_EVENTS = [...run, ...fullRun('run-2', { hostile: true })].concat(
  RARER_EVENTS.map((draft, i) => makeEvent('run-3', i + 1, draft)),
);

function payloadOfEvent<T extends RunEventType>(type: T) {
  const event = run.find((e) => e.type === type);
  if (!event) throw new Error(`the fixture has no ${type}`);
  return event.payload as Extract<RunEvent, { type: T }>['payload'];
}

const ROLE_OF_PHASE = {
  plan: 'planner',
  contract: 'generator',
  contract_review: 'evaluator',
  work: 'generator',
  evaluation: 'evaluator',
} as const;

/** A worker's result for the fixture's request `n`. */
function resultOf(n: number, result: RoleResult['result']): RoleResult {
  return RoleResult.parse({
    requestId: `run-1-${n}`,
    runId: 'run-1',
    role: ROLE_OF_PHASE[result.phase],
    worker: 'worker-1',
    calls: [],
    result,
  });
}

/** One result per phase, built from the fixture's own outputs, and a failure with its model call. */
const SAMPLE_RESULTS: RoleResult[] = [
  resultOf(2, {
    status: 'ok',
    phase: 'plan',
    output: { plan: payloadOfEvent('plan.created').plan, truncation: null },
  }),
  resultOf(6, { status: 'ok', phase: 'contract', output: payloadOfEvent('step.contract.proposed').proposal }),
  resultOf(9, {
    status: 'ok',
    phase: 'contract_review',
    output: payloadOfEvent('step.contract.reviewed').review,
  }),
  resultOf(18, { status: 'ok', phase: 'work', output: payloadOfEvent('step.work.completed').work }),
  resultOf(21, {
    status: 'ok',
    phase: 'evaluation',
    output: payloadOfEvent('step.evaluation.completed').evaluation,
  }),
  {
    ...resultOf(27, {
      status: 'error',
      phase: 'evaluation',
      error: {
        name: 'InvalidOutputError',
        message: 'evaluation answer invalid after 1 tries',
        retryable: false,
      },
      raw: '',
    }),
    calls: [
      {
        role: 'evaluator',
        phase: 'evaluation',
        model: 'gpt-x',
        promptTokens: 900,
        completionTokens: 0,
        costUsd: 0,
        latencyMs: 30000,
        repair: 0,
        outcome: 'invalid',
        problem: 'the answer was empty',
      },
    ],
  },
];

describe('docs/asyncapi.yaml', () => {
  it('is what scripts/gen-asyncapi.ts generates from the current schemas', () => {
    const committed = readFileSync(DOC_PATH, 'utf8');
    const generated = renderAsyncApi();
    const a = committed.split('\n');
    const b = generated.split('\n');
    const line = a.findIndex((text, i) => text !== b[i]);
    expect(
      committed === generated,
      `docs/asyncapi.yaml is out of date (first difference at line ${line + 1}): run \`npx tsx scripts/gen-asyncapi.ts\` and commit the result`,
    ).toBe(true);
  });

  it('is an AsyncAPI 3.0.0 document for pge at the package version, on a NATS server', () => {
    const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8'));
    expect(doc.asyncapi).toBe('3.0.0');
    expect(at('#/info')).toMatchObject({ title: 'pge', version: pkg.version });
    expect(at('#/servers/nats')).toMatchObject({
      protocol: 'nats',
      host: '{host}',
      variables: { host: { default: 'localhost:4222' } },
    });
    const deployed = buildAsyncApi({ natsUrl: 'nats://nats.internal:4333' }) as {
      servers: { nats: { variables: { host: { default: string } } } };
    };
    expect(deployed.servers.nats.variables.host.default).toBe('nats.internal:4333');
  });

  it('is deterministic', () => {
    expect(renderAsyncApi()).toBe(renderAsyncApi());
  });

  it('has a channel for every subject that subjects builds, and none for a subject it does not', () => {
    const built: Record<keyof typeof subjects, string[]> = {
      event: EVENT_TYPES.map((type) => subjects.event('run-1', type)),
      events: [subjects.events('run-1'), subjects.events('*')],
      work: Role.options.map((role) => subjects.work(role)),
      result: [subjects.result('run-1'), subjects.result('*')],
      cancel: [subjects.cancel('run-1'), subjects.cancel('*')],
      submit: [subjects.submit],
      rejected: [subjects.rejected],
      control: [subjects.control('run-1'), subjects.control('*')],
    };
    // A subject builder added to `subjects` must be added above, or this fails.
    expect(Object.keys(built).sort()).toEqual(Object.keys(subjects).sort());

    const channels =
      at<Record<string, { address: string | null; parameters?: Record<string, Json> }>>('#/channels');
    const matchers = Object.entries(channels)
      .filter(([, channel]) => channel.address !== null)
      .map(([name, channel]) => {
        const source = (channel.address as string)
          .split(/(\{[A-Za-z]+\})/)
          .map((part) => {
            const param = /^\{([A-Za-z]+)\}$/.exec(part)?.[1];
            if (!param) return part.replace(/[.*+?^${}()|[\]\\>]/g, '\\$&');
            // `type` is a dotted event type, so it spans one or more subject tokens.
            return param === 'type' ? `(?<${param}>[^.]+(?:\\.[^.]+)*)` : `(?<${param}>[^.]+)`;
          })
          .join('');
        return { name, channel, regex: new RegExp(`^${source}$`) };
      });
    const channelsOf = (subject: string) =>
      matchers
        .filter(({ channel, regex }) => {
          const groups = regex.exec(subject)?.groups;
          if (!regex.test(subject)) return false;
          // A concrete token must be one the parameter allows; `*` and `>` are subscriptions.
          return Object.entries(groups ?? {}).every(([param, value]) => {
            const allowed = (channel.parameters?.[param] as { enum?: string[] } | undefined)?.enum;
            return value === '*' || value === '>' || !allowed || allowed.includes(value);
          });
        })
        .map(({ name }) => name);

    const all = Object.values(built).flat();
    for (const subject of all) expect(channelsOf(subject), subject).toHaveLength(1);
    for (const { name, regex } of matchers) {
      expect(
        all.some((subject) => regex.test(subject)),
        `channel ${name} has no subject in subjects.ts`,
      ).toBe(true);
    }
    expect(channelsOf('pge.run.run-1.evt.step.made.up')).toEqual([]);
    expect(channelsOf('pge.work.janitor')).toEqual([]);
  });

  it('declares exactly the parameters each channel address uses', () => {
    for (const [name, channel] of Object.entries(at<Record<string, Json>>('#/channels'))) {
      const used = [...String(channel.address ?? '').matchAll(/\{([A-Za-z]+)\}/g)].map((m) => m[1]);
      expect(Object.keys((channel.parameters as Json | undefined) ?? {}).sort(), name).toEqual(used.sort());
    }
    expect(at('#/channels/runEvents/parameters/type')).toMatchObject({ enum: EVENT_TYPES });
    expect(at('#/channels/work/parameters/role')).toMatchObject({ enum: Role.options });
  });

  it('has one message per event type, each on the events channel, the requests also on the work queues', () => {
    const onEvents = Object.keys(at('#/channels/runEvents/messages'));
    const onWork = Object.keys(at('#/channels/work/messages'));
    for (const type of EVENT_TYPES) {
      const message = messageOfType(type);
      expect(onEvents).toContain(message);
      expect(payloadOf(message)).toMatchObject({ properties: { type: { const: type } } });
    }
    expect(onEvents).toHaveLength(EVENT_TYPES.length);
    expect(onWork.map((m) => at<{ name: string }>(`#/components/messages/${m}`).name)).toEqual(REQUEST_TYPES);
    expect(
      payloadOf(at<{ $ref: string }>('#/channels/runResults/messages/RoleResult').$ref.split('/').pop()!),
    ).toBe(at('#/components/schemas/RoleResult'));
  });

  it('has the submission request/reply, with the reply on its own channel', () => {
    for (const operation of ['submitRun', 'acceptSubmission']) {
      expect(at(`#/operations/${operation}`)).toMatchObject({
        channel: { $ref: '#/channels/runSubmit' },
        reply: {
          channel: { $ref: '#/channels/runSubmitReply' },
          messages: [{ $ref: '#/channels/runSubmitReply/messages/RunSubmissionReply' }],
        },
      });
    }
    expect(at('#/channels/runSubmit')).toMatchObject({ address: subjects.submit });
    expect(at('#/channels/rejections')).toMatchObject({ address: subjects.rejected });
  });

  it('resolves every $ref, and each operation sends or receives only messages of its channel', () => {
    const refs: string[] = [];
    const walk = (node: unknown): void => {
      if (Array.isArray(node)) node.forEach(walk);
      else if (isObject(node)) {
        if (typeof node.$ref === 'string') refs.push(node.$ref);
        Object.values(node).forEach(walk);
      }
    };
    walk(doc);
    for (const pointer of new Set(refs)) expect(() => deref(pointer), pointer).not.toThrow();
    const operations =
      at<Record<string, { action: string; channel: { $ref: string }; messages: Json[] }>>('#/operations');
    for (const [name, operation] of Object.entries(operations)) {
      expect(['send', 'receive'], name).toContain(operation.action);
      for (const message of operation.messages) {
        expect(String(message.$ref).startsWith(`${operation.channel.$ref}/messages/`), name).toBe(true);
      }
    }
  });
});

describe('message schemas', () => {
  it('have the properties and required fields of the zod schemas they come from', () => {
    const sameShape = (schema: z.ZodObject, json: Json, name: string) => {
      const keys = Object.keys(schema.shape);
      const required = keys.filter((k) => !(schema.shape[k] instanceof z.ZodOptional));
      expect(Object.keys(json.properties as Json), name).toEqual(keys);
      expect(json.required ?? [], name).toEqual(required);
      expect(json.additionalProperties, name).toBe(false);
    };
    for (const member of RunEvent.options) {
      const json = payloadOf(messageOfType(member.shape.type.value));
      sameShape(member, json, member.shape.type.value);
      sameShape(member.shape.payload as z.ZodObject, (json.properties as Json).payload as Json, 'payload');
    }
    sameShape(RoleResult, payloadOf('RoleResult'), 'RoleResult');
    sameShape(RunSubmission, payloadOf('RunSubmission'), 'RunSubmission');
    sameShape(RunSubmissionOptions, at('#/components/schemas/RunSubmissionOptions'), 'RunSubmissionOptions');
    sameShape(RunSubmissionReply, payloadOf('RunSubmissionReply'), 'RunSubmissionReply');
    sameShape(MessageRejection, payloadOf('MessageRejection'), 'MessageRejection');
  });

  it('accept a real event of every type, requests and run.started included', () => {
    const types = new Set(SAMPLE_EVENTS.map((e) => e.type));
    expect([...types].sort()).toEqual([...EVENT_TYPES].sort());
    for (const event of SAMPLE_EVENTS) {
      expect(validate(payloadOf(messageOfType(event.type)), event), `${event.type} #${event.seq}`).toEqual(
        [],
      );
      expect(validate(at('#/components/schemas/RunEvent'), event), event.type).toEqual([]);
    }
    for (const type of [...REQUEST_TYPES, 'run.started' as const]) {
      const request = SAMPLE_EVENTS.find((e) => e.type === type)!;
      expect(validate(at('#/components/schemas/RoleRequest'), request).length === 0, type).toBe(
        REQUEST_TYPES.includes(type),
      );
    }
  });

  it('accept a real result of every phase and a failure, a submission, its reply and a rejection', () => {
    expect(new Set(SAMPLE_RESULTS.map((r) => r.result.phase)).size).toBe(5);
    for (const result of SAMPLE_RESULTS) {
      expect(
        validate(payloadOf('RoleResult'), result),
        `${result.result.status} ${result.result.phase}`,
      ).toEqual([]);
    }
    const submissions = [
      { task: 'Write a haiku about the sea.' },
      {
        task: 'Write a haiku about the sea.',
        options: {
          maxSteps: 3,
          maxRetriesPerStep: 1,
          maxContractRounds: 2,
          onStepExhausted: 'replan',
          maxReplans: 2,
          defaultThresholds: { form: 8 },
          fallbackThreshold: 7,
          maxCostUsd: 0.5,
          maxTokens: 100_000,
          maxDurationMs: 600_000,
        },
      },
    ].map((s) => RunSubmission.parse(s));
    for (const submission of submissions)
      expect(validate(payloadOf('RunSubmission'), submission)).toEqual([]);
    expect(validate(payloadOf('RunSubmissionReply'), RunSubmissionReply.parse({ runId: 'run-1' }))).toEqual(
      [],
    );
    const rejection = MessageRejection.parse({
      subject: 'pge.work.planner',
      problem: 'invalid message on pge.work.planner: not JSON',
      ts: '2026-03-01T10:00:00.000Z',
    });
    expect(validate(payloadOf('MessageRejection'), rejection)).toEqual([]);
  });

  it('reject what the zod schemas reject: a missing or unknown field, a bad id, a score out of range', () => {
    const bothReject = (schema: z.ZodType, json: Json, value: unknown, what: string) => {
      expect(schema.safeParse(value).success, `zod accepts ${what}`).toBe(false);
      expect(validate(json, value), `JSON Schema accepts ${what}`).not.toEqual([]);
    };
    for (const event of SAMPLE_EVENTS.slice(0, run.length)) {
      const json = payloadOf(messageOfType(event.type));
      for (const key of Object.keys(event.payload)) {
        const payload: Json = { ...event.payload };
        delete payload[key];
        bothReject(RunEvent, json, { ...event, payload }, `${event.type} without payload.${key}`);
      }
      bothReject(RunEvent, json, { ...event, extra: 1 }, `${event.type} with an unknown field`);
      bothReject(RunEvent, json, { ...event, runId: 'run.1' }, `${event.type} with a dotted run id`);
      bothReject(RunEvent, json, { ...event, seq: 0 }, `${event.type} with seq 0`);
    }
    const request = SAMPLE_EVENTS.find((e) => e.type === 'plan.requested')!;
    bothReject(
      RunEvent.options.find((s) => s.shape.type.value === 'step.work.requested')!,
      payloadOf(messageOfType('step.work.requested')),
      request,
      'a plan request as a work request',
    );
    const evaluation = SAMPLE_RESULTS.find((r) => r.result.phase === 'evaluation')!;
    const tooHigh = structuredClone(evaluation) as { result: { output: { scores: { score: number }[] } } };
    tooHigh.result.output.scores[0]!.score = 11;
    bothReject(RoleResult, payloadOf('RoleResult'), tooHigh, 'a score of 11');
    bothReject(
      RunSubmission,
      payloadOf('RunSubmission'),
      { task: 't', options: { model: 'x' } },
      'an unknown option',
    );
    bothReject(RunSubmission, payloadOf('RunSubmission'), { task: '' }, 'an empty task');
  });

  it('are judged by a validator that refuses keywords it does not know', () => {
    expect(() => validate({ type: 'string', contentEncoding: 'base64' }, 'x')).toThrow(/contentEncoding/);
  });
});
