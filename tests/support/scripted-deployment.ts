import type { NatsRole } from '../../src/bus/permissions.js';
import type { FakeStep } from './fake-openai-server.js';
import { type PgeProcess, startWorkersAtOnce } from './processes.js';

/**
 * A distributed deployment for tests with real processes: `pge worker` processes of every role on
 * a nats-server, their models served by the scripted OpenAI-compatible server with `answerFor`.
 */

/** A plan of `steps` steps, each depending on the one before, and two criteria. */
export function planOf(steps: number) {
  return {
    scope: 'distributed test',
    steps: Array.from({ length: steps }, (_, i) => i + 1).map((n) => ({
      id: `s${n}`,
      title: `Step ${n}`,
      description: `do ${n}`,
      expectedOutput: `out ${n}`,
      dependsOn: n > 1 ? [`s${n - 1}`] : [],
    })),
    criteria: [
      { name: 'accuracy', weight: 'high', description: 'right', threshold: 7 },
      { name: 'clarity', weight: 'standard', description: 'clear', threshold: null },
    ],
  };
}

/**
 * Answers of a scripted model, by the name of the schema asked for: a plan of `steps` steps, and
 * `score` for every criterion of every evaluation.
 */
export function answers(score = 9, steps = 3): Record<string, object> {
  return {
    pge_plan: planOf(steps),
    pge_contract: { title: 'c', acceptanceCriteria: ['a'], expectedOutput: 'o', verificationMethod: 'v' },
    pge_contract_review: { status: 'approved', amendments: [], rationale: 'ok' },
    pge_work: { output: 'the work', notes: 'n', selfAssessment: [] },
    pge_evaluation: {
      scores: [
        { criterion: 'accuracy', score, evidence: 'e' },
        { criterion: 'clarity', score, evidence: 'e' },
      ],
      findings: [],
      actionableFeedback: [],
      summary: 's',
    },
  };
}

/** The schema a request asks the model for (`pge_plan`, `pge_work`, …). */
// biome-ignore lint/suspicious/noExplicitAny: the request body as the SDK sent it.
export const schemaOf = (body: any): string | undefined => body?.response_format?.json_schema?.name;

// biome-ignore lint/suspicious/noExplicitAny: request bodies as the SDK sent them.
type RequestBody = any;

/** The tool answers a request carries back to the model (`role: 'tool'` messages). */
export const toolAnswers = (body: RequestBody): RequestBody[] =>
  (body?.messages ?? []).filter((m: RequestBody) => m.role === 'tool');

/** The names of the tools a request offers, sorted. */
export const offeredTools = (body: RequestBody): string[] =>
  (body?.tools ?? []).map((t: RequestBody) => t.function.name).sort();

/**
 * A scripted answer that asks for tools rather than answering: each call's arguments as JSON, its
 * id `call_<n>` counted from `firstId`.
 */
export function asksForTools(calls: readonly { name: string; arguments: object }[], firstId = 0): FakeStep {
  return {
    content: null,
    toolCalls: calls.map((call, i) => ({
      id: `call_${firstId + i}`,
      name: call.name,
      arguments: JSON.stringify(call.arguments),
    })),
  };
}

/** True when the request is for a run whose task contains `text`. */
// biome-ignore lint/suspicious/noExplicitAny: the request body as the SDK sent it.
export const taskHas = (body: any, text: string): boolean => JSON.stringify(body?.messages).includes(text);

/** A scripted answer of `content` after `delayMs`, or a 400 for a schema it does not know. */
export function scriptedStep(content: object | undefined, delayMs: number): FakeStep {
  return content ? { content, delayMs } : { status: 400, error: { message: 'unexpected schema' } };
}

/**
 * Starts `pge worker` processes of every role, each with `env(role)` (its role's credential), and
 * waits until each is ready.
 */
export function startWorkers(
  env: (role: NatsRole) => Record<string, string>,
  logs: string,
): Promise<PgeProcess[]> {
  return startWorkersAtOnce(
    [
      ['coordinator', []],
      ['persistence', ['--working-dir', logs]],
      ['planner', ['--concurrency', '8']],
      ['evaluator', ['--concurrency', '8']],
      ['generator', ['--concurrency', '8']],
    ],
    env,
  );
}
