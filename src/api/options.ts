import { accessSync, constants, mkdirSync } from 'node:fs';
import { resolve } from 'node:path';
import { z } from 'zod';
import type { Model } from '../actors/model.js';
import { ConfigurationError } from '../errors.js';
import type { RunEvent } from '../schemas/index.js';

/**
 * The options of `PlannerGeneratorEvaluator`: the reference's options in camelCase, plus pge's.
 * Unknown names are an error (the reference silently swallows them in `**kwargs`).
 */

const isModel = (value: unknown): value is Model =>
  typeof value === 'object' &&
  value !== null &&
  typeof (value as Model).complete === 'function' &&
  typeof (value as Model).name === 'string';

const agent = z.custom<Model>(isModel, {
  error: 'must be a Model: an object with a `name` and a `complete(request)` method',
});

const score = (name: string) =>
  z
    .number({ error: `${name} must be a number` })
    .min(1, { error: `${name} must be between 1 and 10` })
    .max(10, { error: `${name} must be between 1 and 10` });

const positive = (name: string) =>
  z
    .number()
    .positive({ error: `${name} must be > 0` })
    .optional();

/** Settings of a role's model, overriding the shared ones (issue #3's per-role settings). */
export const RoleModelSettings = z.strictObject({
  temperature: z.number().min(0).max(2).optional(),
  maxOutputTokens: z.number().int().positive().optional(),
  reasoningEffort: z.enum(['minimal', 'low', 'medium', 'high']).optional(),
});
export type RoleModelSettings = z.infer<typeof RoleModelSettings>;

/** The options schema. Defaults follow the reference where it has one. */
export const PgeOptionsSchema = z.strictObject({
  name: z.string().default('PlannerGeneratorEvaluator'),
  description: z
    .string()
    .default('Three-agent Planner-Generator-Evaluator harness with iterative feedback loop'),
  modelName: z
    .string({ error: 'model_name must be provided' })
    .trim()
    .min(1, { error: 'modelName must be provided' })
    .default('gpt-4.1'),
  plannerModelName: z.string().min(1).optional(),
  generatorModelName: z.string().min(1).optional(),
  evaluatorModelName: z.string().min(1).optional(),
  maxSteps: z
    .number()
    .int()
    .refine((n) => n >= 1, { error: (i) => `maxSteps must be >= 1, got ${String(i.input)}` })
    .default(10),
  maxRetriesPerStep: z
    .number()
    .int()
    .refine((n) => n >= 0, { error: (i) => `maxRetriesPerStep must be >= 0, got ${String(i.input)}` })
    .default(3),
  workingDirectory: z.string().min(1).optional(),
  sharedStatePath: z.string().min(1).optional(),
  defaultThresholds: z.record(z.string(), score('a default threshold')).default({}),
  outputType: z.enum(['dict', 'str', 'list', 'final', 'json', 'yaml']).default('dict'),
  verbose: z.boolean().default(false),
  plannerAgent: agent.optional(),
  generatorAgent: agent.optional(),
  evaluatorAgent: agent.optional(),
  maxContractRounds: z.number().int().min(1, { error: 'maxContractRounds must be >= 1' }).default(3),
  onStepExhausted: z.enum(['advance', 'abort', 'replan']).default('advance'),
  maxReplans: z.number().int().min(0, { error: 'maxReplans must be >= 0' }).default(1),
  fallbackThreshold: score('fallbackThreshold').default(6),
  maxCostUsd: positive('maxCostUsd'),
  maxTokens: z
    .number()
    .int({ error: 'maxTokens must be a whole number' })
    .positive({ error: 'maxTokens must be > 0' })
    .optional(),
  maxDurationMs: z
    .number()
    .int({ error: 'maxDurationMs must be a whole number of milliseconds' })
    .positive({ error: 'maxDurationMs must be > 0' })
    .optional(),
  /** Re-asks after an invalid model answer before failing closed. */
  maxRepairs: z.number().int().min(0).max(10).default(2),
  /** OpenAI-compatible endpoint and key; default `OPENAI_BASE_URL` / `OPENAI_API_KEY`. */
  baseURL: z.string().optional(),
  apiKey: z.string().optional(),
  structuredOutput: z.enum(['json_schema', 'json_object', 'prompt']).default('json_schema'),
  temperature: z.number().min(0).max(2).optional(),
  maxOutputTokens: z.number().int().positive().optional(),
  reasoningEffort: z.enum(['minimal', 'low', 'medium', 'high']).optional(),
  roleSettings: z
    .strictObject({
      planner: RoleModelSettings.optional(),
      generator: RoleModelSettings.optional(),
      evaluator: RoleModelSettings.optional(),
    })
    .default({}),
  maxRetries: z.number().int().min(0).max(10).default(4),
  timeoutMs: z.number().int().positive().default(120_000),
  prices: z
    .record(z.string(), z.strictObject({ inputPerMTok: z.number().min(0), outputPerMTok: z.number().min(0) }))
    .optional(),
  /** Called with every event of every run, in order (progress displays, integrations). */
  onEvent: z.custom<(event: RunEvent) => void>((v) => typeof v === 'function').optional(),
});

/** Options as a user writes them. */
export type PgeOptions = z.input<typeof PgeOptionsSchema>;
/** Options after defaults, with absolute paths. */
export type ResolvedOptions = z.output<typeof PgeOptionsSchema> & { workingDirectory: string };

/**
 * Validates options and prepares the working directory. Throws `ConfigurationError` naming every
 * problem; nothing is created unless all options are valid.
 */
export function resolveOptions(options: PgeOptions = {}): ResolvedOptions {
  const parsed = PgeOptionsSchema.safeParse(options);
  if (!parsed.success) {
    const problems = parsed.error.issues.map((issue) => {
      if (issue.code === 'unrecognized_keys')
        return `unknown option${issue.keys.length > 1 ? 's' : ''}: ${issue.keys.join(', ')}`;
      const path = issue.path.join('.');
      return issue.message.includes(path.split('.')[0] ?? '') ? issue.message : `${path}: ${issue.message}`;
    });
    throw new ConfigurationError(problems.join('; '));
  }
  const workingDirectory = resolve(parsed.data.workingDirectory ?? process.cwd());
  try {
    mkdirSync(workingDirectory, { recursive: true });
    accessSync(workingDirectory, constants.W_OK);
  } catch (cause) {
    throw new ConfigurationError(`workingDirectory ${workingDirectory} is not a writable directory`, {
      cause,
    });
  }
  return { ...parsed.data, workingDirectory };
}
