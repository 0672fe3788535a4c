import type { Model } from '../roles/model.js';
import { OpenAIModel } from '../roles/openai-model.js';
import type { Role } from '../schemas/index.js';
import type { ResolvedOptions } from './options.js';

/**
 * The model of a role: its custom agent if one was given, else an `OpenAIModel` with the role's
 * model name and settings. Shared by the embedded API and the distributed role workers.
 */
export function buildRoleModel(o: ResolvedOptions, role: Role): Model {
  const agent = { planner: o.plannerAgent, generator: o.generatorAgent, evaluator: o.evaluatorAgent }[role];
  if (agent) return agent;
  const name = {
    planner: o.plannerModelName,
    generator: o.generatorModelName,
    evaluator: o.evaluatorModelName,
  }[role];
  return new OpenAIModel({
    model: name ?? o.modelName,
    ...(o.apiKey ? { apiKey: o.apiKey } : {}),
    ...(o.baseURL ? { baseURL: o.baseURL } : {}),
    structuredOutput: o.structuredOutput,
    ...pick({
      temperature: o.temperature,
      maxOutputTokens: o.maxOutputTokens,
      reasoningEffort: o.reasoningEffort,
    }),
    ...pick(o.roleSettings[role] ?? {}),
    maxRetries: o.maxRetries,
    timeoutMs: o.timeoutMs,
    ...(o.prices ? { prices: o.prices } : {}),
  });
}

/** The model of every role (see `buildRoleModel`). */
export function buildRoleModels(o: ResolvedOptions): Record<Role, Model> {
  return {
    planner: buildRoleModel(o, 'planner'),
    generator: buildRoleModel(o, 'generator'),
    evaluator: buildRoleModel(o, 'evaluator'),
  };
}

function pick<T extends Record<string, unknown>>(values: T): Partial<T> {
  return Object.fromEntries(Object.entries(values).filter(([, v]) => v !== undefined)) as Partial<T>;
}
