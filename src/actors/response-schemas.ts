import { z } from 'zod';
import { deepFreeze } from '../deep-freeze.js';
import type { Phase } from '../schemas/index.js';
import { ContractProposal, ContractReview, Evaluation, Plan, Work } from '../schemas/index.js';

/**
 * The schema each phase's answer must follow, as zod (what the role validates with) and as the
 * JSON Schema sent to the model. The JSON Schema is generated from the zod schema, never written by
 * hand, and rewritten into the subset OpenAI accepts with `strict: true`: an object at the root,
 * every object closed (`additionalProperties: false`) with every property required, and only the
 * keywords the Structured Outputs guide lists. Whatever is dropped is still enforced by zod.
 */

const ZOD_SCHEMAS = {
  // Plan is an object at the root already; its cross-field checks (unique ids, earlier
  // dependencies) are a superRefine that JSON Schema cannot say, so zod alone enforces them.
  plan: Plan,
  contract: ContractProposal,
  contract_review: ContractReview,
  work: Work,
  evaluation: Evaluation,
} as const satisfies Record<Phase, z.ZodType>;

/** The answer schema of one phase: its `pge_<phase>` name, the zod schema and the strict JSON Schema. */
export interface ResponseSchema<P extends Phase = Phase> {
  name: `pge_${P}`;
  schema: (typeof ZOD_SCHEMAS)[P];
  /** Deeply frozen: one object is shared by every call of the phase. */
  jsonSchema: Record<string, unknown>;
}

type JsonObject = Record<string, unknown>;

// Keywords OpenAI strict mode documents as supported, kept as zod emits them.
const KEPT = new Set([
  'type',
  'enum',
  'const',
  'description',
  '$ref',
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
// Pure annotations: dropping them changes nothing the model must do.
const ANNOTATIONS = new Set(['title', 'default', 'examples', '$comment', 'readOnly', 'writeOnly', '$id']);
// The string formats the Structured Outputs guide lists; any other would be refused.
const FORMATS = new Set([
  'date-time',
  'time',
  'date',
  'duration',
  'email',
  'hostname',
  'ipv4',
  'ipv6',
  'uuid',
]);

function isObject(value: unknown): value is JsonObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Rewrites one JSON Schema node (and its children) into the strict subset; throws on what it cannot keep. */
function strictify(node: unknown, path: string): JsonObject {
  if (!isObject(node)) throw new Error(`${path}: expected a schema object, got ${JSON.stringify(node)}`);
  if (isObject(node.additionalProperties)) {
    throw new Error(`${path}: records (additionalProperties with a schema) are not supported by strict mode`);
  }
  const out: JsonObject = {};
  const hints: string[] = [];
  for (const [key, value] of Object.entries(node)) {
    if (key === 'properties') {
      if (!isObject(value)) throw new Error(`${path}/properties is not an object`);
      out.properties = Object.fromEntries(
        Object.entries(value).map(([name, child]) => [name, strictify(child, `${path}/properties/${name}`)]),
      );
    } else if (key === 'items') {
      if (!isObject(value)) throw new Error(`${path}/items: tuples are not supported by strict mode`);
      out.items = strictify(value, `${path}/items`);
    } else if (key === 'anyOf' || key === 'oneOf') {
      // Strict mode has no oneOf; zod still rejects an answer that matches two branches.
      if (!Array.isArray(value)) throw new Error(`${path}/${key} is not an array`);
      out.anyOf = value.map((child, i) => strictify(child, `${path}/anyOf/${i}`));
    } else if (key === '$defs' || key === 'definitions') {
      if (!isObject(value)) throw new Error(`${path}/${key} is not an object`);
      out.$defs = Object.fromEntries(
        Object.entries(value).map(([name, child]) => [name, strictify(child, `${path}/$defs/${name}`)]),
      );
    } else if (key === 'additionalProperties' || key === 'required') {
      // Rebuilt below from `properties`, which is the only source of truth for an object.
    } else if (key === 'minLength' || key === 'maxLength') {
      // Not in strict mode's list; say it in words so the model still aims for it.
      if (key === 'maxLength') hints.push(`at most ${String(value)} characters long`);
      else if (value === 1) hints.push('non-empty');
      else hints.push(`at least ${String(value)} characters long`);
    } else if (key === 'format') {
      if (typeof value === 'string' && FORMATS.has(value)) out.format = value;
    } else if (KEPT.has(key)) {
      out[key] = value;
    } else if (!ANNOTATIONS.has(key) && key !== '$schema') {
      // allOf, not, if/then/else, patternProperties, prefixItems, …: dropping them would change the
      // shape the model aims for, so the schema must be changed instead.
      throw new Error(`${path}: keyword "${key}" is not supported by OpenAI strict structured outputs`);
    }
  }
  if (hints.length > 0) {
    const said = typeof out.description === 'string' ? `${out.description} ` : '';
    out.description = `${said}Must be ${hints.join(' and ')}.`;
  }
  if (out.type === 'object' || 'properties' in out) closeObject(node, out, path);
  return out;
}

/** Makes an object node strict: closed, and every property required. */
function closeObject(source: JsonObject, out: JsonObject, path: string): void {
  const properties = isObject(out.properties) ? out.properties : {};
  const required = new Set(Array.isArray(source.required) ? source.required : []);
  const names = Object.keys(properties);
  const given = isObject(source.properties) ? source.properties : {};
  for (const name of names) {
    // A property with a default is asked of the model like any other; zod fills it in where an
    // answer recorded before it existed lacks it.
    const child = given[name];
    const defaulted = isObject(child) && 'default' in child;
    if (!required.has(name) && !defaulted) {
      throw new Error(
        `${path}/properties/${name} is optional; strict mode needs every property required: use .nullable(), not .optional()`,
      );
    }
  }
  out.type = 'object';
  out.properties = properties;
  out.required = names;
  out.additionalProperties = false;
}

/**
 * Converts a zod schema into a JSON Schema that OpenAI accepts with `strict: true`. The input side
 * is used (`io: 'input'`) because that is what the model writes; transforms such as criterion-name
 * normalisation run when zod parses the answer. Throws when the schema cannot be made strict
 * (optional properties, records, tuples, `allOf` …) rather than send a schema the API refuses.
 */
export function toStrictJsonSchema(schema: z.ZodType): Record<string, unknown> {
  const strict = strictify(z.toJSONSchema(schema, { io: 'input', target: 'draft-2020-12' }), '#');
  if (strict.type !== 'object') throw new Error('#: strict structured outputs need an object at the root');
  return strict;
}

const cache = new Map<Phase, ResponseSchema>();

/**
 * The answer schema of a phase: name `pge_<phase>`, the zod schema the role validates with, and the
 * strict JSON Schema for `response_format`. Generated once per phase and cached.
 */
export function responseSchemaFor<P extends Phase>(phase: P): ResponseSchema<P> {
  let entry = cache.get(phase);
  if (!entry) {
    const schema = ZOD_SCHEMAS[phase];
    // Only the JSON Schema is frozen: zod schemas keep lazy caches of their own. Answers are
    // checked with the compiled clone (same results and errors, a generated fast path).
    entry = {
      name: `pge_${phase}` as const,
      schema: z.compile(schema),
      jsonSchema: deepFreeze(toStrictJsonSchema(schema)),
    };
    cache.set(phase, entry);
  }
  return entry as ResponseSchema<P>;
}
