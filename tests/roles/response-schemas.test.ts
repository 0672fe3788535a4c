import { describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import { answerSchemaFor, responseSchemaFor, toStrictJsonSchema } from '../../src/roles/response-schemas.js';
import { Phase, Plan } from '../../src/schemas/index.js';

// The subset OpenAI documents for `strict: true` (Structured Outputs guide, "Supported schemas").
const ALLOWED = new Set([
  'type',
  'properties',
  'required',
  'additionalProperties',
  'items',
  'anyOf',
  'enum',
  'const',
  'description',
  '$ref',
  '$defs',
  'pattern',
  'format',
  'minimum',
  'maximum',
  'exclusiveMinimum',
  'exclusiveMaximum',
  'multipleOf',
  'minItems',
  'maxItems',
]);
const TYPES = new Set(['object', 'array', 'string', 'number', 'integer', 'boolean', 'null']);
const MAX_OBJECT_DEPTH = 10;

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Every way `schema` breaks OpenAI's strict-mode rules, as `path: problem` lines. */
function strictViolations(schema: unknown, path = '#', depth = 0): string[] {
  if (!isObject(schema)) return [`${path}: not a schema object`];
  const problems: string[] = [];
  if (path === '#') {
    if (schema.type !== 'object') problems.push('#: the root is not an object');
    if ('anyOf' in schema) problems.push('#: anyOf at the root');
  }
  for (const key of Object.keys(schema)) if (!ALLOWED.has(key)) problems.push(`${path}: keyword "${key}"`);
  const types = Array.isArray(schema.type) ? schema.type : [schema.type];
  if (schema.type !== undefined && !types.every((t) => typeof t === 'string' && TYPES.has(t))) {
    problems.push(`${path}: type ${JSON.stringify(schema.type)}`);
  }
  if (types.includes('object') || 'properties' in schema) {
    if (depth + 1 > MAX_OBJECT_DEPTH)
      problems.push(`${path}: objects nested deeper than ${MAX_OBJECT_DEPTH}`);
    if (schema.additionalProperties !== false) problems.push(`${path}: additionalProperties is not false`);
    const properties = isObject(schema.properties) ? schema.properties : {};
    if (!isObject(schema.properties)) problems.push(`${path}: object without properties`);
    const required = Array.isArray(schema.required) ? [...schema.required].sort() : [];
    if (JSON.stringify(required) !== JSON.stringify(Object.keys(properties).sort())) {
      problems.push(`${path}: required ${JSON.stringify(required)} is not every property`);
    }
    for (const [name, child] of Object.entries(properties)) {
      problems.push(...strictViolations(child, `${path}/properties/${name}`, depth + 1));
    }
  }
  if (types.includes('array')) {
    if (!isObject(schema.items)) problems.push(`${path}: array without an items schema`);
    else problems.push(...strictViolations(schema.items, `${path}/items`, depth));
  }
  if ('anyOf' in schema) {
    if (!Array.isArray(schema.anyOf)) problems.push(`${path}: anyOf is not an array`);
    else {
      for (const [i, branch] of schema.anyOf.entries()) {
        problems.push(...strictViolations(branch, `${path}/anyOf/${i}`, depth));
      }
    }
  }
  if (isObject(schema.$defs)) {
    for (const [name, d] of Object.entries(schema.$defs))
      problems.push(...strictViolations(d, `${path}/$defs/${name}`, depth));
  }
  return problems;
}

const criterion = { name: ' Correctness ', weight: 'high', description: 'It works.', threshold: 7 };
const SAMPLES: Record<Phase, unknown> = {
  plan: {
    scope: 'A haiku about rivers.',
    steps: [
      { id: 'draft', title: 'Draft', description: 'Write it.', expectedOutput: 'A haiku', dependsOn: [] },
      {
        id: 'polish',
        title: 'Polish',
        description: 'Tighten it.',
        expectedOutput: 'A haiku',
        dependsOn: ['draft'],
      },
    ],
    criteria: [criterion, { ...criterion, name: 'form', threshold: null }],
  },
  contract: {
    title: 'Draft',
    acceptanceCriteria: ['three lines'],
    expectedOutput: 'A haiku',
    verificationMethod: 'Count syllables.',
  },
  contract_review: { status: 'amendments_required', amendments: ['name the river'], rationale: 'Too vague.' },
  work: {
    output: 'Water finds its way',
    notes: '',
    selfAssessment: [{ criterion: 'correctness', score: 8, comment: 'ok' }],
  },
  evaluation: {
    scores: [{ criterion: 'correctness', score: 6.5, evidence: 'line 2' }],
    findings: ['short'],
    actionableFeedback: ['add an image'],
    summary: 'Fine.',
  },
};

describe('responseSchemaFor', () => {
  it.each(Phase.options)('gives %s a strict-mode JSON Schema named pge_<phase>', async (phase) => {
    const { name, jsonSchema } = await responseSchemaFor(phase);
    expect(name).toBe(`pge_${phase}`);
    expect(strictViolations(jsonSchema)).toEqual([]);
    expect(JSON.stringify(jsonSchema)).not.toContain('$schema');
  });

  it.each(Phase.options)('gives %s a zod schema that parses a valid answer', async (phase) => {
    const { schema } = await responseSchemaFor(phase);
    expect(schema.safeParse(SAMPLES[phase]).success).toBe(true);
    expect(schema).toBe(answerSchemaFor(phase));
  });

  it('keeps zod as the judge of what JSON Schema cannot say', async () => {
    const schema = answerSchemaFor('plan');
    const plan = SAMPLES.plan as z.input<typeof Plan>;
    const backwards = { ...plan, steps: [plan.steps[1], plan.steps[0]] };
    expect(schema.safeParse(backwards).success).toBe(false);
    expect(schema.parse(plan).criteria[0]?.name).toBe('correctness');
    expect(
      answerSchemaFor('contract_review').safeParse({
        status: 'amendments_required',
        amendments: [],
        rationale: '',
      }).success,
    ).toBe(false);
  });

  it('tries the SDK helper again after it failed to load, instead of caching the failure', async () => {
    let loads = 0;
    vi.resetModules();
    vi.doMock('openai/helpers/standard-schema', async (importOriginal) => {
      loads += 1;
      if (loads === 1) throw new Error('helper unavailable');
      return importOriginal();
    });
    try {
      // A fresh copy of the module: its caches are empty whatever the other tests loaded.
      const fresh = await import('../../src/roles/response-schemas.js');
      // vitest wraps the factory's error in one of its own; that the call rejects is what counts.
      await expect(fresh.responseSchemaFor('plan')).rejects.toThrow();
      expect(loads).toBe(1);
      const schema = await fresh.responseSchemaFor('plan');
      expect(schema.name).toBe('pge_plan');
      expect(schema.jsonSchema.type).toBe('object');
      expect(await fresh.responseSchemaFor('plan')).toBe(schema);
      expect(loads).toBe(2);
    } finally {
      vi.doUnmock('openai/helpers/standard-schema');
      vi.resetModules();
    }
  });

  it('caches one frozen JSON Schema per phase', async () => {
    const first = await responseSchemaFor('work');
    expect(await responseSchemaFor('work')).toBe(first);
    expect(Object.isFrozen(first.jsonSchema)).toBe(true);
    expect(Object.isFrozen((first.jsonSchema.properties as Record<string, unknown>).output)).toBe(true);
  });

  it('keeps documented constraints and turns string lengths into words', async () => {
    const plan = (await responseSchemaFor('plan')).jsonSchema as {
      properties: {
        steps: { minItems: number; items: { properties: Record<string, Record<string, unknown>> } };
      };
    };
    expect(plan.properties.steps.minItems).toBe(1);
    const id = plan.properties.steps.items.properties.id;
    expect(id).toMatchObject({ type: 'string', pattern: '^[A-Za-z0-9_-]+$' });
    expect(id).not.toHaveProperty('minLength');
    expect(id?.description).toBe('Must be non-empty and at most 128 characters long.');
    const score = (await responseSchemaFor('evaluation')).jsonSchema as {
      properties: { scores: { items: { properties: { score: unknown } } } };
    };
    expect(score.properties.scores.items.properties.score).toEqual({
      type: 'number',
      minimum: 1,
      maximum: 10,
    });
  });
});

describe('the strict-mode checker and converter', () => {
  it('finds what zod emits before conversion', () => {
    const raw = z.toJSONSchema(Plan, { io: 'input' });
    expect(strictViolations(raw)).toEqual(
      expect.arrayContaining(['#: keyword "$schema"', '#: additionalProperties is not false']),
    );
  });

  it('refuses, through the SDK, schemas strict mode cannot express', async () => {
    const refusal = (schema: z.ZodType) => toStrictJsonSchema(schema).then(() => 'accepted', String);
    expect(await refusal(z.object({ a: z.string().optional() }))).toMatch(
      /properties\/a` uses `\.optional\(\)` without `\.nullable\(\)`/,
    );
    expect(await refusal(z.object({ a: z.record(z.string(), z.number()) }))).toMatch(
      /properties\/a` must set `additionalProperties: false`/,
    );
    expect(await refusal(z.array(z.string()))).toMatch(/Root schema must have type: 'object'/);
    expect(await refusal(z.object({ a: z.string().and(z.number()) }))).toMatch(/unsupported keyword `allOf`/);
    expect(await refusal(z.object({ a: z.tuple([z.string(), z.number()]) }))).toMatch(/tuple-form `items`/);
    expect(await refusal(z.object({ a: z.date() }))).toMatch(/Date cannot be represented/);
  });

  it('refuses a keyword the SDK lets through but strict mode does not list', async () => {
    await expect(toStrictJsonSchema(z.object({ a: z.string().meta({ deprecated: true }) }))).rejects.toThrow(
      '#/properties/a: keyword "deprecated" is not supported by OpenAI strict structured outputs',
    );
  });

  it('drops annotations and formats strict mode does not list, and keeps the listed ones', async () => {
    const schema = await toStrictJsonSchema(
      z.object({
        site: z.url().meta({ title: 'Site', examples: ['https://example.com'] }),
        mail: z.email(),
      }),
    );
    expect(strictViolations(schema)).toEqual([]);
    expect(schema.properties).toMatchObject({
      site: { type: 'string' },
      mail: { type: 'string', format: 'email' },
    });
    expect(schema.properties).not.toHaveProperty('site.format');
    expect(schema.properties).not.toHaveProperty('site.title');
  });

  it('accepts nullable fields, the strict-mode way to say optional', async () => {
    const schema = await toStrictJsonSchema(
      z.object({ a: z.string().nullable(), b: z.number().min(0).nullable() }),
    );
    expect(strictViolations(schema)).toEqual([]);
    expect(schema.properties).toEqual({
      a: { type: ['string', 'null'] },
      b: { anyOf: [{ type: 'number', minimum: 0 }, { type: 'null' }] },
    });
  });
});
