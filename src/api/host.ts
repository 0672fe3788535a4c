import { join } from 'node:path';
import type { Model } from '../roles/model.js';
import type { EmbeddedWorkersOptions } from '../runtime/embedded.js';
import { type EmbeddedHost, startEmbeddedHost } from '../runtime/embedded-host.js';
import type { Role } from '../schemas/index.js';
import {
  actingOf,
  type PgeOptions,
  type ResolvedOptions,
  resolveOptions,
  systemPromptsOf,
  validationOf,
  WORKSPACES_DIR,
} from './options.js';
import { buildRoleModels } from './role-models.js';

/**
 * The embedded host from the API's options (`pge dashboard --control` without NATS): the options
 * are checked as `new PlannerGeneratorEvaluator(options)` checks them, and its workers are built
 * as the harness builds its own.
 */

/** The workers' options of an embedded composition, from resolved options and the roles' models. */
export function embeddedWorkersOf(
  o: ResolvedOptions,
  models: Record<Role, Model>,
): Omit<EmbeddedWorkersOptions, 'onLogError'> {
  return {
    models,
    maxRepairs: o.maxRepairs,
    ...(o.tools ? { workspaces: { root: join(o.workingDirectory, WORKSPACES_DIR), images: o.images } } : {}),
    mcpServers: o.mcpServers,
    systemPrompts: systemPromptsOf(o),
    validation: validationOf(o),
  };
}

/**
 * Starts an embedded host whose runs use `options` (their models, working directory and run
 * settings; a submission may override the run settings). Throws `ConfigurationError` for a bad
 * option, before anything starts.
 */
export function startHost(options: PgeOptions, onProblem?: (problem: string) => void): EmbeddedHost {
  const resolved = resolveOptions(options);
  return startEmbeddedHost({
    ...embeddedWorkersOf(resolved, buildRoleModels(resolved)),
    settings: resolved,
    acting: (runId) => actingOf(resolved, runId),
    ...(onProblem === undefined ? {} : { onProblem }),
  });
}
