import { randomUUID } from 'node:crypto';
import { CallTimeoutError, errorFromInfo } from '../errors.js';
import { resolveCriteria } from '../machines/guards.js';
import { answerRequest } from '../roles/answer-request.js';
import type { Model } from '../roles/model.js';
import { newRunId } from '../runtime/run-id.js';
import { checkTask } from '../runtime/task.js';
import {
  documentOfPlan,
  PLAN_DOCUMENT_SCHEMA_REF,
  type Plan,
  type PlanDocument,
  type RoleRequest,
} from '../schemas/index.js';
import type { ResolvedOptions } from './options.js';

/**
 * Planning alone (`pge plan`, `PlannerGeneratorEvaluator.plan`): the planner is asked once, as a
 * run's planning asks it, and its plan becomes a plan document for a person to read, edit and run
 * (`pge run --plan`). No run is started, no log written, no other role asked.
 */

/**
 * Asks `planner` for a plan of `task` with the request a run's planning sends (`plan.requested`:
 * the task, `maxSteps`, the fixed rubric `criteria` if given) and the role worker's handling of it
 * (`answerRequest`: the role's system prompt, repairs up to `maxRepairs`, a plan of too many steps
 * re-asked once, then cut), within `callTimeoutMs`. Returns the plan as a document: the task, the
 * steps, and the rubric with the thresholds a run of these options would enforce (`defaultThresholds`,
 * else `fallbackThreshold`, for a criterion the plan leaves open), with the shipped schema as its
 * `$schema`. Throws the planner's error as a run would fail with it (`InvalidOutputError`,
 * `ModelTransportError`, `CallTimeoutError`, …); a task that is empty or too long is a
 * `ConfigurationError`, before any call.
 */
export async function planAlone(
  task: string,
  options: ResolvedOptions,
  planner: Model,
): Promise<PlanDocument> {
  checkTask(task, options.maxTaskBytes);
  const { criteria, maxSteps, callTimeoutMs } = options;
  const request: RoleRequest = {
    id: randomUUID(),
    // No run: the envelope wants an id, and this request is never sent or recorded.
    runId: newRunId(),
    seq: 1,
    ts: new Date().toISOString(),
    type: 'plan.requested',
    payload: {
      phase: 'plan',
      input: { task, maxSteps, replan: null, ...(criteria ? { rubric: criteria } : {}) },
    },
  };
  const deadline = AbortSignal.timeout(callTimeoutMs);
  let answer: Awaited<ReturnType<typeof answerRequest>>;
  try {
    answer = await answerRequest(request, planner, options.maxRepairs, deadline, {
      ...(options.plannerSystemPrompt === undefined ? {} : { systemPrompt: options.plannerSystemPrompt }),
    });
  } catch (error) {
    if (!deadline.aborted) throw error;
    throw new CallTimeoutError(`no answer to plan.requested within ${callTimeoutMs} ms`, { cause: error });
  }
  const { result } = answer;
  if (result.status === 'error') throw errorFromInfo(result.error);
  if (result.phase !== 'plan') throw new Error(`a plan request was answered with a ${result.phase}`);
  // A fixed rubric stands whatever the planner answered, as in a run (`takePlan`).
  const answered = result.output.plan;
  const plan: Plan = criteria ? { ...answered, criteria } : answered;
  const resolved = resolveCriteria(plan.criteria, options.defaultThresholds, options.fallbackThreshold);
  return { $schema: PLAN_DOCUMENT_SCHEMA_REF, ...documentOfPlan(plan, { task, criteria: resolved }) };
}
