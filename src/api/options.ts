import { randomUUID } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, rmdirSync, statSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import type { Tracer } from '@opentelemetry/api';
import { z } from 'zod';
import { ConfigurationError } from '../errors.js';
import type { Model } from '../roles/model.js';
import { DEFAULT_PRICES, priceOf } from '../roles/pricing.js';
import type { GivenPlan, Role, RunActing, RunEvent } from '../schemas/index.js';
import { RunSettingOptions } from '../schemas/run-settings.js';
import { OPTION_DEFAULTS, ROLES, WORKSPACES_DIR } from '../schemas/setting-values.js';
import {
  FollowSettings,
  ModelClientSettings,
  OutputType,
  RoleModelSettings,
  StreamLimits,
} from '../schemas/settings.js';
import { McpServers } from '../tools/mcp.js';
import { type Validator, type ValidatorFunction, validatorName } from '../tools/validators.js';
import { givenPlanOf } from './plan-file.js';

/** A new harness id (option `id`'s default): `planner-generator-evaluator-<32 hex digits>`. */
export function newHarnessId(): string {
  return `planner-generator-evaluator-${randomUUID().replaceAll('-', '')}`;
}

export type { RoleModelSettings } from '../schemas/settings.js';

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

const D = OPTION_DEFAULTS;
const run = RunSettingOptions.shape;
const stream = StreamLimits.shape;

