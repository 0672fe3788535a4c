import {
  type Attributes,
  context,
  type Span,
  SpanKind,
  SpanStatusCode,
  type Tracer,
  trace,
} from '@opentelemetry/api';
import type { RunEvent, RunEventOf } from '../schemas/index.js';
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

/** The spans open for one run. */
interface OpenSpans {
  run: Span;
  step: Span | null;
  attempt: Span | null;
}

const at = (event: RunEvent): Date => new Date(event.ts);
const cut = (text: string, chars = 500): string => (text.length <= chars ? text : `${text.slice(0, chars)}…`);

/** The tracing of a coordinator's runs on `tracer` (`CoordinatorOptions.tracing`). */
export function traceRuns(tracer: Tracer): RunTracing {
  const runs = new Map<string, OpenSpans>();
  const start = (
    name: string,
    parent: Span | null,
    when: Date,
    attributes: Attributes,
    kind = SpanKind.INTERNAL,
  ) =>
    tracer.startSpan(
      name,
      { startTime: when, attributes, kind },
      parent === null ? context.active() : trace.setSpan(context.active(), parent),
    );
  const openRun = (runId: string, span: Span): void => {
    runs.set(runId, { run: span, step: null, attempt: null });
  };

  const endAttempt = (open: OpenSpans, when: Date, attributes: Attributes = {}) => {
    open.attempt?.setAttributes(attributes);
    open.attempt?.end(when);
    open.attempt = null;
  };
  const endStep = (open: OpenSpans, when: Date, status: string) => {
    endAttempt(open, when);
    open.step?.setAttribute('pge.step.status', status);
    open.step?.end(when);
    open.step = null;
  };

  const modelCall = (open: OpenSpans, event: RunEventOf<'model.call.completed'>) => {
    const c = event.payload;
    const end = at(event);
    const parent =
      (c.phase === 'work' || c.phase === 'evaluation' ? open.attempt : null) ?? open.step ?? open.run;
    const span = start(
      `chat ${c.model}`,
      parent,
      new Date(end.getTime() - c.latencyMs),
      {
        'gen_ai.operation.name': 'chat',
        'gen_ai.provider.name': 'openai',
        'gen_ai.system': 'openai',
        'gen_ai.request.model': c.model,
        'gen_ai.response.model': c.model,
        'gen_ai.usage.input_tokens': c.promptTokens,
        'gen_ai.usage.output_tokens': c.completionTokens,
        'pge.role': c.role,
        'pge.phase': c.phase,
        'pge.request.id': c.requestId,
        'pge.worker': c.worker,
        'pge.cost_usd': c.costUsd,
        'pge.outcome': c.outcome,
        'pge.repair': c.repair,
        'pge.tool_calls': c.toolCalls?.length ?? 0,
      },
      SpanKind.CLIENT,
    );
    if (c.outcome === 'invalid')
      span.setStatus({ code: SpanStatusCode.ERROR, message: c.problem ?? 'invalid answer' });
    span.end(end);
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
    let open = runs.get(event.runId);
    if (open === undefined) {
      // A run this tracing was not told of (its coordinator began or resumed it without it).
      open = {
        run: start('pge.run', null, at(event), { 'pge.run.id': event.runId }),
        step: null,
        attempt: null,
      };
      runs.set(event.runId, open);
    }
    const when = at(event);
    switch (event.type) {
      case 'run.started':
        open.run.setAttribute('pge.task', cut(event.payload.task));
        return;
      case 'run.resumed':
        open.run.setAttribute('pge.run.resumed_by', event.payload.owner);
        return;
      case 'step.started':
        endStep(open, when, 'left');
        open.step = start(`pge.step ${event.payload.stepNumber}`, open.run, when, {
          'pge.step.id': event.payload.stepId,
          'pge.step.number': event.payload.stepNumber,
          'pge.step.title': cut(event.payload.title),
        });
        return;
      case 'step.work.requested': {
        const { attempt, retry } = event.payload.input;
        endAttempt(open, when);
        open.attempt = start(`pge.attempt ${attempt}`, open.step ?? open.run, when, {
          'pge.attempt.number': attempt,
          'pge.attempt.signal': retry?.signal ?? 'initial',
        });
        return;
      }
      case 'step.attempt.judged': {
        const p = event.payload;
        const scores: Attributes = {};
        for (const s of p.scores) if (s.score !== null) scores[`pge.score.${s.criterion}`] = s.score;
        endAttempt(open, when, {
          'pge.attempt.verdict': p.verdict,
          'pge.attempt.reason': p.reason,
          ...(p.weightedMean === null ? {} : { 'pge.attempt.weighted_mean': p.weightedMean }),
          ...scores,
        });
        return;
      }
      case 'step.retry.scheduled':
        open.step?.addEvent(
          'pge.retry',
          { 'pge.retry.signal': event.payload.signal, 'pge.retry.next_attempt': event.payload.nextAttempt },
          when,
        );
        return;
      case 'step.passed':
        endStep(open, when, 'passed');
        return;
      case 'step.failed':
        endStep(open, when, 'exhausted');
        return;
      case 'step.plan.rejected':
        endStep(open, when, 'plan_rejected');
        return;
      case 'model.call.completed':
        modelCall(open, event);
        return;
      case 'role.failed':
        (open.attempt ?? open.step ?? open.run).addEvent(
          'pge.role.failed',
          {
            'pge.role': event.payload.role,
            'pge.phase': event.payload.phase,
            'error.type': event.payload.error.name,
          },
          when,
        );
        return;
      case 'approval.requested':
      case 'approval.decided':
        open.run.addEvent(`pge.${event.type}`, { 'pge.approval.gate': event.payload.gate }, when);
        return;
      case 'run.completed':
      case 'run.failed': {
        const p = event.payload;
        endStep(open, when, 'left');
        open.run.setAttributes({
          'pge.run.passed': p.passed,
          'pge.run.steps_passed': p.stepsPassed,
          'pge.run.steps_total': p.stepsTotal,
          'pge.run.retries': p.totalRetries,
          'pge.run.cost_usd': p.usage.costUsd,
          'gen_ai.usage.input_tokens': p.usage.promptTokens,
          'gen_ai.usage.output_tokens': p.usage.completionTokens,
        });
        if (event.type === 'run.failed') {
          open.run.setAttribute('pge.run.stop_reason', event.payload.reason);
          open.run.setStatus({ code: SpanStatusCode.ERROR, message: event.payload.message });
        }
        open.run.end(when);
        runs.delete(event.runId);
        return;
      }
      default:
        return;
    }
  };

  const traceparent = (runId: string): string | undefined => {
    const open = runs.get(runId);
    return open && traceparentOf(open.attempt ?? open.step ?? open.run);
  };

  return { begin, resume, observe, traceparent };
}
