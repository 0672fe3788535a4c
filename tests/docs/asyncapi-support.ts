import { readFileSync } from 'node:fs';
import { expect } from 'vitest';
import { parse } from 'yaml';
import type { RunEventDraft, RunEventType } from '../../src/schemas/index.js';
import { RoleRequest, RoleResult, RunEvent } from '../../src/schemas/index.js';
import { fullRun, makeEvent } from '../persistence/fixtures.js';

/**
 * What the AsyncAPI tests share: the committed document, parsed as YAML, a way to read it by JSON
 * pointer, and real pge messages of every kind to validate against its schemas.
 */

export type Json = Record<string, unknown>;

export const DOC_PATH = new URL('../../docs/asyncapi.yaml', import.meta.url);
/** docs/asyncapi.yaml as committed: the contract integrators code against. */
export const DOC_TEXT = readFileSync(DOC_PATH, 'utf8');
export const doc = parse(DOC_TEXT) as Json;

export const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);

/** The node at a local JSON pointer (`#/a/b/c`) of the document; throws when there is none. */
export function at<T = Json>(pointer: string): T {
  if (!pointer.startsWith('#/')) throw new Error(`not a local $ref: ${pointer}`);
  let node: unknown = doc;
  for (const part of pointer.slice(2).split('/')) {
    const key = part.replaceAll('~1', '/').replaceAll('~0', '~');
    if (!isObject(node) || !(key in node)) throw new Error(`$ref ${pointer} does not resolve`);
    node = node[key];
  }
  return node as T;
}

/** The pointer of the payload schema of a message under `components/messages`. */
export function payloadRef(message: string): string {
  return at<{ payload: { $ref: string } }>(`#/components/messages/${message}`).payload.$ref;
}

/** The payload schema of a message under `components/messages`. */
export function payloadOf(message: string): Json {
  return at(payloadRef(message));
}

/** The component message of each event type on the events channel, by the message's `name`. */
export function messageOfType(type: RunEventType): string {
  const messages = at<Record<string, { name: string }>>('#/components/messages');
  const onEvents = new Set(Object.keys(at('#/channels/runEvents/messages')));
  const found = Object.entries(messages).filter(([key, m]) => m.name === type && onEvents.has(key));
  expect(found, `messages named ${type}`).toHaveLength(1);
  return found[0]![0];
}

export const EVENT_TYPES = RunEvent.options.map((s) => s.shape.type.value as RunEventType);
export const REQUEST_TYPES = RoleRequest.options.map((s) => s.shape.type.value as RunEventType);

