/**
 * Generates `schemas/plan.schema.json`, the JSON Schema of a plan document (`pge plan --out`,
 * `pge run --plan`), from the zod schema `PlanDocument`, so that an editor can check and complete a
 * plan a person writes. It ships with the package: a plan document's `$schema` names it as
 * `node_modules/pge/schemas/plan.schema.json`.
 *
 *   npm run schemas          # rewrites schemas/plan.schema.json
 *
 * `tests/docs/plan-schema.test.ts` fails when the committed file differs from what this script builds.
 *
 * The schema is zod's `io: 'input'` JSON Schema: a document as a person writes it, in which the
 * fields with defaults (`dependsOn`, `weight`, `threshold`, …) may be left out. Every object is
 * closed, as `PlanDocument` refuses unknown fields. What JSON Schema cannot state (unique step ids
 * and criterion names, dependencies on earlier steps only) is said in the descriptions, and checked
 * by pge when it reads the file.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import { PLAN_DOCUMENT_SCHEMA_ID, PLAN_DOCUMENT_VERSION, PlanDocument } from '../src/schemas/index.js';

const ROOT = resolve(fileURLToPath(import.meta.url), '../..');
/** Where the schema is committed, and shipped from. */
export const PLAN_SCHEMA_FILE = resolve(ROOT, 'schemas/plan.schema.json');

/** The JSON Schema of a plan document, as an object. */
export function buildPlanSchema(): Record<string, unknown> {
  const { $schema, ...schema } = z.toJSONSchema(PlanDocument, {
    target: 'draft-2020-12',
    io: 'input',
    unrepresentable: 'any',
  });
  return {
    $schema,
    $id: PLAN_DOCUMENT_SCHEMA_ID,
    title: `pge plan document, version ${PLAN_DOCUMENT_VERSION}`,
    description:
      'A plan for pge: the steps a task is done in and the rubric each step is judged by. Written by `pge plan --out`, run by `pge run --plan`. ' +
      'Beyond this schema, pge checks that step ids and criterion names (compared trimmed and in lower case) are unique, and that a step depends only on earlier steps.',
    ...schema,
  };
}

/** The schema as the committed file holds it. */
export function renderPlanSchema(): string {
  return `${JSON.stringify(buildPlanSchema(), null, 2)}\n`;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const text = renderPlanSchema();
  const before = (() => {
    try {
      return readFileSync(PLAN_SCHEMA_FILE, 'utf8');
    } catch {
      return null;
    }
  })();
  writeFileSync(PLAN_SCHEMA_FILE, text);
  console.log(`${PLAN_SCHEMA_FILE}: ${before === text ? 'unchanged' : 'written'}`);
}
