import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SpanKind, SpanStatusCode } from '@opentelemetry/api';
import {
  InMemorySpanExporter,
  type ReadableSpan,
  SimpleSpanProcessor,
  TracerProvider,
} from '@opentelemetry/sdk-trace';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { PlannerGeneratorEvaluator } from '../../src/api/planner-generator-evaluator.js';
import { enqueueWork, subscribeResults } from '../../src/bus/channels.js';
import { InProcessBus } from '../../src/bus/in-process-bus.js';
import { readLogFile, renderLog } from '../../src/persistence/index.js';
import { createRoleWorker } from '../../src/roles/role-worker.js';
import type { RunEventOf } from '../../src/schemas/index.js';
import { traceWork } from '../../src/telemetry/work-tracing.js';
import { ScriptedModel } from '../../src/testing.js';
import { ROOT } from '../cli/run-cli.js';
import { type FakeStep, startFakeOpenAI } from '../support/fake-openai-server.js';
import { answers, asksForTools, schemaOf, toolAnswers } from '../support/scripted-deployment.js';
import { approve, evaluate, planOf, proposal, times, work } from '../support/scripts.js';

/**
 * OpenTelemetry: spans of the run, its steps, attempts and model calls, with the GenAI semantic
 * conventions, checked with an in-memory exporter; and OTLP export when the environment asks.
 */

/** A request for a plan of `runId`, as a coordinator queues it. */
function planRequest(runId: string): RunEventOf<'plan.requested'> {
  return {
    id: `${runId}-1`,
    runId,
    seq: 1,
    ts: new Date().toISOString(),
    type: 'plan.requested',
    payload: { phase: 'plan', input: { task: 'Write a short guide', maxSteps: 3, replan: null } },
  };
}

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'pge-tracing-'));
});
afterEach(() => {
  rmSync(dir, { recursive: true, force: true });
});

