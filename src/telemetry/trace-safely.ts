/**
 * Tracing never changes what it traces: a tracer that throws (the library's `tracer` option is
 * anyone's) is reported, and the run or request goes on unrecorded there. No OpenTelemetry module
 * is loaded here: the coordinator and the role workers call it whether or not they trace.
 */

/** `call()`, or undefined when it throws (reported as failing to trace `what`). */
export function traceSafely<T>(what: string, call: () => T): T | undefined {
  try {
    return call();
  } catch (error) {
    console.error(`pge: cannot trace ${what}:`, error);
    return undefined;
  }
}