/** The options schema. Defaults follow the reference where it has one. */
export const PgeOptionsSchema = z.strictObject({
  /**
   * The harness's id (the reference's `id`): reported with each result as `harnessId`. Default
   * `planner-generator-evaluator-<32 hex digits>`, new for each instance.
   */
  id: z.string().min(1).default(newHarnessId),
  name: z.string().default('PlannerGeneratorEvaluator'),
  description: z
    .string()
    .default('Three-agent Planner-Generator-Evaluator harness with iterative feedback loop'),
  modelName: z
    .string({ error: 'model_name must be provided' })
    .trim()
    .min(1, { error: 'modelName must be provided' })
    .default(D.modelName),
  plannerModelName: z.string().min(1).optional(),
  generatorModelName: z.string().min(1).optional(),
  evaluatorModelName: z.string().min(1).optional(),
  maxSteps: run.maxSteps.default(D.maxSteps),
  maxRetriesPerStep: run.maxRetriesPerStep.default(D.maxRetriesPerStep),
  workingDirectory: z.string().min(1).optional(),
  /**
   * Workspace tools (default on): each run has a workspace, `<workingDirectory>/workspaces/<runId>`;
   * the generator's model may list, read and write its files, the evaluator's list and read them.
   * `false`: no tools, the artifact is the answer alone.
   */
  tools: z.boolean().default(true),
  /**
   * Whether the evaluator is shown the images in the run's workspace (png, jpeg, webp; the 4
   * latest, up to 4 MiB each) as image parts of its request, with the workspace tools (default
   * true; `--no-images`).
   */
  images: z.boolean().default(true),
  /**
   * MCP servers whose tools the generator's and the evaluator's models may call, by name: a
   * `command` (with `args`, `env`) speaking MCP on stdio, or a streamable HTTP `url`; with
   * `roles` (default both) and an `allowTools` list (default all). See docs/agents.md.
   */
  mcpServers: McpServers.default({}),
  /**
   * Deterministic validators of the generator's work (`--validate`): shell commands, which pass
   * when they exit with 0, or functions (`ValidatorFunction`). They run in order in the run's
   * workspace after each attempt's work, with its output on stdin; when one fails the attempt fails
   * with its output as feedback and the evaluator is not asked. On NATS they are the generator
   * worker's. See docs/agents.md.
   */
  validators: z
    .array(
      z.union([
        z.string().trim().min(1, { error: 'a validator command must not be empty' }),
        z.custom<ValidatorFunction>((v) => typeof v === 'function', {
          error: 'a validator is a shell command or a function',
        }),
      ]),
    )
    .default([]),
  sharedStatePath: z.string().min(1).optional(),
  defaultThresholds: run.defaultThresholds.default({}),
  outputType: OutputType.default(D.outputType),
  verbose: z.boolean().default(false),
  /**
   * The roles' system prompts, replacing pge's own (the reference's `planner_system_prompt`, …);
   * the schema each answer must follow is still named after them. Like the model, a prompt is the
   * worker's: on NATS, give it to `pge worker` in its config file.
   */
  plannerSystemPrompt: z.string().min(1).optional(),
  generatorSystemPrompt: z.string().min(1).optional(),
  evaluatorSystemPrompt: z.string().min(1).optional(),
  plannerAgent: agent.optional(),
  generatorAgent: agent.optional(),
  evaluatorAgent: agent.optional(),
  maxContractRounds: run.maxContractRounds.default(D.maxContractRounds),
  onStepExhausted: run.onStepExhausted.default(D.onStepExhausted),
  maxReplans: run.maxReplans.default(D.maxReplans),
  maxParallelSteps: run.maxParallelSteps.default(D.maxParallelSteps),
  fallbackThreshold: run.fallbackThreshold.default(D.fallbackThreshold),
  maxCostUsd: run.maxCostUsd.optional(),
  maxTokens: run.maxTokens.optional(),
  maxDurationMs: run.maxDurationMs.optional(),
  callTimeoutMs: run.callTimeoutMs.default(D.callTimeoutMs),
  criteria: run.criteria.default(null),
  /**
   * The plan to run, instead of asking the planner (`--plan`): a plan document (`PlanDocument`,
   * `schemas/plan.schema.json`), the path of one, or of a pge log (its latest plan). It gets the
   * checks a planner's plan gets; its rubric stands unless `criteria` is given.
   */
  plan: z
    .union([z.string().min(1), z.looseObject({})])
    .nullable()
    .default(null)
    .transform((value, ctx): GivenPlan | null => {
      if (value === null) return null;
      try {
        return givenPlanOf(value);
      } catch (error) {
        ctx.addIssue({ code: 'custom', message: (error as Error).message });
        return z.NEVER;
      }
    }),
  /**
   * Gates where the run waits for a person (`--approve plan,contract,step`): on the terminal when
   * `pge run` has one, else through `approve(runId, gate, decision)`; on NATS, `pge approve`.
   */
  approve: run.approve.default([]),
  /** How long a gate waits (`--approval-timeout`); past it `onApprovalTimeout` applies. Default: as long as it takes. */
  approvalTimeoutMs: run.approvalTimeoutMs.optional(),
  onApprovalTimeout: run.onApprovalTimeout.default(D.onApprovalTimeout),
  /** The longest task accepted, in UTF-8 bytes; a longer one is refused before anything starts. */
  maxTaskBytes: z
    .number()
    .int({ error: 'maxTaskBytes must be a whole number of bytes' })
    .positive({ error: 'maxTaskBytes must be > 0' })
    .default(D.maxTaskBytes),
  /** Re-asks after an invalid model answer before failing closed. */
  maxRepairs: z.number().int().min(0).max(10).default(D.maxRepairs),
  /** OpenAI-compatible endpoint and key; default `OPENAI_BASE_URL` / `OPENAI_API_KEY`. */
  apiKey: z.string().optional(),
  ...ModelClientSettings.shape,
  ...RoleModelSettings.shape,
  streamMaxAgeMs: stream.streamMaxAgeMs.default(D.streamMaxAgeMs),
  streamMaxBytes: stream.streamMaxBytes.default(D.streamMaxBytes),
  /** Replicas of the streams and KV bucket of a NATS deployment (`pge worker --replicas`); see `StreamLimits`. */
  replicas: stream.replicas.optional(),
  roleSettings: z
    .strictObject({
      planner: RoleModelSettings.optional(),
      generator: RoleModelSettings.optional(),
      evaluator: RoleModelSettings.optional(),
    })
    .default({}),
  ...FollowSettings.shape,
  /**
   * An OpenTelemetry tracer for spans of every run, step, attempt and model call (GenAI semantic
   * conventions), and of the workers' handling of each request and each tool run. Without it, spans go out over OTLP when `OTEL_EXPORTER_OTLP_ENDPOINT` is set,
   * and nothing of OpenTelemetry is loaded when it is not.
   */
  tracer: z.custom<Tracer>((v) => typeof (v as Tracer | null)?.startSpan === 'function').optional(),
  /** Called with every event of every run, in order (progress displays, integrations). */
  onEvent: z.custom<(event: RunEvent) => void>((v) => typeof v === 'function').optional(),
});

