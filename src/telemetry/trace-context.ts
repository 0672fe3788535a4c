import {
  type Context,
  context,
  isSpanContextValid,
  type Span,
  type SpanContext,
  trace,
} from '@opentelemetry/api';
import { TRACEPARENT_PATTERN } from '../schemas/index.js';

/**
 * W3C Trace Context (`traceparent`, version 00) as pge carries it: in `run.started`, so that a
 * process resuming a run stays in its trace, and in the `traceparent` header of each work item, so
 * that the worker that takes it (in any process, in any language) traces under the span that asked.
 */

/** The W3C `traceparent` of a span. */
export function traceparentOf(span: Span): string {
  const { traceId, spanId, traceFlags } = span.spanContext();
  return `00-${traceId}-${spanId}-${traceFlags.toString(16).padStart(2, '0')}`;
}

/**
 * The span context a W3C `traceparent` names, as a remote parent; undefined for anything else
 * (another version, upper case, an all-zero id): a header anyone could have set is never trusted
 * to be well formed.
 */
export function remoteParentOf(traceparent: string | undefined): SpanContext | undefined {
  if (traceparent === undefined || !TRACEPARENT_PATTERN.test(traceparent)) return undefined;
  const [, traceId = '', spanId = '', flags = '00'] = traceparent.split('-');
  const parent = { traceId, spanId, traceFlags: Number.parseInt(flags, 16), isRemote: true };
  return isSpanContextValid(parent) ? parent : undefined;
}

/** The context to start a span in under `traceparent`: its span as remote parent, else the active one. */
export function contextUnder(traceparent: string | undefined): Context {
  const parent = remoteParentOf(traceparent);
  return parent === undefined ? context.active() : trace.setSpanContext(context.active(), parent);
}
