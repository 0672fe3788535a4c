import { type Attributes, type Span, SpanKind, SpanStatusCode } from '@opentelemetry/api';
import type { RunEvent, RunEventOf, RunEventType } from '../schemas/index.js';

/**
 * What each kind of a run's events does to its spans (`traceRuns`): one small function per event
 * type, opening or closing the span of a step, an attempt or a model call, or setting attributes
 * and span events. An event type without one leaves the spans as they are.
 */

/** The spans open for one run. */
export interface OpenSpans {
  run: Span;
  step: Span | null;
  attempt: Span | null;
}

/** Starts a span under `parent` (or the active context when null) at `when`. */
export type StartSpan = (
  name: string,
  parent: Span | null,
  when: Date,
  attributes: Attributes,
  kind?: SpanKind,
) => Span;

/** An event's run as its tracing holds it: the spans open, the event's time, and how to start one. */
export interface TracedEvent {
  open: OpenSpans;
  when: Date;
  start: StartSpan;
}

/** An attribute's text, cut to a length a tracing backend keeps. */
const cut = (text: string, chars = 500): string => (text.length <= chars ? text : `${text.slice(0, chars)}…`);

function endAttempt(open: OpenSpans, when: Date, attributes: Attributes = {}): void {
  open.attempt?.setAttributes(attributes);
  open.attempt?.end(when);
  open.attempt = null;
}

function endStep(open: OpenSpans, when: Date, status: string): void {
  endAttempt(open, when);
  open.step?.setAttribute('pge.step.status', status);
  open.step?.end(when);
  open.step = null;
}

/** The step's span ends with `status` (`pge.step.status`), and the attempt open in it. */
const stepEndsAs =
  (status: string) =>
  ({ open, when }: TracedEvent): void =>
    endStep(open, when, status);

function stepStarted({ open, when, start }: TracedEvent, event: RunEventOf<'step.started'>): void {
  endStep(open, when, 'left');
  open.step = start(`pge.step ${event.payload.stepNumber}`, open.run, when, {
    'pge.step.id': event.payload.stepId,
    'pge.step.number': event.payload.stepNumber,
    'pge.step.title': cut(event.payload.title),
  });
}

function workRequested({ open, when, start }: TracedEvent, event: RunEventOf<'step.work.requested'>): void {
  const { attempt, retry } = event.payload.input;
  endAttempt(open, when);
  open.attempt = start(`pge.attempt ${attempt}`, open.step ?? open.run, when, {
    'pge.attempt.number': attempt,
    'pge.attempt.signal': retry?.signal ?? 'initial',
  });
}

function attemptJudged({ open, when }: TracedEvent, event: RunEventOf<'step.attempt.judged'>): void {
  const p = event.payload;
  const scores: Attributes = {};
  for (const s of p.scores) if (s.score !== null) scores[`pge.score.${s.criterion}`] = s.score;
  endAttempt(open, when, {
    'pge.attempt.verdict': p.verdict,
    'pge.attempt.reason': p.reason,
    ...(p.weightedMean === null ? {} : { 'pge.attempt.weighted_mean': p.weightedMean }),
    ...scores,
  });
}

/**
 * A model call's span, under the attempt for the work and its evaluation, else the step or run,
 * timed back from the event by the call's latency.
 */
function modelCall({ open, when, start }: TracedEvent, event: RunEventOf<'model.call.completed'>): void {
  const c = event.payload;
  const parent =
    (c.phase === 'work' || c.phase === 'evaluation' ? open.attempt : null) ?? open.step ?? open.run;
  const span = start(
    `chat ${c.model}`,
    parent,
    new Date(when.getTime() - c.latencyMs),
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
  span.end(when);
}

function roleFailed({ open, when }: TracedEvent, event: RunEventOf<'role.failed'>): void {
  (open.attempt ?? open.step ?? open.run).addEvent(
    'pge.role.failed',
    {
      'pge.role': event.payload.role,
      'pge.phase': event.payload.phase,
      'error.type': event.payload.error.name,
    },
    when,
  );
}

function approval(
  { open, when }: TracedEvent,
  event: RunEventOf<'approval.requested' | 'approval.decided'>,
): void {
  open.run.addEvent(`pge.${event.type}`, { 'pge.approval.gate': event.payload.gate }, when);
}

/** The run's span ends, with its totals, and the step and attempt it stopped in. */
function runClosed({ open, when }: TracedEvent, event: RunEventOf<'run.completed' | 'run.failed'>): void {
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
}

/** What each event type does to the spans; one missing does nothing. */
const SPANS: { [T in RunEventType]?: (traced: TracedEvent, event: RunEventOf<T>) => void } = {
  'run.started': ({ open }, event) => open.run.setAttribute('pge.task', cut(event.payload.task)),
  'run.resumed': ({ open }, event) => open.run.setAttribute('pge.run.resumed_by', event.payload.owner),
  'step.started': stepStarted,
  'step.work.requested': workRequested,
  'step.attempt.judged': attemptJudged,
  'step.retry.scheduled': ({ open, when }, { payload }) =>
    open.step?.addEvent(
      'pge.retry',
      { 'pge.retry.signal': payload.signal, 'pge.retry.next_attempt': payload.nextAttempt },
      when,
    ),
  'step.passed': stepEndsAs('passed'),
  'step.failed': stepEndsAs('exhausted'),
  'step.plan.rejected': stepEndsAs('plan_rejected'),
  'model.call.completed': modelCall,
  'role.failed': roleFailed,
  'approval.requested': approval,
  'approval.decided': approval,
  'run.completed': runClosed,
  'run.failed': runClosed,
};

/** Traces one event of a run into its open spans. */
export function traceEvent(traced: TracedEvent, event: RunEvent): void {
  // The table is keyed by type, so the handler found is the one for this event's type.
  (SPANS[event.type] as ((traced: TracedEvent, event: RunEvent) => void) | undefined)?.(traced, event);
}