/** Each role's system prompt, where the options replace pge's own. */
export function systemPromptsOf(options: ResolvedOptions): Partial<Record<Role, string>> {
  const prompts = {
    planner: options.plannerSystemPrompt,
    generator: options.generatorSystemPrompt,
    evaluator: options.evaluatorSystemPrompt,
  };
  return Object.fromEntries(Object.entries(prompts).filter(([, prompt]) => prompt !== undefined));
}

export { WORKSPACES_DIR } from '../schemas/setting-values.js';

/** Where the generator's validators run (each run's workspace) and which they are. */
export function validationOf(options: ResolvedOptions): { root: string; validators: readonly Validator[] } {
  return { root: join(options.workingDirectory, WORKSPACES_DIR), validators: options.validators };
}

/** What run `runId`'s acting roles have (`run.started`'s `acting`): the tools, the validators by name, the workspace. */
export function actingOf(options: ResolvedOptions, runId: string): RunActing {
  return {
    tools: options.tools,
    validators: options.validators.map(validatorName),
    workspace: join(options.workingDirectory, WORKSPACES_DIR, runId),
  };
}

/** The working directory a run's workspace (`actingOf`) lies in. */
export function workingDirectoryOf(acting: RunActing): string {
  return dirname(dirname(acting.workspace));
}

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
  checkCostCanBeKept(parsed.data);
  const workingDirectory = resolve(parsed.data.workingDirectory ?? process.cwd());
  makeWorkingDirectory(workingDirectory);
  return { ...parsed.data, workingDirectory };
}

/**
 * A cost budget is kept only if every call has a price: a model without one costs 0, so the
 * budget could never stop the run. Each role that calls an `OpenAIModel` must have a price in
 * `prices` or in the built-in table; a role with its own agent reports its own cost.
 */
function checkCostCanBeKept(o: z.output<typeof PgeOptionsSchema>): void {
  if (o.maxCostUsd === undefined) return;
  const agents = { planner: o.plannerAgent, generator: o.generatorAgent, evaluator: o.evaluatorAgent };
  const names = {
    planner: o.plannerModelName,
    generator: o.generatorModelName,
    evaluator: o.evaluatorModelName,
  };
  const table = { ...DEFAULT_PRICES, ...o.prices };
  const unpriced = [
    ...new Set(
      ROLES.filter((role) => !agents[role])
        .map((role) => names[role] ?? o.modelName)
        .filter((model) => priceOf(model, table) === undefined),
    ),
  ];
  if (unpriced.length === 0) return;
  const first = unpriced[0]!;
  throw new ConfigurationError(
    `maxCostUsd cannot be kept: no price is known for model${unpriced.length > 1 ? 's' : ''} ` +
      `${unpriced.join(', ')}, whose calls would count as free; give a price in prices ` +
      `(USD per million input and output tokens; ` +
      `on the command line: --price ${first}=<input>,<output>)`,
  );
}

/**
 * Creates the working directory one level at a time, and checks that an entry can be made in it.
 * `mkdirSync(…, { recursive: true })` never returns on a file system that refuses new directories
 * with ENOENT (procfs: `/proc/foo`), as Node retries the parent that it finds to exist; a plain
 * mkdir fails at once with the reason.
 */
function makeWorkingDirectory(dir: string): void {
  const missing: string[] = [];
  for (let at = dir; !existsSync(at) && dirname(at) !== at; at = dirname(at)) missing.unshift(at);
  const refuse = (why: string, cause?: unknown) =>
    new ConfigurationError(`workingDirectory ${dir} is not a writable directory: ${why}`, { cause });
  for (const level of missing) {
    try {
      mkdirSync(level);
    } catch (cause) {
      throw refuse(`it cannot be created (${(cause as Error).message})`, cause);
    }
  }
  if (!statSync(dir).isDirectory()) throw refuse('it is not a directory');
  // Tried, not asked: `access` says yes to root on any directory, /proc included, where the runs'
  // workspaces could then never be made.
  let probe: string;
  try {
    probe = mkdtempSync(join(dir, '.pge-write-check-'));
  } catch (cause) {
    throw refuse(`nothing can be created in it (${(cause as Error).message})`, cause);
  }
  rmdirSync(probe);
}
