import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  closedRun,
  passingAnswer,
  startDeployment,
  submitRun,
  type TestDeployment,
} from '../support/deployment.js';

/**
 * A distributed run is one trace: the coordinator and the role workers, separate `pge worker`
 * processes on a real nats-server, each export their spans over OTLP to a collector the test
 * runs; the workers' spans of the requests they served are in the run's trace, each under the
 * coordinator's span that asked (the trace context travels in the work item's `traceparent`
 * header).
 */

/** A span as OTLP/JSON carries it, with its attributes as plain values. */
interface ExportedSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  attributes: Record<string, unknown>;
}

let d: TestDeployment;
/** Set once the deployment was closed (by the test, to have every process send its spans). */
let closing: Promise<unknown> | null = null;
let collector: Server;
const spans: ExportedSpan[] = [];

/** Every span of an OTLP/JSON export request. */
// biome-ignore lint/suspicious/noExplicitAny: the OTLP/JSON body as the exporter sent it.
function spansOf(body: any): ExportedSpan[] {
  // biome-ignore lint/suspicious/noExplicitAny: idem.
  return (body.resourceSpans ?? []).flatMap((r: any) =>
    // biome-ignore lint/suspicious/noExplicitAny: idem.
    (r.scopeSpans ?? []).flatMap((s: any) =>
      // biome-ignore lint/suspicious/noExplicitAny: idem.
      (s.spans ?? []).map((span: any) => ({
        ...span,
        attributes: Object.fromEntries(
          // biome-ignore lint/suspicious/noExplicitAny: idem.
          (span.attributes ?? []).map((a: any) => [a.key, Object.values(a.value)[0]]),
        ),
      })),
    ),
  );
}

beforeAll(async () => {
  collector = createServer((request, response) => {
    let body = '';
    request.on('data', (chunk: Buffer) => {
      body += chunk.toString('utf8');
    });
    request.on('end', () => {
      if (request.url === '/v1/traces') spans.push(...spansOf(JSON.parse(body)));
      response.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((resolve) => collector.listen(0, '127.0.0.1', resolve));
  const otlp = {
    OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${(collector.address() as AddressInfo).port}`,
  };
  d = await startDeployment();
  d.openai.script((body) => passingAnswer(body, 0));
  await d.worker('coordinator', [], otlp);
  for (const role of ['planner', 'generator', 'evaluator'] as const)
    await d.worker(role, ['--worker-id', `${role}-traced`], otlp);
  await d.worker('persistence', ['--working-dir', d.logs]);
}, 60_000);

afterAll(async () => {
  closing ??= d?.close();
  await closing;
  collector?.close();
}, 60_000);

describe('tracing a distributed run', () => {
  it("puts each worker's span of a request in the run's trace, under the coordinator's span that asked", async () => {
    const runId = await submitRun(d.client, 'Write a short guide');
    await closedRun(d.client, runId);
    // Stopped, every process sends the spans it still holds.
    closing = d.close();
    const { refusals } = (await closing) as Awaited<ReturnType<TestDeployment['close']>>;
    expect(refusals).toEqual([]);

    const run = spans.find((s) => s.name === 'pge.run' && s.attributes['pge.run.id'] === runId)!;
    expect(run).toBeDefined();
    const inRun = spans.filter((s) => s.traceId === run.traceId);
    const parentOf = (span: ExportedSpan) => inRun.find((s) => s.spanId === span.parentSpanId)?.name;
    const served = spans.filter((s) => s.name.startsWith('process ') && s.attributes['pge.run.id'] === runId);
    // Plan, then per step (3) a contract, its review, the work and its evaluation.
    expect(served).toHaveLength(13);
    for (const span of served) expect(span.traceId).toBe(run.traceId);
    const byPhase = (phase: string) => served.filter((s) => s.attributes['pge.phase'] === phase);
    expect(byPhase('plan').map(parentOf)).toEqual(['pge.run']);
    expect(byPhase('contract').map(parentOf)).toEqual(['pge.step 1', 'pge.step 2', 'pge.step 3']);
    for (const phase of ['work', 'evaluation'])
      expect(byPhase(phase).map(parentOf)).toEqual(Array(3).fill('pge.attempt 1'));
    // Made in the worker processes, which the coordinator's spans are not.
    expect(new Set(served.map((s) => s.attributes['pge.worker']))).toEqual(
      new Set(['planner-traced', 'generator-traced', 'evaluator-traced']),
    );
  });
});
