import { existsSync, readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import type { z } from 'zod';
import { type PgeOptions, PgeOptionsSchema } from '../api/options.js';
import { readPlanFile } from '../api/plan-file.js';
import { ConfigurationError } from '../errors.js';
import { describeEndpoint } from '../roles/openai-model.js';
import type { ParsedFlags } from './command-line.js';
import { CLI_DEFAULTS, CONFIG_FILE_NAME, ENV_VARS } from './defaults.js';
import { type ConfigKey, OPTION_FLAGS } from './flag-table.js';

/**
 * Where the CLI's options come from, highest precedence first: flags, the environment, a config
 * file, defaults. Every value is validated against its `PgeOptionsSchema` entry as it is read, so an
 * error names the flag, variable or file that holds the bad value rather than only the option.
 */

/** Where a value came from. */
export type Source = 'flag' | 'env' | 'config file' | 'flag + config file' | 'CLI default' | 'default';

// Options that hold JavaScript objects (models, callbacks): only the API can set them.
const API_ONLY = new Set(['plannerAgent', 'generatorAgent', 'evaluatorAgent', 'onEvent']);

/** Every option a flag, the environment or a config file may set, in the schema's order. */
export const CONFIG_KEYS: readonly ConfigKey[] = Object.keys(PgeOptionsSchema.shape).filter(
  (key) => !API_ONLY.has(key),
) as ConfigKey[];

const PATH_KEYS = new Set<ConfigKey>(['workingDirectory', 'sharedStatePath', 'plan']);

/** What to read besides the flags. */
export interface ConfigInput {
  /** The options the flags set, and the config file `--config` names. */
  flags: Pick<ParsedFlags, 'options' | 'configPath'>;
  env: Readonly<Record<string, string | undefined>>;
  cwd: string;
  /** `pge demo`: flags and defaults only, so that it behaves the same in any directory and shell. */
  flagsOnly?: boolean;
}

/** The options to run with and the source of each. */
export interface ResolvedConfig {
  /** Only what was set, plus the CLI's own defaults; the library fills in the rest. */
  options: PgeOptions;
  sources: Record<ConfigKey, Source>;
  /** The config file read, or null. */
  configFile: string | null;
}

function schemaOf(key: ConfigKey): z.ZodType {
  return (PgeOptionsSchema.shape as Record<string, z.ZodType>)[key]!;
}

/** Validates one value; throws `ConfigurationError` prefixed with where the value came from. */
function checked(key: ConfigKey, value: unknown, where: string): unknown {
  const parsed = schemaOf(key).safeParse(value);
  if (parsed.success) return value;
  const problems = parsed.error.issues.map((issue) => {
    const at = issue.path.length > 0 ? `${key}.${issue.path.join('.')}` : key;
    return issue.message.includes(key) ? issue.message : `${at}: ${issue.message}`;
  });
  throw new ConfigurationError(`${where}: ${problems.join('; ')}`);
}

/** Reads a config file: a JSON object whose keys are option names. Returns null when there is none. */
export function readConfigFile(
  cwd: string,
  explicit: string | null,
): { path: string; values: Partial<Record<ConfigKey, unknown>> } | null {
  const path = resolve(cwd, explicit ?? CONFIG_FILE_NAME);
  if (!existsSync(path)) {
    if (explicit === null) return null;
    throw new ConfigurationError(`config file ${path} does not exist`);
  }
  let data: unknown;
  try {
    data = JSON.parse(readFileSync(path, 'utf8'));
  } catch (cause) {
    throw new ConfigurationError(`config file ${path} is not valid JSON: ${(cause as Error).message}`, {
      cause,
    });
  }
  if (typeof data !== 'object' || data === null || Array.isArray(data))
    throw new ConfigurationError(`config file ${path} must hold a JSON object of options`);
  const entries = Object.entries(data);
  const apiOnly = entries.filter(([key]) => API_ONLY.has(key)).map(([key]) => key);
  if (apiOnly.length > 0)
    throw new ConfigurationError(
      `${path}: ${apiOnly.join(', ')} can be set only through the API, not in a file`,
    );
  const unknown = entries.filter(([key]) => !CONFIG_KEYS.includes(key as ConfigKey)).map(([key]) => key);
  if (unknown.length > 0) {
    throw new ConfigurationError(
      `${path}: unknown option${unknown.length > 1 ? 's' : ''} ${unknown.join(', ')} (options are camelCase names such as maxSteps, defaultThresholds, modelName)`,
    );
  }
  const values: Partial<Record<ConfigKey, unknown>> = {};
  for (const [name, raw] of entries) {
    const key = name as ConfigKey;
    // A path in a config file means the same wherever pge is started from: relative to the file.
    const value = PATH_KEYS.has(key) && typeof raw === 'string' ? resolve(dirname(path), raw) : raw;
    // A plan file is read here, so that a fault in it is named by its own file and field.
    values[key] = key === 'plan' && typeof value === 'string' ? readPlanFile(value) : value;
    checked(key, values[key], path);
  }
  return { path, values };
}

/** A variable's text as its option's value: a number for an option its flag takes as an integer. */
function fromEnv(key: ConfigKey, text: string): unknown {
  const integer = OPTION_FLAGS.some((flag) => flag.option === key && flag.kind === 'integer');
  return integer && /^\s*-?\d+\s*$/.test(text) ? Number(text) : text;
}

/** Merges flags, environment, config file and defaults; throws `ConfigurationError` on a bad value. */
export function resolveConfig(input: ConfigInput): ResolvedConfig {
  const { flags, env, cwd } = input;
  const file = input.flagsOnly ? null : readConfigFile(cwd, flags.configPath);
  const options: Partial<Record<ConfigKey, unknown>> = { ...CLI_DEFAULTS };
  const sources = Object.fromEntries(
    CONFIG_KEYS.map((key) => [key, Object.hasOwn(CLI_DEFAULTS, key) ? 'CLI default' : 'default']),
  ) as Record<ConfigKey, Source>;
  const set = (key: ConfigKey, value: unknown, source: Source) => {
    options[key] = value;
    sources[key] = source;
  };
  for (const [key, value] of Object.entries(file?.values ?? {})) set(key as ConfigKey, value, 'config file');
  if (!input.flagsOnly) {
    // Not commander's `Option.env`: it reads `process.env`, where this reads the environment it is
    // handed (a test's, or none for `pge demo`), and it has no config-file layer under the variables.
    for (const [name, key] of ENV_VARS) {
      const value = env[name];
      // An empty variable is unset, as the OpenAI SDK reads it.
      if (value !== undefined && value !== '') set(key, checked(key, fromEnv(key, value), name), 'env');
    }
  }
  for (const [name, given] of Object.entries(flags.options)) {
    const key = name as ConfigKey;
    // The rubric and plan flags name a file; the option is what it holds.
    const value =
      key === 'criteria'
        ? readRubric(resolve(cwd, given as string))
        : key === 'plan'
          ? readPlanFile(resolve(cwd, given as string))
          : given;
    const flag = OPTION_FLAGS.find((f) => f.option === key)!;
    checked(key, value, `--${flag.name}`);
    if (
      (flag.kind === 'threshold' || flag.kind === 'price' || flag.kind === 'mcp') &&
      sources[key] === 'config file'
    ) {
      // Thresholds, prices and MCP servers merge by key: a flag overrides the file's value for its key only.
      set(key, { ...(options[key] as object), ...(value as object) }, 'flag + config file');
    } else {
      set(key, PATH_KEYS.has(key) && typeof value === 'string' ? resolve(cwd, value) : value, 'flag');
    }
  }
  return { options: options as PgeOptions, sources, configFile: file?.path ?? null };
}

/** One option in `pge config`: its value, with secrets masked, and its source. */
export interface ConfigLine {
  key: ConfigKey;
  /** `undefined` when unset and without a default. */
  value: unknown;
  source: Source;
  /** With a `CLI default`: the library's default, which the CLI overrides. */
  libraryDefault?: unknown;
}

function masked(key: ConfigKey, value: unknown): unknown {
  if (key === 'apiKey') return value ? '(set)' : '(not set)';
  // A base URL may carry credentials (user:password@host, ?api-key=…): show only where it points.
  if (key === 'baseURL' && typeof value === 'string') return describeEndpoint(value);
  return value;
}

const libraryDefault = (key: ConfigKey): unknown =>
  (schemaOf(key).safeParse(undefined) as { data?: unknown }).data;

/** The resolved value of every option, defaults included, for `pge config`. */
export function describeConfig(config: ResolvedConfig, cwd: string): ConfigLine[] {
  return CONFIG_KEYS.map((key) => {
    const given = (config.options as Record<string, unknown>)[key];
    const value = given !== undefined ? given : key === 'workingDirectory' ? cwd : libraryDefault(key);
    const source = config.sources[key];
    return {
      key,
      value: masked(key, value),
      source,
      ...(source === 'CLI default' ? { libraryDefault: libraryDefault(key) } : {}),
    };
  });
}

/** A value as `pge config` prints it. */
export function showValue(value: unknown): string {
  if (value === undefined) return '(not set)';
  return typeof value === 'string' ? value : JSON.stringify(value);
}

/** A line of `pge config`: the value and its source, and where the CLI departs from the library. */
export function showLine(line: ConfigLine): string {
  const library =
    line.source === 'CLI default' ? `; the library's default is ${showValue(line.libraryDefault)}` : '';
  return `${line.key}: ${showValue(line.value)} (${line.source}${library})`;
}

/** `--rubric <file>`: a JSON array of criteria, or an object whose `criteria` is one. */
function readRubric(path: string): unknown {
  let json: unknown;
  try {
    json = JSON.parse(readFileSync(path, 'utf8'));
  } catch (cause) {
    const reason =
      cause instanceof SyntaxError ? cause.message : ((cause as NodeJS.ErrnoException).code ?? String(cause));
    throw new ConfigurationError(`--rubric: cannot read ${path}: ${reason}`, { cause });
  }
  if (Array.isArray(json)) return json;
  const criteria = (json as { criteria?: unknown } | null)?.criteria;
  if (Array.isArray(criteria)) return criteria;
  throw new ConfigurationError(
    `--rubric: ${path} holds no criteria: give a JSON array of criteria, or an object whose "criteria" is one`,
  );
}
