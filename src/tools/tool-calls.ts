/**
 * The shapes of a tool call and of an image as they travel between a model and the tools: the
 * tools (`tools.ts`, MCP, images) define them, and the model clients (`src/roles`) carry them in
 * their messages, so that the tools depend on no model.
 */

/** An image in a message, as a data URL's parts. */
export interface ChatImage {
  /** `image/png`, `image/jpeg` or `image/webp`. */
  mediaType: string;
  base64: string;
}

/** A tool a model may call: a function with a JSON Schema for its arguments. */
export interface ToolDefinition {
  name: string;
  description: string;
  parameters: Record<string, unknown>;
}

/** A call of a tool, as the model asked for it: `arguments` is the model's JSON text, unchecked. */
export interface ToolCallRequest {
  id: string;
  name: string;
  arguments: string;
}
