import type { Phase, Role } from '../schemas/index.js';
import type { ChatImage, ToolCallRequest, ToolDefinition } from '../tools/tool-calls.js';

export type { ChatImage, ToolCallRequest, ToolDefinition } from '../tools/tool-calls.js';

/** One message of a chat conversation, as OpenAI-compatible servers take it. */
export interface ChatMessage {
  role: 'system' | 'user' | 'assistant' | 'tool';
  content: string;
  /** An assistant's message that asked for tools: the calls it made (OpenAI function calling). */
  toolCalls?: readonly ToolCallRequest[];
  /** A tool's message: the call it answers. */
  toolCallId?: string;
  /** A user's message: images that go with its text (the evaluator's view of rendered work). */
  images?: readonly ChatImage[];
}

/**
 * One call to a model: a fresh conversation and the JSON Schema its answer must follow. The
 * schema is named by phase (`pge_plan`, `pge_contract`, `pge_contract_review`, `pge_work`,
 * `pge_evaluation`) so that a proxy, a log or a test server can tell the calls apart.
 */
export interface ModelRequest {
  role: Role;
  phase: Phase;
  schemaName: `pge_${Phase}`;
  jsonSchema: Record<string, unknown>;
  messages: ChatMessage[];
  /** Tools the model may call instead of answering; none when absent or empty. */
  tools?: readonly ToolDefinition[];
  signal?: AbortSignal;
}

/** A model's answer. `content` is the raw text the role validates; nothing is trusted before that. */
export interface ModelAnswer {
  content: string | null;
  /** The model's refusal message, when it declined to answer. */
  refusal: string | null;
  /** `stop`, `length` (cut off by the token limit), `content_filter`, … as the server reports it. */
  finishReason: string;
  /** The tools the model asked to call rather than answer (`finishReason` `tool_calls`). */
  toolCalls?: readonly ToolCallRequest[];
  /** The model that answered, as the server names it. */
  model: string;
  promptTokens: number;
  completionTokens: number;
  /** Cost of the call in USD, when the model client knows its price; otherwise 0. */
  costUsd: number;
  /**
   * `false` when the client knows no price for the model, so that `costUsd` is unknown rather than
   * 0; a model that leaves it out reports its own cost.
   */
  priced?: boolean;
}

/**
 * Anything that answers role prompts: the OpenAI SDK client, the demo model, a test double. Throws
 * `ModelTransportError` or `ModelRequestError` when no answer could be had.
 */
export interface Model {
  /** The model name reported in events and results. */
  readonly name: string;
  /**
   * `false` when this client knows no price for its model, so that its calls would count as free
   * and a cost budget could not be kept; absent when the model reports its own cost.
   */
  readonly priced?: boolean;
  complete(request: ModelRequest): Promise<ModelAnswer>;
}
