/** Whether the environment asks for OTLP export of traces (the OpenTelemetry SDK's own variables). */
export function otlpRequested(env: NodeJS.ProcessEnv): boolean {
  return Boolean(env.OTEL_EXPORTER_OTLP_ENDPOINT?.trim() || env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT?.trim());
}
