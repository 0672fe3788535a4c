import type { Phase } from '../schemas/index.js';
import type { Model, ModelAnswer, ModelRequest } from './model.js';
import { inputOf } from './prompts.js';

/**
 * A test double of `Model`: answers come from a script, per phase, in order. Use it to drive the
 * harness without any model server. It records every request it received, so tests can assert on
 * exactly what a role was shown.
 */

/** One scripted answer: an object (sent as its JSON), raw text, an error to throw, or a function of the request. */
export type ScriptedAnswer =
  | { json: unknown }
  | { raw: string; finishReason?: string; refusal?: string | null }
  | { throws: Error }
  | ((request: ModelRequest, input: unknown) => ScriptedAnswer);

/** The script: answers per phase, consumed in order. */
export type Script = Partial<Record<Phase, ScriptedAnswer[]>>;

/** A scripted model (test double). Throws a clear error when a phase's answers run out. */
export class ScriptedModel implements Model {
  readonly name: string;
  /** Every request received, in order. */
  readonly requests: ModelRequest[] = [];
  private readonly script: Script;
  private readonly tokens: { prompt: number; completion: number; costUsd: number };

  constructor(
    script: Script,
    options: { name?: string; promptTokens?: number; completionTokens?: number; costUsd?: number } = {},
  ) {
    this.script = Object.fromEntries(Object.entries(script).map(([k, v]) => [k, [...(v ?? [])]]));
    this.name = options.name ?? 'scripted-test-double';
    this.tokens = {
      prompt: options.promptTokens ?? 100,
      completion: options.completionTokens ?? 50,
      costUsd: options.costUsd ?? 0,
    };
  }

  /** Requests of one phase. */
  requestsOf(phase: Phase): ModelRequest[] {
    return this.requests.filter((r) => r.phase === phase);
  }

  async complete(request: ModelRequest): Promise<ModelAnswer> {
    this.requests.push(request);
    const queue = this.script[request.phase];
    let answer = queue?.shift();
    if (answer === undefined)
      throw new Error(`ScriptedModel: no scripted answer left for phase "${request.phase}"`);
    while (typeof answer === 'function') answer = answer(request, inputOf(request.messages));
    if ('throws' in answer) throw answer.throws;
    const base = {
      model: this.name,
      promptTokens: this.tokens.prompt,
      completionTokens: this.tokens.completion,
      costUsd: this.tokens.costUsd,
    };
    if ('json' in answer)
      return { ...base, content: JSON.stringify(answer.json), refusal: null, finishReason: 'stop' };
    return {
      ...base,
      content: answer.raw,
      refusal: answer.refusal ?? null,
      finishReason: answer.finishReason ?? 'stop',
    };
  }
}
