import { z } from 'zod';
import { deepFreeze } from '../deep-freeze.js';
import type { Phase } from '../schemas/index.js';
import { ContractProposal, ContractReview, Evaluation, Plan, Work } from '../schemas/index.js';

/**
 * The schema each phase's answer must follow, as zod (what the role validates with) and as the
 * JSON Schema sent to the model. The JSON Schema is made strict by the openai SDK's own helper
 * (`standardResponseFormat`): an object at the root, every object closed with every property
 * required, and `.optional()` without `.nullable()`, records, tuples and `allOf` refused. pge then
 * only narrows it to the keywords the Structured Outputs guide lists. Whatever is dropped is still
 * enforced by zod.
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

// Keywords the Structured Outputs guide lists as supported ("Supported schemas"), kept as they are.
const LISTED = new Set([
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
  'definitions',
  'pattern',
  'minimum',
  'maximum',
  'exclusiveMinimum',
  'exclusiveMaximum',
  'multipleOf',
  'minItems',
  'maxItems',
]);
// Root metadata and annotations, which the SDK keeps: dropping them changes nothing the model must do.
const ANNOTATIONS = new Set(['$schema', 'title', 'default', 'examples', '$comment', 'readOnly', 'writeOnly']);
// The string formats the guide lists; the SDK passes any other, which the API would refuse.
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
const SUBSCHEMA_MAPS = new Set(['properties', '$defs', 'definitions']);

function isObject(value: unknown): value is JsonObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * Narrows one node of the SDK's strict schema (and its children) to the listed keywords. The SDK
 * refuses the keywords it knows strict mode lacks but passes any other through, string lengths
 * included: lengths become words in the description, so that the model still aims for them.
 */
function narrow(node: unknown, path: string): JsonObject {
  if (!isObject(node)) throw new Error(`${path}: expected a schema object, got ${JSON.stringify(node)}`);
  const out: JsonObject = {};
  const hints: string[] = [];
  for (const [key, value] of Object.entries(node)) {
    if (SUBSCHEMA_MAPS.has(key) && isObject(value)) {
      out[key] = Object.fromEntries(
        Object.entries(value).map(([name, child]) => [name, narrow(child, `${path}/${key}/${name}`)]),
      );
    } else if (key === 'items') {
      out.items = narrow(value, `${path}/items`);
    } else if (key === 'anyOf' && Array.isArray(value)) {
      out.anyOf = value.map((child, i) => narrow(child, `${path}/anyOf/${i}`));
    } else if (key === 'minLength') {
      hints.push(value === 1 ? 'non-empty' : `at least ${String(value)} characters long`);
    } else if (key === 'maxLength') {
      hints.push(`at most ${String(value)} characters long`);
    } else if (key === 'format') {
      if (typeof value === 'string' && FORMATS.has(value)) out.format = value;
    } else if (LISTED.has(key)) {
      out[key] = value;
    } else if (!ANNOTATIONS.has(key)) {
      throw new Error(`${path}: keyword "${key}" is not supported by OpenAI strict structured outputs`);
    }
  }
  if (hints.length > 0) {
    const said = typeof out.description === 'string' ? `${out.description} ` : '';
    out.description = `${said}Must be ${hints.join(' and ')}.`;
  }
  return out;
}

type StandardSchemaHelpers = typeof import('openai/helpers/standard-schema');
let helpers: Promise<StandardSchemaHelpers> | undefined;

/**
 * Converts a zod schema into a JSON Schema that OpenAI accepts with `strict: true`. Rejects when
 * the schema cannot be made strict, rather than send one the API refuses. The SDK's helper is
 * loaded here, at the first role call, not with the library; `standardResponseFormat` and not
 * `zodResponseFormat` because it converts the input side, which is what the model writes
 * (transforms such as criterion-name normalisation run when zod parses the answer).
 */
export async function toStrictJsonSchema(schema: z.ZodType): Promise<Record<string, unknown>> {
  if (!helpers) {
    const loading = import('openai/helpers/standard-schema');
    helpers = loading;
    // Only a loaded module is kept: a failed load is tried again at the next call.
    loading.catch(() => {
      if (helpers === loading) helpers = undefined;
    });
  }
  const { standardResponseFormat } = await helpers;
  return narrow(standardResponseFormat(schema, 'pge').json_schema.schema, '#');
}

const compiledSchemas = new Map<Phase, z.ZodType>();

/**
 * The zod schema an answer of `phase` is validated with, compiled once (same results and errors as
 * the schema, a generated fast path).
 */
export function answerSchemaFor<P extends Phase>(phase: P): (typeof ZOD_SCHEMAS)[P] {
  let schema = compiledSchemas.get(phase);
  if (!schema) {
    schema = z.compile(ZOD_SCHEMAS[phase]);
    compiledSchemas.set(phase, schema);
  }
  return schema as (typeof ZOD_SCHEMAS)[P];
}

const cache = new Map<Phase, Promise<ResponseSchema>>();

/**
 * The answer schema of a phase: name `pge_<phase>`, the zod schema the role validates with, and the
 * strict JSON Schema for `response_format`. Generated once per phase and cached; a failure is not
 * cached, so the next call tries again.
 */
export function responseSchemaFor<P extends Phase>(phase: P): Promise<ResponseSchema<P>> {
  let entry = cache.get(phase);
  if (!entry) {
    // Only the JSON Schema is frozen: zod schemas keep lazy caches of their own.
    entry = toStrictJsonSchema(ZOD_SCHEMAS[phase]).then((jsonSchema) => ({
      name: `pge_${phase}` as const,
      schema: answerSchemaFor(phase),
      jsonSchema: deepFreeze(jsonSchema),
    }));
    cache.set(phase, entry);
    const settled = entry;
    // Only a schema is kept: after a failure the next call generates it again.
    settled.catch(() => {
      if (cache.get(phase) === settled) cache.delete(phase);
    });
  }
  return entry as Promise<ResponseSchema<P>>;
}
