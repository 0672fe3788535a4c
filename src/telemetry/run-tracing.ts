import { context, type Span, SpanKind, type Tracer, trace } from '@opentelemetry/api';
import type { RunEvent } from '../schemas/index.js';
import { isClosingEvent } from '../schemas/index.js';
import { type OpenSpans, type StartSpan, traceEvent } from './run-spans.js';
import { contextUnder, traceparentOf } from './trace-context.js';

/**
 * OpenTelemetry spans of runs, built from their events as the coordinator records them: a span per
 * run, per step (its child), per attempt (the step's child) and per model call (the attempt's, or
 * the step's or run's for calls outside an attempt), each timed by its events' own timestamps.
 * Model calls carry the GenAI semantic conventions (`gen_ai.*`: operation, provider, request and
 * response model, token usage); runs, steps and attempts carry pge's (`pge.*`: verdict, scores,
 * signal, status). The coordinator is the one writer of a run's events, so these are made where
 * it runs. Each request's work item carries the trace context of the span open when it was asked
 * (`traceparent`), under which the worker that takes it traces its handling (`traceWork`), in
 * whatever process. The run's span is opened as the run starts (`begin`), and its trace context
 * recorded in `run.started`; a process that resumes the run (a takeover, `pge resume`) opens its
 * span as a child of that one (`resume`), so a run stays one trace across the processes that ran it.
 */

/** What a coordinator tells the tracing of its runs (`CoordinatorOptions.tracing`). */
export interface RunTracing {
  /** Opens the span of a run that starts now; returns its trace context, which `run.started` records. */
  begin(runId: string): string;
  /**
   * Opens the span of a run this process resumes: a child of the span whose trace context its
   * `run.started` recorded, or a new trace when it recorded none.
   */
  resume(runId: string, traceparent: string | undefined): void;
  /** Takes every event the coordinator records. */
  observe(event: RunEvent): void;
  /**
   * The trace context a request of the run carries to its worker (the `traceparent` header of its
   * work item): its innermost open span's, the attempt's, the step's or the run's. Undefined for
   * a run this tracing has no span of.
   */
  traceparent(runId: string): string | undefined;
}

const at = (event: RunEvent): Date => new Date(event.ts);

/** The tracing of a coordinator's runs on `tracer` (`CoordinatorOptions.tracing`). */
export function traceRuns(tracer: Tracer): RunTracing {
  const runs = new Map<string, OpenSpans>();
  const start: StartSpan = (name, parent, when, attributes, kind = SpanKind.INTERNAL) =>
    tracer.startSpan(
      name,
      { startTime: when, attributes, kind },
      parent === null ? context.active() : trace.setSpan(context.active(), parent),
    );
  const openRun = (runId: string, span: Span): OpenSpans => {
    const open = { run: span, step: null, attempt: null };
    runs.set(runId, open);
    return open;
  };

  const begin = (runId: string): string => {
    const span = start('pge.run', null, new Date(), { 'pge.run.id': runId });
    openRun(runId, span);
    return traceparentOf(span);
  };

  const resume = (runId: string, traceparent: string | undefined): void => {
    const attributes = { 'pge.run.id': runId, 'pge.run.resumed': true };
    const span = tracer.startSpan(
      'pge.run',
      { startTime: new Date(), attributes },
      contextUnder(traceparent),
    );
    openRun(runId, span);
  };

  const observe = (event: RunEvent): void => {
    const open =
      runs.get(event.runId) ??
      // A run this tracing was not told of (its coordinator began or resumed it without it).
      openRun(event.runId, start('pge.run', null, at(event), { 'pge.run.id': event.runId }));
    traceEvent({ open, when: at(event), start }, event);
    if (isClosingEvent(event)) runs.delete(event.runId);
  };

  const traceparent = (runId: string): string | undefined => {
    const open = runs.get(runId);
    return open && traceparentOf(open.attempt ?? open.step ?? open.run);
  };

  return { begin, resume, observe, traceparent };
}
