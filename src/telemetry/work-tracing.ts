import {
  type Context,
  context,
  type Span,
  SpanKind,
  SpanStatusCode,
  type Tracer,
  trace,
} from '@opentelemetry/api';
import { type MessageHeaders, TRACEPARENT_HEADER } from '../bus/bus.js';
import { subjects } from '../bus/subjects.js';
import { ROLE_OF_REQUEST, type RoleRequest, type RoleResult, type ValidatorRun } from '../schemas/index.js';
import { contextUnder } from './trace-context.js';

/**
 * OpenTelemetry spans of a role worker: one per request it takes from its queue (a consumer
 * span, `process pge.work.<role>`, with the messaging semantic conventions), under the span whose
 * trace context the work item carries (`traceparent`, set by the run's coordinator: the attempt's,
 * the step's or the run's), so that a run is one trace whichever process served its calls; and one
 * per tool the model had run (`execute_tool <name>`, GenAI semantic conventions) under it. The
 * model calls themselves are spans of the coordinator's (`traceRuns`), made from the calls the
 * result reports; the worker runs them with its request's span active, so that an instrumented
 * HTTP client in its process nests its spans there (where the process has a context manager, as
 * the Node SDK registers; `pge worker`'s own OTLP setup has none, and no such client).
 */

/** A tool as the worker runs it (`actors/tools.ts`'s `Tool`, whatever its definition holds besides its name). */
export interface RunnableTool<D extends { readonly name: string }> {
  readonly definition: D;
  run(args: Record<string, unknown>, signal: AbortSignal): Promise<string>;
}

/** What a role worker tells the tracing of the requests it serves (`RoleWorkerOptions.tracing`). */
export interface WorkTracing {
  /** Opens the span of a request the worker `worker` took, under the trace context of `headers`. */
  begin(request: RoleRequest, headers: MessageHeaders, worker: string): TracedWork;
}

/** The span of one request, open while the worker handles it. */
export interface TracedWork {
  /** Runs `work` with the request's span as the active span. */
  within<T>(work: () => Promise<T>): Promise<T>;
  /**
   * Runs the generator's validators (`run`) in a `pge.validate` span under the request's, with an
   * event per validator run (name, outcome, exit code, duration).
   */
  validate(run: () => Promise<ValidatorRun[]>): Promise<ValidatorRun[]>;
  /** `tool`, each run of which is an `execute_tool` span under the request's. */
  tool<D extends { readonly name: string }>(tool: RunnableTool<D>): RunnableTool<D>;
  /** Ends the span with the result the worker published, or with the error it published none for. */
  end(outcome: { result: RoleResult['result'] } | { error: unknown }): void;
}

/** The tracing of a role worker's requests on `tracer` (`RoleWorkerOptions.tracing`). */
export function traceWork(tracer: Tracer): WorkTracing {
  return {
    begin(request, headers, worker) {
      const role = ROLE_OF_REQUEST[request.type];
      const queue = subjects.work(role);
      const span = tracer.startSpan(
        `process ${queue}`,
        {
          kind: SpanKind.CONSUMER,
          attributes: {
            'messaging.system': 'nats',
            'messaging.operation.type': 'process',
            'messaging.operation.name': 'process',
            'messaging.destination.name': queue,
            'messaging.message.id': request.id,
            'pge.run.id': request.runId,
            'pge.request.id': request.id,
            'pge.role': role,
            'pge.phase': request.payload.phase,
            'pge.worker': worker,
          },
        },
        contextUnder(headers[TRACEPARENT_HEADER]),
      );
      const active = trace.setSpan(context.active(), span);
      return {
        within: (work) => context.with(active, work),
        tool: (tool) => tracedTool(tracer, active, tool),
        validate: (run) => tracedValidation(tracer, active, run),
        end(outcome) {
          if ('error' in outcome) failed(span, outcome.error);
          else {
            span.setAttribute('pge.result.status', outcome.result.status);
            if (outcome.result.status === 'error')
              span.setStatus({ code: SpanStatusCode.ERROR, message: outcome.result.error.message });
          }
          span.end();
        },
      };
    },
  };
}

/** The validators `run` runs, in a `pge.validate` span under `parent`. */
async function tracedValidation(
  tracer: Tracer,
  parent: Context,
  run: () => Promise<ValidatorRun[]>,
): Promise<ValidatorRun[]> {
  const span = tracer.startSpan('pge.validate', { kind: SpanKind.INTERNAL }, parent);
  try {
    const runs = await context.with(trace.setSpan(parent, span), run);
    for (const { validator, passed, exitCode, durationMs } of runs)
      span.addEvent('pge.validator', {
        'pge.validator.name': validator,
        'pge.validator.passed': passed,
        'pge.validator.duration_ms': durationMs,
        ...(exitCode === null ? {} : { 'pge.validator.exit_code': exitCode }),
      });
    span.setAttribute(
      'pge.validation.passed',
      runs.every((r) => r.passed),
    );
    return runs;
  } catch (error) {
    failed(span, error);
    throw error;
  } finally {
    span.end();
  }
}

/**
 * `tool`, run in an `execute_tool` span under `parent`. The span ends when the run settles or its
 * signal aborts (cancelled, or past its time), whichever comes first: the worker stops waiting for
 * a tool that ignores its signal, and so does the span.
 */
function tracedTool<D extends { readonly name: string }>(
  tracer: Tracer,
  parent: Context,
  tool: RunnableTool<D>,
): RunnableTool<D> {
  const { name } = tool.definition;
  return {
    definition: tool.definition,
    async run(args, signal) {
      const span = tracer.startSpan(
        `execute_tool ${name}`,
        {
          kind: SpanKind.INTERNAL,
          attributes: { 'gen_ai.operation.name': 'execute_tool', 'gen_ai.tool.name': name },
        },
        parent,
      );
      let open = true;
      const end = (error?: unknown) => {
        if (!open) return;
        open = false;
        if (error !== undefined) failed(span, error);
        span.end();
      };
      const onAbort = () => end(signal.reason);
      signal.addEventListener('abort', onAbort, { once: true });
      try {
        const answer = await context.with(trace.setSpan(parent, span), () => tool.run(args, signal));
        end();
        return answer;
      } catch (error) {
        end(error);
        throw error;
      } finally {
        signal.removeEventListener('abort', onAbort);
      }
    },
  };
}

function failed(span: Span, error: unknown): void {
  if (error instanceof Error) {
    span.recordException(error);
    span.setAttribute('error.type', error.name);
  }
  span.setStatus({
    code: SpanStatusCode.ERROR,
    message: error instanceof Error ? error.message : String(error),
  });
}
