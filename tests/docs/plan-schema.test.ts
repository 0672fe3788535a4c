import { readFileSync } from 'node:fs';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { describe, expect, it } from 'vitest';
import { PLAN_SCHEMA_FILE, renderPlanSchema } from '../../scripts/gen-plan-schema.js';
import { checkPlanDocument } from '../../src/api/plan-file.js';
import { PLAN_DOCUMENT_SCHEMA_REF, PlanDocument } from '../../src/schemas/index.js';

/**
 * `schemas/plan.schema.json`, the JSON Schema of a plan document that ships with the package: it is
 * what `npm run schemas` makes of `PlanDocument` now, it accepts the hand-written example
 * (`examples/plan.json`), which pge reads too, and it refuses what pge refuses of those faults JSON
 * Schema can state. Judged by Ajv in strict mode, on the draft the schema declares (2020-12).
 */

const COMMITTED = readFileSync(PLAN_SCHEMA_FILE, 'utf8');
const EXAMPLE = JSON.parse(readFileSync(new URL('../../examples/plan.json', import.meta.url), 'utf8'));
const validate = new Ajv2020({ strict: true, allErrors: true }).compile(JSON.parse(COMMITTED));

/** What the JSON Schema finds wrong with a document: [] when it accepts it. */
function problems(value: unknown): string[] {
  return validate(value) ? [] : (validate.errors ?? []).map((e) => `${e.instancePath || '/'} ${e.message}`);
}

describe('schemas/plan.schema.json', () => {
  it('is what scripts/gen-plan-schema.ts generates from PlanDocument', () => {
    expect(
      COMMITTED === renderPlanSchema(),
      'schemas/plan.schema.json is out of date: run `npm run schemas` and commit the result',
    ).toBe(true);
  });

  it('ships with the package, where the $schema pge plan writes points', () => {
    const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8'));
    expect(pkg.files).toContain('schemas');
    expect(PLAN_DOCUMENT_SCHEMA_REF).toBe(`node_modules/${pkg.name}/schemas/plan.schema.json`);
  });

  it('accepts the hand-written example, which pge reads as a plan document too', () => {
    expect(problems(EXAMPLE)).toEqual([]);
    const doc = checkPlanDocument(EXAMPLE, 'examples/plan.json');
    expect(doc.steps.map((s) => [s.id, s.dependsOn])).toEqual([
      ['setup', []],
      ['tests', ['setup']],
      ['first-change', ['setup', 'tests']],
    ]);
    expect(doc.criteria.map((c) => [c.name, c.weight, c.threshold])).toEqual([
      ['accuracy', 'high', 8],
      ['clarity', 'standard', null],
      ['brevity', 'low', 6],
    ]);
  });

  it('refuses what pge refuses, where JSON Schema can say it', () => {
    const [first] = EXAMPLE.steps;
    const broken: Record<string, unknown> = {
      'no version': { ...EXAMPLE, version: undefined },
      'version 2': { ...EXAMPLE, version: 2 },
      'a misspelt field': { ...EXAMPLE, steps: [{ ...first, depends_on: [] }] },
      'no steps': { ...EXAMPLE, steps: [] },
      'an id with a space': { ...EXAMPLE, steps: [{ ...first, id: 'set up' }] },
      'an empty title': { ...EXAMPLE, steps: [{ ...first, title: '' }] },
      'threshold 11': { ...EXAMPLE, criteria: [{ name: 'accuracy', threshold: 11 }] },
      'no criteria': { ...EXAMPLE, criteria: [] },
    };
    for (const [what, doc] of Object.entries(broken)) {
      const value = JSON.parse(JSON.stringify(doc));
      expect(problems(value).length, what).toBeGreaterThan(0);
      expect(PlanDocument.safeParse(value).success, what).toBe(false);
    }
  });
});
