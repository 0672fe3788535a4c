import { type Tracer, trace } from '@opentelemetry/api';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { BatchSpanProcessor, TracerProvider } from '@opentelemetry/sdk-trace';

/**
 * The OTLP exporter of pge's spans, set up when `OTEL_EXPORTER_OTLP_ENDPOINT` (or
 * `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set: the exporter reads the standard `OTEL_*` variables
 * itself (endpoint, headers, timeout). Loaded only then (`otlpRequested`), so that a process
 * without it pays nothing.
 */

/** A tracer whose spans go out over OTLP, and how to flush and stop it. */
export function otlpTracer(): { tracer: Tracer; shutdown: () => Promise<void> } {
  const provider = new TracerProvider({
    spanProcessors: [new BatchSpanProcessor({ exporter: new OTLPTraceExporter() })],
  });
  trace.setGlobalTracerProvider(provider);
  return { tracer: provider.getTracer('pge'), shutdown: () => provider.shutdown() };
}
