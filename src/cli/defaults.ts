import type { ConfigKey } from './flag-table.js';

/**
 * What the CLI assumes when it is not told: kept apart from the modules that load the harness, so
 * that `--help`, `--version` and usage errors answer without loading the model client.
 */

/** The file read from the working directory when `--config` is not given. */
export const CONFIG_FILE_NAME = 'pge.config.json';

/** Environment variables and the options they set. */
export const ENV_VARS: readonly (readonly [string, ConfigKey])[] = [
  ['OPENAI_API_KEY', 'apiKey'],
  ['OPENAI_BASE_URL', 'baseURL'],
  ['PGE_MODEL', 'modelName'],
  ['PGE_REPLICAS', 'replicas'],
];

/**
 * Defaults of the CLI that differ from the library's. A terminal wants the artifact, not a
 * transcript; the library keeps the reference's `dict`, so that code ported from it gets what it
 * got. `pge config`, the help and the README say which default is whose.
 */
export const CLI_DEFAULTS: Partial<Record<ConfigKey, unknown>> = { outputType: 'final' };

/** The task of `pge demo` when none is given. */
export const DEMO_TASK = 'Write a short guide to intermittent fasting';
