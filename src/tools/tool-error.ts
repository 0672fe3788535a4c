/** A refusal or failure the model is told of, as the tool's answer (`runToolCall`). */
export class ToolError extends Error {
  override readonly name = 'ToolError';
}
