import { Ajv, type ValidateFunction } from 'ajv';
import formats from 'ajv-formats';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { MessageRejection } from '../../src/bus/codec.js';
import { RoleResult, RunEvent } from '../../src/schemas/index.js';
import { RunSubmission, RunSubmissionOptions, RunSubmissionReply } from '../../src/schemas/submission.js';
import {
  at,
  doc,
  EVENT_TYPES,
  type Json,
  messageOfType,
  payloadOf,
  payloadRef,
  REQUEST_TYPES,
  run,
  SAMPLE_EVENTS,
  SAMPLE_RESULTS,
} from './asyncapi-support.js';

// ajv-formats is CommonJS with an `exports.default`, which Node's ESM loader hands over as a property.
const addFormats = formats.default;

/**
 * The message schemas of docs/asyncapi.yaml against the zod schemas they are generated from: the
 * same fields, and the same verdict on real pge messages and on broken ones. The messages are
 * judged by Ajv in strict mode (an unknown keyword or format is an error, not a pass) with its
 * formats, on JSON Schema draft-07, the draft the document declares for its payloads.
 */

const ajv = new Ajv({ strict: true, allErrors: true });
addFormats(ajv);
// The document is one schema resource, so that its local $refs (#/components/schemas/…) resolve;
// its AsyncAPI fields are declared as keywords with no meaning, and only the schemas under
// components are ever compiled.
ajv.addVocabulary(Object.keys(doc));
ajv.addSchema(doc, 'asyncapi');

/** The validator of the schema at a local pointer of the document. */
function validatorAt(pointer: string): ValidateFunction {
  const validate = ajv.getSchema(`asyncapi${pointer}`);
  if (!validate) throw new Error(`no schema at ${pointer}`);
  return validate;
}

/** What the schema at `pointer` finds wrong with `value`: [] when it accepts it. */
function problems(pointer: string, value: unknown): string[] {
  const validate = validatorAt(pointer);
  return validate(value) ? [] : (validate.errors ?? []).map((e) => `${e.instancePath || '/'} ${e.message}`);
}

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
    const replies = payloadOf('RunSubmissionReply').anyOf as Json[];
    expect(replies).toHaveLength(RunSubmissionReply.options.length);
    RunSubmissionReply.options.forEach((option, i) => {
      sameShape(option, replies[i]!, `RunSubmissionReply option ${i}`);
    });
    sameShape(MessageRejection, payloadOf('MessageRejection'), 'MessageRejection');
  });

  it('accept a real event of every type, requests and run.started included', () => {
    const types = new Set(SAMPLE_EVENTS.map((e) => e.type));
    expect([...types].sort()).toEqual([...EVENT_TYPES].sort());
    for (const event of SAMPLE_EVENTS) {
      expect(problems(payloadRef(messageOfType(event.type)), event), `${event.type} #${event.seq}`).toEqual(
        [],
      );
      expect(problems('#/components/schemas/RunEvent', event), event.type).toEqual([]);
    }
    for (const type of [...REQUEST_TYPES, 'run.started' as const]) {
      const request = SAMPLE_EVENTS.find((e) => e.type === type)!;
      expect(problems('#/components/schemas/RoleRequest', request).length === 0, type).toBe(
        REQUEST_TYPES.includes(type),
      );
    }
  });

  it('accept a real result of every phase and a failure, a submission, its reply and a rejection', () => {
    expect(new Set(SAMPLE_RESULTS.map((r) => r.result.phase)).size).toBe(5);
    for (const result of SAMPLE_RESULTS) {
      expect(
        problems(payloadRef('RoleResult'), result),
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
      expect(problems(payloadRef('RunSubmission'), submission)).toEqual([]);
    const refused = {
      error: { name: 'ConfigurationError', message: 'run id run-1 is taken', retryable: false },
    };
    for (const reply of [{ runId: 'run-1' }, refused])
      expect(problems(payloadRef('RunSubmissionReply'), RunSubmissionReply.parse(reply))).toEqual([]);
    expect(problems(payloadRef('RunSubmissionReply'), { ...refused, runId: 'run-1' })).not.toEqual([]);
    const rejection = MessageRejection.parse({
      subject: 'pge.work.planner',
      problem: 'invalid message on pge.work.planner: not JSON',
      ts: '2026-03-01T10:00:00.000Z',
    });
    expect(problems(payloadRef('MessageRejection'), rejection)).toEqual([]);
  });

  it('reject what the zod schemas reject: a missing or unknown field, a bad id, a score out of range', () => {
    const bothReject = (schema: z.ZodType, pointer: string, value: unknown, what: string) => {
      expect(schema.safeParse(value).success, `zod accepts ${what}`).toBe(false);
      expect(problems(pointer, value), `JSON Schema accepts ${what}`).not.toEqual([]);
    };
    for (const event of SAMPLE_EVENTS.slice(0, run.length)) {
      const json = payloadRef(messageOfType(event.type));
      for (const key of Object.keys(event.payload)) {
        const payload: Json = { ...event.payload };
        delete payload[key];
        bothReject(RunEvent, json, { ...event, payload }, `${event.type} without payload.${key}`);
      }
      bothReject(RunEvent, json, { ...event, extra: 1 }, `${event.type} with an unknown field`);
      bothReject(RunEvent, json, { ...event, runId: 'run.1' }, `${event.type} with a dotted run id`);
      bothReject(RunEvent, json, { ...event, seq: 0 }, `${event.type} with seq 0`);
      bothReject(RunEvent, json, { ...event, ts: 'yesterday' }, `${event.type} with a time that is not one`);
    }
    const request = SAMPLE_EVENTS.find((e) => e.type === 'plan.requested')!;
    bothReject(
      RunEvent.options.find((s) => s.shape.type.value === 'step.work.requested')!,
      payloadRef(messageOfType('step.work.requested')),
      request,
      'a plan request as a work request',
    );
    const evaluation = SAMPLE_RESULTS.find((r) => r.result.phase === 'evaluation')!;
    const tooHigh = structuredClone(evaluation) as { result: { output: { scores: { score: number }[] } } };
    tooHigh.result.output.scores[0]!.score = 11;
    bothReject(RoleResult, payloadRef('RoleResult'), tooHigh, 'a score of 11');
    bothReject(
      RunSubmission,
      payloadRef('RunSubmission'),
      { task: 't', options: { model: 'x' } },
      'an unknown option',
    );
    bothReject(RunSubmission, payloadRef('RunSubmission'), { task: '' }, 'an empty task');
  });

  it('are judged in strict mode: a schema with a keyword or format Ajv does not know is an error', () => {
    const strict = new Ajv({ strict: true });
    addFormats(strict);
    expect(() => strict.compile({ type: 'string', contentEncodng: 'base64' })).toThrow(/unknown keyword/);
    expect(() => strict.compile({ type: 'string', format: 'date-tim' })).toThrow(/unknown format/);
    expect(strict.compile({ type: 'string', format: 'date-time' })('2026-03-01T10:00:00.000Z')).toBe(true);
  });
});