describe('tracing', () => {
  it('makes one trace of a run: run, step, attempts and model calls, with gen_ai and pge attributes', async () => {
    const exporter = new InMemorySpanExporter();
    const provider = new TracerProvider({ spanProcessors: [new SimpleSpanProcessor({ exporter })] });
    const model = new ScriptedModel(
      {
        plan: [{ json: planOf(1) }],
        contract: [proposal],
        contract_review: [approve],
        work: times(2, work()),
        evaluation: [evaluate(5), evaluate(9)],
      },
      { promptTokens: 120, completionTokens: 30 },
    );
    const pge = new PlannerGeneratorEvaluator({
      plannerAgent: model,
      generatorAgent: model,
      evaluatorAgent: model,
      workingDirectory: dir,
      tracer: provider.getTracer('test'),
    });
    await pge.run('Write a short guide');
    await pge.close();
    await provider.forceFlush();

    const spans = exporter.getFinishedSpans();
    const named = (name: string): ReadableSpan => spans.find((s) => s.name === name)!;
    const parentOf = (span: ReadableSpan) =>
      spans.find((s) => s.spanContext().spanId === span.parentSpanContext?.spanId);
    const run = named('pge.run');
    const step = named('pge.step 1');
    const [first, second] = [named('pge.attempt 1'), named('pge.attempt 2')];
    const calls = spans.filter((s) => s.name === 'chat scripted-test-double');
    // One trace: every span under the run's, in its trace.
    expect(new Set(spans.map((s) => s.spanContext().traceId)).size).toBe(1);
    expect(run.parentSpanContext).toBeUndefined();
    expect(parentOf(step)).toBe(run);
    expect([parentOf(first!), parentOf(second!)]).toEqual([step, step]);
    // 1 plan, 1 contract, 1 review, 2 works, 2 evaluations: each a span, under its attempt where it has one.
    expect(calls).toHaveLength(7);
    const work1 = calls.find((c) => c.attributes['pge.phase'] === 'work' && parentOf(c) === first);
    expect(work1?.attributes).toMatchObject({
      'gen_ai.operation.name': 'chat',
      'gen_ai.provider.name': 'openai',
      'gen_ai.request.model': 'scripted-test-double',
      'gen_ai.response.model': 'scripted-test-double',
      'gen_ai.usage.input_tokens': 120,
      'gen_ai.usage.output_tokens': 30,
      'pge.role': 'generator',
    });
    expect(parentOf(calls.find((c) => c.attributes['pge.phase'] === 'plan')!)).toBe(run);
    expect(first!.attributes).toMatchObject({
      'pge.attempt.signal': 'initial',
      'pge.attempt.verdict': 'fail',
      'pge.attempt.reason': 'below_threshold',
      'pge.score.accuracy': 5,
    });
    expect(second!.attributes).toMatchObject({
      'pge.attempt.signal': 'refine',
      'pge.attempt.verdict': 'pass',
    });
    expect(step.attributes).toMatchObject({ 'pge.step.status': 'passed', 'pge.step.number': 1 });
    expect(run.attributes).toMatchObject({ 'pge.run.passed': true, 'pge.run.retries': 1 });
    // Every span ended within the run's.
    for (const span of spans)
      expect(span.endTime[0] * 1e9 + span.endTime[1]).toBeLessThanOrEqual(
        run.endTime[0] * 1e9 + run.endTime[1],
      );
  });

  it('keeps a run resumed by another process in the trace its run.started recorded', async () => {
    const exporter = new InMemorySpanExporter();
    const provider = new TracerProvider({ spanProcessors: [new SimpleSpanProcessor({ exporter })] });
    const traced = (sharedStatePath: string) => {
      const model = new ScriptedModel({
        plan: [{ json: planOf(2) }],
        contract: times(2, proposal),
        contract_review: times(2, approve),
        work: times(2, work()),
        evaluation: times(2, evaluate(9)),
      });
      return new PlannerGeneratorEvaluator({
        plannerAgent: model,
        generatorAgent: model,
        evaluatorAgent: model,
        workingDirectory: dir,
        sharedStatePath,
        tracer: provider.getTracer('test'),
      });
    };
    const first = traced(join(dir, 'whole.md'));
    await first.run('Write a short guide');
    await first.close();
    const events = await readLogFile(join(dir, 'whole.md'));
    const started = events[0] as RunEventOf<'run.started'>;
    const [, traceId, spanId] = started.payload.traceparent!.split('-');
    const original = exporter.getFinishedSpans().find((s) => s.name === 'pge.run')!;
    expect(original.spanContext()).toMatchObject({ traceId, spanId });

    // The process died as step 2 was about to start; another resumes the run from its log.
    const cut = events.findIndex((e) => e.type === 'step.started' && e.payload.stepNumber === 2);
    const cutLog = join(dir, 'cut.md');
    writeFileSync(cutLog, renderLog(events.slice(0, cut)));
    exporter.reset();
    const second = traced(join(dir, 'unused.md'));
    await second.resume(cutLog);
    await second.close();
    await provider.forceFlush();

    const spans = exporter.getFinishedSpans();
    const resumed = spans.find((s) => s.name === 'pge.run')!;
    expect(resumed.attributes).toMatchObject({ 'pge.run.resumed': true, 'pge.run.passed': true });
    // A child of the run's first span, in its trace, and every span of the resumed part in it too.
    expect(resumed.parentSpanContext).toMatchObject({ traceId, spanId });
    expect(new Set(spans.map((s) => s.spanContext().traceId))).toEqual(new Set([traceId]));
    expect(spans.map((s) => s.name)).toContain('pge.step 2');
  });

  it('traces each request a worker serves under the span that asked for it, and each tool it runs under that', async () => {
    const exporter = new InMemorySpanExporter();
    const provider = new TracerProvider({ spanProcessors: [new SimpleSpanProcessor({ exporter })] });
    const openai = await startFakeOpenAI();
    openai.script((body): FakeStep => {
      const schema = schemaOf(body) ?? '';
      if (toolAnswers(body).length === 0 && schema === 'pge_work')
        return asksForTools([{ name: 'write_file', arguments: { path: 'a.txt', content: 'a' } }]);
      if (toolAnswers(body).length === 0 && schema === 'pge_evaluation')
        return asksForTools([{ name: 'read_file', arguments: { path: 'a.txt' } }], 1);
      return { content: answers(9, 1)[schema]! };
    });
    const pge = new PlannerGeneratorEvaluator({
      modelName: 'test-model',
      baseURL: openai.url,
      apiKey: 'sk-test-tracing',
      workingDirectory: dir,
      validators: ['test -f a.txt'],
      tracer: provider.getTracer('test'),
    });
    try {
      await pge.run('Write a short guide');
      expect(pge.lastResult?.passed).toBe(true);
    } finally {
      await pge.close();
      await openai.close();
    }
    await provider.forceFlush();

    const spans = exporter.getFinishedSpans();
    const named = (name: string) => spans.filter((s) => s.name === name);
    const parentOf = (span: ReadableSpan) =>
      spans.find((s) => s.spanContext().spanId === span.parentSpanContext?.spanId)?.name;
    const processOf = (phase: string) =>
      spans.find((s) => s.name.startsWith('process ') && s.attributes['pge.phase'] === phase)!;
    expect(new Set(spans.map((s) => s.spanContext().traceId)).size).toBe(1);
    // Each request's worker span sits under the span that was open when it was asked.
    expect(parentOf(processOf('plan'))).toBe('pge.run');
    expect(parentOf(processOf('contract'))).toBe('pge.step 1');
    expect(parentOf(processOf('contract_review'))).toBe('pge.step 1');
    expect(parentOf(processOf('work'))).toBe('pge.attempt 1');
    expect(parentOf(processOf('evaluation'))).toBe('pge.attempt 1');
    expect(processOf('work').kind).toBe(SpanKind.CONSUMER);
    expect(processOf('work').attributes).toMatchObject({
      'messaging.system': 'nats',
      'messaging.operation.type': 'process',
      'messaging.destination.name': 'pge.work.generator',
      'pge.role': 'generator',
      'pge.worker': 'generator-embedded',
      'pge.result.status': 'ok',
    });
    expect(processOf('evaluation').name).toBe('process pge.work.evaluator');
    // The tools ran in the worker's span of the call that asked for them.
    const [written] = named('execute_tool write_file');
    const [read] = named('execute_tool read_file');
    expect(written?.parentSpanContext?.spanId).toBe(processOf('work').spanContext().spanId);
    expect(read?.parentSpanContext?.spanId).toBe(processOf('evaluation').spanContext().spanId);
    expect(written?.attributes).toMatchObject({
      'gen_ai.operation.name': 'execute_tool',
      'gen_ai.tool.name': 'write_file',
    });
    // The validators ran in it too, after the work's answer.
    const [validate] = named('pge.validate');
    expect(validate?.parentSpanContext?.spanId).toBe(processOf('work').spanContext().spanId);
    expect(validate?.attributes).toMatchObject({ 'pge.validation.passed': true });
    expect(validate?.events.map((e) => [e.name, e.attributes?.['pge.validator.passed']])).toEqual([
      ['pge.validator', true],
    ]);
  });

  it('traces a work item whose traceparent is not W3C trace context as a trace of its own', async () => {
    const exporter = new InMemorySpanExporter();
    const provider = new TracerProvider({ spanProcessors: [new SimpleSpanProcessor({ exporter })] });
    const bus = new InProcessBus();
    const worker = createRoleWorker({
      bus,
      role: 'planner',
      model: new ScriptedModel({ plan: times(4, { json: planOf(1) }) }),
      workerId: 'planner-test',
      tracing: traceWork(provider.getTracer('test')),
    });
    const results: string[] = [];
    subscribeResults(bus, '*', (result) => void results.push(result.requestId));
    const request = planRequest('run-hostile');
    const valid = `00-${'a'.repeat(32)}-${'b'.repeat(16)}-01`;
    const headers = [
      { traceparent: valid },
      { traceparent: `00-${'0'.repeat(32)}-${'b'.repeat(16)}-01` },
      { traceparent: `${valid}-extra` },
      { traceparent: valid.toUpperCase() },
    ];
    for (const [n, sent] of headers.entries()) await enqueueWork(bus, { ...request, id: `req-${n}` }, sent);
    await bus.flush();
    await worker.stop();
    await bus.close();

    // Every item was served; only the well-formed context was taken as the parent.
    expect(results.sort()).toEqual(['req-0', 'req-1', 'req-2', 'req-3']);
    const spans = exporter
      .getFinishedSpans()
      .sort((a, b) =>
        String(a.attributes['pge.request.id']).localeCompare(String(b.attributes['pge.request.id'])),
      );
    expect(spans.map((s) => s.name)).toEqual(Array(4).fill('process pge.work.planner'));
    expect(spans[0]!.parentSpanContext).toMatchObject({ traceId: 'a'.repeat(32), spanId: 'b'.repeat(16) });
    for (const span of spans.slice(1)) {
      expect(span.parentSpanContext).toBeUndefined();
      expect(span.spanContext().traceId).not.toBe('a'.repeat(32));
    }
  });

  it("ends a tool's span when its signal aborts, though the tool itself never settles", async () => {
    const exporter = new InMemorySpanExporter();
    const provider = new TracerProvider({ spanProcessors: [new SimpleSpanProcessor({ exporter })] });
    const traced = traceWork(provider.getTracer('test')).begin(planRequest('run-tool'), {}, 'w');
    const stuck = traced.tool({
      definition: { name: 'stuck' },
      run: () => new Promise<string>(() => {}), // ignores its signal
    });
    const controller = new AbortController();
    void stuck.run({}, controller.signal);
    expect(exporter.getFinishedSpans()).toEqual([]);
    controller.abort(new Error('past its time'));
    const [span] = exporter.getFinishedSpans();
    expect(span?.name).toBe('execute_tool stuck');
    expect(span?.status).toMatchObject({ code: SpanStatusCode.ERROR, message: 'past its time' });
  });

  it('exports the spans over OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set', async () => {
    const bodies: string[] = [];
    const collector = createServer((request, response) => {
      let body = '';
      request.on('data', (chunk: Buffer) => {
        body += chunk.toString('utf8');
      });
      request.on('end', () => {
        bodies.push(`${request.method} ${request.url}\n${body}`);
        response.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      });
    });
    await new Promise<void>((resolve) => collector.listen(0, '127.0.0.1', resolve));
    const { port } = collector.address() as AddressInfo;
    try {
      const demo = spawn(process.execPath, [join(ROOT, 'bin/pge.js'), 'demo', '--working-dir', dir], {
        env: { ...process.env, OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${port}` },
        stdio: 'ignore',
      });
      expect(await new Promise((resolve) => demo.on('exit', resolve))).toBe(0);
      const sent = bodies.join('\n');
      expect(sent).toMatch(/^POST \/v1\/traces/);
      for (const text of ['pge.run', 'pge.step 3', 'gen_ai.usage.input_tokens', 'pge.attempt.verdict'])
        expect(sent).toContain(text);
    } finally {
      collector.close();
    }
  });
});