/** Events of the types the full-run fixture does not produce, so that every type has a sample. */
const RARER_EVENTS: RunEventDraft[] = [
  { type: 'plan.truncated', payload: { from: 12, to: 10, droppedStepIds: ['s11', 's12'] } },
  { type: 'step.carried', payload: { stepId: 's1', stepNumber: 1, title: 'Kept', fromRunId: 'run-0' } },
  {
    type: 'request.cancelled',
    payload: { requestId: 'run-3-7', phase: 'work', reason: 'interrupted by the operator' },
  },
  { type: 'result.rejected', payload: { requestId: 'run-3-7', worker: 'generator-1', reason: 'late' } },
  {
    type: 'run.resumed',
    payload: {
      owner: 'build-host:4242',
      fromSeq: 3,
      logPath: '/var/lib/pge/pge_shared_state_run-3.md',
      repeated: ['run-3-2'],
      pausedMs: 61_000,
      discardedBytes: 0,
    },
  },
  {
    type: 'step.contract.imposed',
    payload: {
      stepId: 's1',
      stepNumber: 1,
      contract: {
        title: 'Sea haiku',
        acceptanceCriteria: ['Three lines'],
        expectedOutput: 'A haiku',
        verificationMethod: 'Count syllables',
        rounds: 3,
        imposed: true,
      },
      outstandingAmendments: ['Require 5-7-5'],
    },
  },
  {
    type: 'step.work.invalid',
    payload: { stepId: 's1', stepNumber: 1, attempt: 1, problem: 'not JSON', raw: '{' },
  },
  {
    type: 'step.evaluation.invalid',
    payload: { stepId: 's1', stepNumber: 1, attempt: 1, problem: 'criterion "form" has no score', raw: null },
  },
  {
    type: 'step.failed',
    payload: { stepId: 's1', stepNumber: 1, attempts: 4, bestAttempt: 2, policy: 'advance' },
  },
  { type: 'step.plan.rejected', payload: { stepId: 's1', stepNumber: 1, attempt: 1 } },
  {
    type: 'approval.requested',
    payload: { gate: 'step', stepId: 's1', stepNumber: 1, attempt: 2, summary: 'Line one' },
  },
  {
    type: 'approval.decided',
    payload: { requestId: 'run-1-9', gate: 'step', decision: 'reject', reason: 'too short', by: 'ana' },
  },
  {
    type: 'role.failed',
    payload: {
      requestId: 'run-1-2',
      role: 'planner',
      phase: 'plan',
      error: { name: 'ModelTransportError', message: 'connection reset', retryable: true },
      raw: null,
    },
  },
  {
    type: 'run.failed',
    payload: {
      byPhase: [],
      passed: false,
      stepsPassed: 0,
      stepsTotal: 1,
      totalRetries: 0,
      usage: { promptTokens: 10, completionTokens: 5, costUsd: 0.001, calls: 1 },
      durationMs: 1200,
      summary: 'Stopped: budget.',
      reason: 'budget',
      message: 'maxCostUsd 0.001 reached',
    },
  },
];

export const run = fullRun('run-1');
export const SAMPLE_EVENTS = [...run, ...fullRun('run-2', { hostile: true })].concat(
  RARER_EVENTS.map((draft, i) => makeEvent('run-3', i + 1, draft)),
);

function payloadOfEvent<T extends RunEventType>(type: T) {
  const event = run.find((e) => e.type === type);
  if (!event) throw new Error(`the fixture has no ${type}`);
  return event.payload as Extract<RunEvent, { type: T }>['payload'];
}

const ROLE_OF_PHASE = {
  plan: 'planner',
  contract: 'generator',
  contract_review: 'evaluator',
  work: 'generator',
  evaluation: 'evaluator',
} as const;

/** A worker's result for the fixture's request `n`. */
function resultOf(n: number, result: RoleResult['result']): RoleResult {
  return RoleResult.parse({
    requestId: `run-1-${n}`,
    runId: 'run-1',
    role: ROLE_OF_PHASE[result.phase],
    worker: 'worker-1',
    calls: [],
    result,
  });
}

/** One result per phase, built from the fixture's own outputs, and a failure with its model call. */
export const SAMPLE_RESULTS: RoleResult[] = [
  resultOf(2, {
    status: 'ok',
    phase: 'plan',
    output: { plan: payloadOfEvent('plan.created').plan, truncation: null },
  }),
  resultOf(6, { status: 'ok', phase: 'contract', output: payloadOfEvent('step.contract.proposed').proposal }),
  resultOf(9, {
    status: 'ok',
    phase: 'contract_review',
    output: payloadOfEvent('step.contract.reviewed').review,
  }),
  resultOf(18, { status: 'ok', phase: 'work', output: payloadOfEvent('step.work.completed').work }),
  resultOf(21, {
    status: 'ok',
    phase: 'evaluation',
    output: payloadOfEvent('step.evaluation.completed').evaluation,
  }),
  {
    ...resultOf(27, {
      status: 'error',
      phase: 'evaluation',
      error: {
        name: 'InvalidOutputError',
        message: 'evaluation answer invalid after 1 tries',
        retryable: false,
      },
      raw: '',
    }),
    calls: [
      {
        role: 'evaluator',
        phase: 'evaluation',
        model: 'gpt-x',
        promptTokens: 900,
        completionTokens: 0,
        costUsd: 0,
        latencyMs: 30000,
        repair: 0,
        outcome: 'invalid',
        problem: 'the answer was empty',
      },
    ],
  },
];
