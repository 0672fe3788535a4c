/**
 * Generates `docs/asyncapi.yaml`, the AsyncAPI 3.0 contract of every pge subject and payload, from
 * the zod schemas, so that a worker or client written in another language can take part.
 *
 *   npx tsx scripts/gen-asyncapi.ts                      # rewrites docs/asyncapi.yaml
 *   npx tsx scripts/gen-asyncapi.ts --out x.yaml --nats-url nats://nats:4222   # a deployment's copy
 *
 * `tests/docs/asyncapi.test.ts` fails when the committed file differs from what this script builds.
 * The committed file never depends on the environment (NATS_URL is set in CI for the integration
 * tests): the server host is an AsyncAPI server variable whose default only `--nats-url` changes.
 *
 * Payload schemas are zod's `io: 'output'` JSON Schemas, the shape of a value after parsing. That is
 * what pge puts on the wire: both buses publish the parsed copy of every message. It is also the
 * safer contract for a foreign producer: every object is closed (`additionalProperties: false`),
 * and criterion names carry their bounds, whereas `io: 'input'` would leave plain `z.object`s open
 * (pge strips unknown keys) and describe a criterion name before normalisation as any string. A
 * message that follows the output schemas is accepted by pge's parse, except for the rules JSON
 * Schema cannot state, which the descriptions spell out. Nothing in these schemas is
 * unrepresentable today; `unrepresentable: 'any'` keeps a future `z.custom` from breaking the build,
 * and the test suite checks each message schema against real samples.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { stringify } from 'yaml';
import { z } from 'zod';
import { TRACEPARENT_HEADER } from '../src/bus/bus.js';
import { MessageRejection } from '../src/bus/codec.js';
import { EVENTS_STREAM, PGE_STREAMS, RESULTS_STREAM, WORK_STREAM } from '../src/bus/nats-streams.js';
import { CallCancel, RunApproval, RunControl, WorkerPresence } from '../src/schemas/control.js';
import type { RunEventType } from '../src/schemas/index.js';
import {
  AttemptReason,
  Budgets,
  Contract,
  ContractInput,
  ContractProposal,
  ContractReview,
  ContractReviewInput,
  Criterion,
  CriterionName,
  CriterionScore,
  CriterionWeight,
  DependencyArtifact,
  ErrorInfo,
  Evaluation,
  EvaluationInput,
  JudgedScore,
  ModelCall,
  Phase,
  Plan,
  PlanInput,
  PlanOutline,
  PlanStep,
  ReplanContext,
  ResolvedCriterion,
  RetryContext,
  RetrySignal,
  ROLE_OF_REQUEST,
  Role,
  RoleFailure,
  RoleRequest,
  RoleResult,
  RoleSuccess,
  RunEvent,
  RunStopReason,
  SafeId,
  Score,
  ScoreStanding,
  SelfScore,
  TRACEPARENT_PATTERN,
  Usage,
  Work,
  WorkInput,
} from '../src/schemas/index.js';
import {
  CoordinatorPing,
  CoordinatorPong,
  RunCancelReply,
  RunCancelRequest,
  RunResumeReply,
  RunResumeRequest,
  RunSubmission,
  RunSubmissionOptions,
  RunSubmissionReply,
} from '../src/schemas/submission.js';

const ROOT = resolve(fileURLToPath(new URL('..', import.meta.url)));
const DEFAULT_OUT = resolve(ROOT, 'docs/asyncapi.yaml');
const DEFAULT_NATS_URL = 'nats://localhost:4222';

/** The JetStream layout of pge's NATS bus, read from the bus (`src/bus/nats-streams.ts`). */
const JETSTREAM = {
  events: streamLayout(EVENTS_STREAM),
  work: streamLayout(WORK_STREAM),
  results: streamLayout(RESULTS_STREAM),
} as const;

function streamLayout(name: string): { stream: string; subjects: string } {
  const stream = PGE_STREAMS.find((s) => s.name === name);
  if (stream === undefined) throw new Error(`no pge stream ${name}`);
  return { stream: stream.name, subjects: stream.subject };
}

/** One line per event type; `Record` makes a new event type a compile error here until described. */
const EVENT_SUMMARIES: Record<RunEventType, string> = {
  'run.started': 'A run began: its task, log path and settings (limits, budgets, models).',
  'plan.requested': 'Work item for the planner: plan the task (or replan after an exhausted step).',
  'plan.created':
    'The plan the run follows, with the threshold the harness enforces for each criterion; `given` when it came from a file or the API, not the planner.',
  'plan.truncated': 'The plan had more steps than maxSteps and was cut; names the steps dropped.',
  'step.started': 'A step of the plan began.',
  'step.carried':
    'A step kept from the run this one continues (pge continue): it passed there and is not run again.',
  'step.contract.requested': "Work item for the generator: propose (or revise) a step's contract.",
  'step.contract.proposed': "The generator's contract proposal for one negotiation round.",
  'step.review.requested': 'Work item for the evaluator: review a contract proposal.',
  'step.contract.reviewed': "The evaluator's review of a proposal: approved, or amendments required.",
  'step.contract.agreed': 'The evaluator approved the proposal; the contract binds every attempt.',
  'step.contract.imposed':
    'Negotiation reached maxContractRounds: the outstanding amendments were added to the last proposal, which binds.',
  'step.work.requested': 'Work item for the generator: do one attempt of a step under its contract.',
  'step.work.completed': "The generator's work for one attempt: artifact, notes and self-assessment.",
  'step.work.invalid': "The generator's answer never validated; the attempt fails.",
  'step.evaluation.requested': "Work item for the evaluator: score an attempt's artifact per criterion.",
  'step.evaluation.completed': "The evaluator's scores, findings and actionable feedback for one attempt.",
  'step.evaluation.invalid':
    'The evaluation never validated (a criterion unscored, a bad score…); the attempt fails closed.',
  'step.attempt.judged': "The harness's verdict on an attempt: each criterion's score against its threshold.",
  'step.retry.scheduled': 'Another attempt follows, with a refine or pivot signal.',
  'step.passed': 'The step passed; names the attempt it keeps.',
  'step.failed': 'The step exhausted its attempts; names the policy that applied.',
  'approval.requested':
    'The run waits at a gate (plan, contract or step) for a decision: pge approve, or a message on pge.run.<runId>.approval.',
  'approval.decided':
    'The decision at a gate: approve, or reject with the reason the planner or the generator is told.',
  'step.plan.rejected':
    "The evaluator found the attempt's failure to be the plan's (failureKind plan): the step ends and the planner revises the plan.",
  'model.call.completed':
    'One model call made for a request (repairs included): tokens, cost, latency, outcome.',
  'role.failed': 'A role could not answer a request: a model error, or output that never validated.',
  'request.cancelled':
    'The run stopped waiting for a request (its call actor was stopped, e.g. by an interrupt); workers were told to drop it.',
  'run.resumed':
    'A run continued by a new owner after its process died: rebuilt from the events up to fromSeq without asking a model again; names the requests in flight at the crash, which are asked again.',
  'result.rejected':
    'A result no pending call waited for (a duplicate, a late answer to a cancelled request, or an unknown request id), or one naming a waiting call with the wrong run or from the wrong role: reported, never applied.',
  'run.completed': 'The run ran to its end; `passed` says whether every step passed.',
  'run.failed':
    'The run stopped early: aborted by policy, over budget, an error, or interrupted. `interruptReason` is newer than the rest: an earlier pge refuses a run.failed that carries it, so readers are upgraded before coordinators (docs/distributed.md).',
};

/** `step.contract.proposed` → `StepContractProposed`: the name of its message and payload schema. */
function pascal(type: string): string {
  return type
    .split(/[._]/)
    .map((word) => word.charAt(0).toUpperCase() + word.slice(1))
    .join('');
}

/** The event types in union order, with their schemas. */
function eventMembers(): { type: RunEventType; name: string; schema: z.ZodType }[] {
  return RunEvent.options.map((schema) => {
    const type = schema.shape.type.value as RunEventType;
    return { type, name: pascal(type), schema };
  });
}

const REQUEST_TYPES = RoleRequest.options.map((schema) => schema.shape.type.value as RunEventType);

type Json = Record<string, unknown>;

/** Every schema that gets a name under `components/schemas`; other schemas are inlined where used. */
function componentSchemas(): Record<string, Json> {
  const registry = z.registry<{ id: string; description?: string }>();
  const add = (schema: z.ZodType, id: string, description?: string) => {
    registry.add(schema, description === undefined ? { id } : { id, description });
  };
  for (const { type, name, schema } of eventMembers())
    add(schema, name, `\`${type}\`: ${EVENT_SUMMARIES[type]}`);
  add(
    RunEvent,
    'RunEvent',
    'Any event of a run: a union on `type`. Envelope: id, runId, seq, ts, type, payload.',
  );
  add(RoleRequest, 'RoleRequest', 'A request event that is also a work item for one role.');
  add(
    RoleResult,
    'RoleResult',
    "A worker's answer to one request. `requestId` is the request event's `id`; `calls` lists every model call made for it.",
  );
  add(
    RoleSuccess,
    'RoleSuccess',
    'An answer, typed by phase. The evaluation must score every criterion of its request exactly once.',
  );
  add(
    RoleFailure,
    'RoleFailure',
    'A request that could not be answered; `raw` is the last invalid answer, if any.',
  );
  add(
    RunSubmission,
    'RunSubmission',
    'A request to start a run: of a task, or a fork of an ended run (`fork`, with no task: the parent’s is the fork’s).',
  );
  add(
    RunSubmissionOptions,
    'RunSubmissionOptions',
    'Run settings the submitter overrides; omitted ones take the coordinator’s values.',
  );
  add(
    RunSubmissionReply,
    'RunSubmissionReply',
    'The id of the run that was started, or why the submission was refused (a run id used before, a task that is too long or holds a NUL, a fork of a run that is unknown, has not ended or did not start the step).',
  );
  add(RunResumeRequest, 'RunResumeRequest', 'A request to take a run over now (`pge resume --nats`).');
  add(
    RunResumeReply,
    'RunResumeReply',
    'The coordinator that owns the run now (`takenOver`: it took the run over for this request; else a live owner still drives it), or why the run cannot be resumed (it ended, or was never started).',
  );
  add(
    RunCancelRequest,
    'RunCancelRequest',
    "A person's request to cancel a run (`pge cancel`): who, and why.",
  );
  add(RunCancelReply, 'RunCancelReply', 'The coordinator that drives the run, and cancelled it.');
  add(CoordinatorPing, 'CoordinatorPing', 'Whether any coordinator runs (an empty object).');
  add(CoordinatorPong, 'CoordinatorPong', 'The name of the coordinator that answered a ping.');
  add(MessageRejection, 'MessageRejection', 'A message that a pge process refused on receive, and why.');
  add(RunControl, 'RunControl', 'A command for a run from outside its coordinator: interrupt it.');
  add(
    RunApproval,
    'RunApproval',
    "A person's decision at the gate a run waits at: approve, or reject with a reason.",
  );
  add(
    CallCancel,
    'CallCancel',
    'A request its run no longer waits for: the worker holding it aborts the model call.',
  );
  add(
    WorkerPresence,
    'WorkerPresence',
    'A role worker saying it is there, with the model that serves its role and whether that model has a price.',
  );
  add(SafeId, 'SafeId', 'An id that travels inside NATS subjects: letters, digits, "-" and "_" only.');
  add(Score, 'Score', 'A score on the rubric’s 1–10 scale.');
  add(
    CriterionName,
    'CriterionName',
    'A criterion name; pge trims and lower-cases it, so send it normalised.',
  );
  add(CriterionWeight, 'CriterionWeight');
  add(
    Criterion,
    'Criterion',
    'A rubric criterion; `threshold` is null when the planner leaves it to the harness.',
  );
  add(ResolvedCriterion, 'ResolvedCriterion', 'A criterion with the threshold the harness enforces.');
  add(PlanStep, 'PlanStep');
  add(
    Plan,
    'Plan',
    'Ordered steps and a graded rubric. Not expressible in JSON Schema but enforced: step ids are unique, `dependsOn` names earlier steps only, criterion names are unique.',
  );
  add(PlanOutline, 'PlanOutline');
  add(ContractProposal, 'ContractProposal');
  add(
    ContractReview,
    'ContractReview',
    'Not expressible in JSON Schema but enforced: `amendments_required` needs at least one amendment.',
  );
  add(
    Contract,
    'Contract',
    'The contract that binds every attempt of a step; `imposed` when negotiation hit its bound.',
  );
  add(SelfScore, 'SelfScore');
  add(
    Work,
    'Work',
    "The generator's work; the self-assessment is recorded and never shown to the evaluator.",
  );
  add(CriterionScore, 'CriterionScore');
  add(Evaluation, 'Evaluation');
  add(Usage, 'Usage');
  add(Role, 'Role');
  add(Phase, 'Phase');
  add(ErrorInfo, 'ErrorInfo', 'A named error; `retryable` says whether the same request may succeed later.');
  add(ModelCall, 'ModelCall');
  add(JudgedScore, 'JudgedScore');
  add(AttemptReason, 'AttemptReason');
  add(RunStopReason, 'RunStopReason');
  add(Budgets, 'Budgets', 'Budgets of a run; null is no limit.');
  add(PlanInput, 'PlanInput');
  add(ReplanContext, 'ReplanContext');
  add(ContractInput, 'ContractInput');
  add(ContractReviewInput, 'ContractReviewInput');
  add(WorkInput, 'WorkInput');
  add(
    EvaluationInput,
    'EvaluationInput',
    'Structurally unable to carry the self-assessment, notes or earlier evaluations.',
  );
  add(RetryContext, 'RetryContext');
  add(RetrySignal, 'RetrySignal');
  add(ScoreStanding, 'ScoreStanding');
  add(DependencyArtifact, 'DependencyArtifact');

  const { schemas } = z.toJSONSchema(registry, {
    target: 'draft-07',
    io: 'output',
    unrepresentable: 'any',
    metadata: registry,
    uri: (id) => `#/components/schemas/${id}`,
  });
  if ('__shared' in schemas) throw new Error('a schema was shared without a name: register it above');
  const out: Record<string, Json> = {};
  for (const id of Object.keys(schemas).sort()) {
    // `$schema` and `$id` are per-document in JSON Schema; inside an AsyncAPI document they are noise.
    const { $schema: _schema, $id: _id, ...rest } = schemas[id] as Json;
    out[id] = rest;
  }
  return out;
}

const ref = (path: string) => ({ $ref: path });
const schemaRef = (name: string) => ref(`#/components/schemas/${name}`);

/** The processes whose operations the document describes, by tag. */
const TAGS = {
  coordinator: "Owns a run's statechart; the only writer of its events; queues requests; takes results.",
  worker: 'A stateless role worker (planner, generator or evaluator): takes a request, answers it.',
  persistence: "Appends each run's events to its markdown log, one ordered writer per run.",
  integrator: 'A client outside pge: submits runs, follows their events, watches rejections.',
} as const;
const tag = (name: keyof typeof TAGS) => ({ name });

/** Options of `buildAsyncApi`. */
export interface AsyncApiOptions {
  /** The default of the server's `host` variable (default `nats://localhost:4222`). */
  natsUrl?: string;
}

/** The component message of a request as it is queued on `pge.work.<role>`. */
const workItemName = (requestName: string): string => `${requestName}WorkItem`;

/** Builds the AsyncAPI 3.0 document; deterministic for given options. */
export function buildAsyncApi(options: AsyncApiOptions = {}): Json {
  const pkg = JSON.parse(readFileSync(resolve(ROOT, 'package.json'), 'utf8')) as { version: string };
  const natsHost = new URL(options.natsUrl ?? DEFAULT_NATS_URL).host;
  const events = eventMembers();
  const requests = events.filter((e) => REQUEST_TYPES.includes(e.type));

  const eventMessages: Json = {};
  for (const { type, name } of events) {
    eventMessages[name] = {
      name: type,
      title: type,
      summary: EVENT_SUMMARIES[type],
      contentType: 'application/json',
      headers: schemaRef('EventHeaders'),
      payload: schemaRef(name),
      ...(REQUEST_TYPES.includes(type)
        ? {
            correlationId: {
              description: "The request's id; its RoleResult carries it as `requestId`.",
              location: '$message.payload#/id',
            },
          }
        : {}),
    };
  }
  // A request as a work item: the same message, with the headers of the work queue.
  const workMessages: Json = {};
  for (const { name } of requests)
    workMessages[workItemName(name)] = {
      ...(eventMessages[name] as object),
      headers: schemaRef('WorkHeaders'),
    };
  const messages: Json = {
    ...eventMessages,
    ...workMessages,
    RoleResult: {
      name: 'RoleResult',
      title: 'Role result',
      summary: "A worker's answer to one request.",
      contentType: 'application/json',
      headers: schemaRef('ResultHeaders'),
      payload: schemaRef('RoleResult'),
      correlationId: {
        description: 'The id of the request event this answers.',
        location: '$message.payload#/requestId',
      },
    },
    RunSubmission: {
      name: 'RunSubmission',
      title: 'Run submission',
      summary: 'A task to run, with optional run settings; or a fork of an ended run from a step.',
      contentType: 'application/json',
      payload: schemaRef('RunSubmission'),
      examples: [
        { name: 'haiku', payload: { task: 'Write a haiku about the sea.', options: { maxSteps: 3 } } },
        {
          name: 'fork',
          payload: {
            fork: {
              runId: 'pge-20250101-120000-0a1b2c3d',
              fromStep: 2,
              settings: { maxRetriesPerStep: 3 },
            },
            by: 'lin',
          },
        },
      ],
    },
    RunSubmissionReply: {
      name: 'RunSubmissionReply',
      title: 'Run submission reply',
      summary: 'The id of the run that was started.',
      contentType: 'application/json',
      payload: schemaRef('RunSubmissionReply'),
    },
    RunResumeRequest: {
      name: 'RunResumeRequest',
      title: 'Run resume request',
      summary: 'A run to take over now.',
      contentType: 'application/json',
      payload: schemaRef('RunResumeRequest'),
      examples: [{ name: 'by id', payload: { runId: 'pge-20261123-101500-1a2b3c4d' } }],
    },
    RunResumeReply: {
      name: 'RunResumeReply',
      title: 'Run resume reply',
      summary: 'Who owns the run now, or why it cannot be resumed.',
      contentType: 'application/json',
      payload: schemaRef('RunResumeReply'),
    },
    RunCancelRequest: {
      name: 'RunCancelRequest',
      title: 'Run cancel request',
      summary: 'A run to cancel, who asks and why.',
      contentType: 'application/json',
      payload: schemaRef('RunCancelRequest'),
      examples: [
        {
          name: 'by a person',
          payload: {
            runId: 'pge-20261123-101500-1a2b3c4d',
            by: 'alice',
            reason: 'wrong task',
            ts: '2026-11-23T10:20:00.000Z',
          },
        },
      ],
    },
    RunCancelReply: {
      name: 'RunCancelReply',
      title: 'Run cancel reply',
      summary: 'The coordinator that cancelled the run.',
      contentType: 'application/json',
      payload: schemaRef('RunCancelReply'),
    },
    CoordinatorPing: {
      name: 'CoordinatorPing',
      title: 'Coordinator ping',
      summary: 'Does any coordinator run?',
      contentType: 'application/json',
      payload: schemaRef('CoordinatorPing'),
      examples: [{ name: 'ping', payload: {} }],
    },
    CoordinatorPong: {
      name: 'CoordinatorPong',
      title: 'Coordinator pong',
      summary: 'The coordinator that answered.',
      contentType: 'application/json',
      payload: schemaRef('CoordinatorPong'),
    },
    RunControl: {
      name: 'RunControl',
      title: 'Run command',
      summary: 'A command for one run: interrupt it, with the reason its closing event will give.',
      contentType: 'application/json',
      payload: schemaRef('RunControl'),
    },
    RunApproval: {
      name: 'RunApproval',
      title: 'Decision at a gate',
      summary: "A person's decision at the gate a run waits at (pge approve).",
      contentType: 'application/json',
      payload: schemaRef('RunApproval'),
    },
    CallCancel: {
      name: 'CallCancel',
      title: 'Request cancelled',
      summary: 'A request of a run that its coordinator no longer waits for.',
      contentType: 'application/json',
      payload: schemaRef('CallCancel'),
    },
    WorkerPresence: {
      name: 'WorkerPresence',
      title: 'Worker presence',
      summary:
        'A role worker is there, with its model and the requests it holds (pge worker says it every 2 s). `holding` is newer than the rest: an earlier coordinator refuses a presence that carries it, so coordinators are upgraded before workers (docs/distributed.md).',
      contentType: 'application/json',
      payload: schemaRef('WorkerPresence'),
    },
    MessageRejection: {
      name: 'MessageRejection',
      title: 'Message rejection',
      summary: 'A message that a pge process refused on receive.',
      contentType: 'application/json',
      payload: schemaRef('MessageRejection'),
    },
  };

  const schemas: Record<string, Json> = {
    ...componentSchemas(),
    EventHeaders: {
      type: 'object',
      description: 'NATS headers of an event published to JetStream.',
      properties: {
        'Nats-Msg-Id': {
          type: 'string',
          description:
            "The event's `id`: JetStream stores a message once per id within the stream's duplicate window, so a retried publish is not a second event.",
        },
      },
    },
    WorkHeaders: {
      type: 'object',
      description: 'NATS headers of a work item.',
      properties: {
        'Nats-Msg-Id': {
          type: 'string',
          description:
            "The request's `id`: an item queued again (a resumed run re-asks a call) is stored once.",
        },
        [TRACEPARENT_HEADER]: {
          type: 'string',
          pattern: TRACEPARENT_PATTERN.source,
          description:
            "W3C Trace Context of the coordinator's span that asked (the attempt's, the step's or the run's), when the run is traced: a worker traces its handling of the item under it. A worker that finds it missing or malformed starts a trace of its own.",
        },
      },
    },
    ResultHeaders: {
      type: 'object',
      description: 'NATS headers of a worker result.',
      properties: {
        'Nats-Msg-Id': {
          type: 'string',
          description: '`<requestId>-result`: a request answered twice (after a redelivery) is stored once.',
        },
      },
    },
  };

  const channelMessages = (names: string[]) =>
    Object.fromEntries(names.map((name) => [name, ref(`#/components/messages/${name}`)]));
  const opMessages = (channel: string, names: string[]) =>
    names.map((name) => ref(`#/channels/${channel}/messages/${name}`));
  const eventNames = events.map((e) => e.name);
  const workItemNames = requests.map((e) => workItemName(e.name));

  /** The parameters of an event's subject, `pge.run.{runId}.evt.{type}` and its republished twin. */
  const eventParameters = {
    runId: ref('#/components/parameters/runId'),
    type: {
      description: 'The event type; its dots make it one or more subject tokens.',
      enum: events.map((e) => e.type),
    },
  };

  const channels: Json = {
    runEvents: {
      address: 'pge.run.{runId}.evt.{type}',
      title: 'Events of a run',
      description: [
        'Every event of a run, in the order the coordinator numbered them (`seq` 1, 2, … with no gaps).',
        "The type's dots are subject tokens, so `pge.run.<runId>.evt.>` follows a run and",
        '`pge.run.*.evt.step.>` follows every step event of every run.',
        `Stored in JetStream stream \`${JETSTREAM.events.stream}\` (subjects \`${JETSTREAM.events.subjects}\`).`,
      ].join('\n'),
      parameters: eventParameters,
      messages: channelMessages(eventNames),
      'x-pge-nats': {
        transport: 'jetstream',
        stream: JETSTREAM.events.stream,
        streamSubjects: JETSTREAM.events.subjects,
        msgId: 'the event id',
      },
    },
    storedEvents: {
      address: 'pge.stored.{runId}.evt.{type}',
      title: 'Events of a run, as stored',
      description: [
        `Each event \`${JETSTREAM.events.stream}\` stores, republished by the server as it stores it (JetStream`,
        'RePublish): the same JSON, with headers `Nats-Sequence` (its stream sequence) and `Nats-Subject`',
        '(`pge.run.<runId>.evt.<type>`). How a reader follows runs live without a consumer: read what is',
        "stored by lookups from the stream's leader, then take these from the next stream sequence on. Only the server publishes here.",
      ].join('\n'),
      parameters: eventParameters,
      messages: channelMessages(eventNames),
      'x-pge-nats': { transport: 'core', republishedBy: JETSTREAM.events.stream },
    },
    work: {
      address: 'pge.work.{role}',
      title: 'Work queue of a role',
      description: [
        'Each request event is also queued here for the role that serves it: the same JSON, whose `id` is',
        `the request id. Stored in JetStream stream \`${JETSTREAM.work.stream}\` (subjects`,
        `\`${JETSTREAM.work.subjects}\`) with interest retention: an item is removed once its role's consumer acks it.`,
        'The workers of a role share the durable pull consumer `pge-<role>` (filter `pge.work.<role>`,',
        'explicit ack), so each item goes to one of them. The in-process bus gives the same sharing with',
        'the queue group `pge-<role>`.',
      ].join('\n'),
      parameters: {
        role: { description: 'The role that serves the request.', enum: [...Role.options] },
      },
      messages: channelMessages(workItemNames),
      'x-pge-nats': {
        transport: 'jetstream',
        stream: JETSTREAM.work.stream,
        streamSubjects: JETSTREAM.work.subjects,
        retention: 'interest',
        durableConsumer: 'pge-{role}',
        filterSubject: 'pge.work.{role}',
        ackPolicy: 'explicit',
        roleOfRequest: { ...ROLE_OF_REQUEST },
      },
    },
    runResults: {
      address: 'pge.run.{runId}.result.{role}',
      title: 'Worker results of a run',
      description: [
        "The workers of a role answer every request of a run here, on their role's subject, so that a",
        "credential can allow a worker its own role's results only (see docs/security.md).",
        `Stored in JetStream stream \`${JETSTREAM.results.stream}\` (subjects \`${JETSTREAM.results.subjects}\`).`,
      ].join('\n'),
      parameters: {
        runId: ref('#/components/parameters/runId'),
        role: { description: 'The role of the worker that answers.', enum: [...Role.options] },
      },
      messages: channelMessages(['RoleResult']),
      'x-pge-nats': {
        transport: 'jetstream',
        stream: JETSTREAM.results.stream,
        streamSubjects: JETSTREAM.results.subjects,
        msgId: '<requestId>-result',
      },
    },
    runSubmit: {
      address: 'pge.runs.submit',
      title: 'Run submission',
      description: 'Core NATS request/reply (not stored): a task (or a fork) in, the new run id out.',
      messages: channelMessages(['RunSubmission']),
      'x-pge-nats': { transport: 'core' },
    },
    runSubmitReply: {
      address: null,
      title: 'Reply to a run submission',
      description:
        "The requester's reply subject (a NATS inbox, `_INBOX.…`), chosen per request by the client.",
      messages: channelMessages(['RunSubmissionReply']),
      'x-pge-nats': { transport: 'core' },
    },
    runResume: {
      address: 'pge.runs.resume',
      title: 'Run resume',
      description:
        'Core NATS request/reply (not stored): a run id in, its owner out. Coordinators take the runs of a dead one over on their own when its lease expires; this asks for it now, for a run nobody took over.',
      messages: channelMessages(['RunResumeRequest']),
      'x-pge-nats': { transport: 'core' },
    },
    runResumeReply: {
      address: null,
      title: 'Reply to a run resume request',
      description:
        "The requester's reply subject (a NATS inbox, `_INBOX.…`), chosen per request by the client.",
      messages: channelMessages(['RunResumeReply']),
      'x-pge-nats': { transport: 'core' },
    },
    runCancel: {
      address: 'pge.runs.cancel',
      title: 'Run cancel',
      description:
        'Core NATS request/reply (not stored): every coordinator hears the request; the one that drives the run cancels it (every step running stops, its call cancelled; `run.failed` with reason `cancelled` names who and why) and replies, the others stay silent, so no reply within 5 s means no coordinator drives the run now. Only the `client` credential may publish here.',
      messages: channelMessages(['RunCancelRequest']),
      'x-pge-nats': { transport: 'core' },
    },
    runCancelReply: {
      address: null,
      title: 'Reply to a run cancel request',
      description:
        "The requester's reply subject (a NATS inbox, `_INBOX.…`), chosen per request by the client.",
      messages: channelMessages(['RunCancelReply']),
      'x-pge-nats': { transport: 'core' },
    },
    coordinatorPing: {
      address: 'pge.coordinators.ping',
      title: 'Coordinator ping',
      description:
        'Core NATS request/reply (not stored), answered at once by one coordinator. A submission nobody serves gets "no responders" on an open server, but only silence across the accounts of a secured one; a client pings beside its submission, so that it can tell no coordinator (no answer to the ping either) from a busy one.',
      messages: channelMessages(['CoordinatorPing']),
      'x-pge-nats': { transport: 'core' },
    },
    coordinatorPingReply: {
      address: null,
      title: 'Reply to a coordinator ping',
      description:
        "The requester's reply subject (a NATS inbox, `_INBOX.…`), chosen per request by the client.",
      messages: channelMessages(['CoordinatorPong']),
      'x-pge-nats': { transport: 'core' },
    },
    runControl: {
      address: 'pge.run.{runId}.control',
      title: 'Commands for a run',
      description:
        'Core NATS (not stored). The coordinator that owns the run acts on it; the others ignore it. The persistence worker sends an interrupt when a log cannot be written, since the log is not best-effort.',
      parameters: { runId: ref('#/components/parameters/runId') },
      messages: channelMessages(['RunControl']),
      'x-pge-nats': { transport: 'core' },
    },
    runApproval: {
      address: 'pge.run.{runId}.approval',
      title: "Decisions at a run's gates",
      description:
        'Core NATS (not stored). Only clients may publish here. The coordinator that owns the run applies a decision for the gate (and request) it waits at and records approval.decided; the others ignore it.',
      parameters: { runId: ref('#/components/parameters/runId') },
      messages: channelMessages(['RunApproval']),
      'x-pge-nats': { transport: 'core' },
    },
    callCancels: {
      address: 'pge.run.{runId}.cancel',
      title: 'Cancelled requests of a run',
      description:
        'Core NATS (not stored). Every worker listening hears every cancel (no queue group): the one holding the request aborts its model call (the HTTP request included) and publishes no result; one that takes the request from the queue later skips it. A worker that started after the cancel answers the request, and the coordinator rejects that result as late.',
      parameters: { runId: ref('#/components/parameters/runId') },
      messages: channelMessages(['CallCancel']),
      'x-pge-nats': { transport: 'core' },
    },
    workerPresence: {
      address: 'pge.workers.{role}',
      title: 'Role workers and their models',
      description:
        "Core NATS (not stored). Every role worker says here, every 2 s, that it is there and which model serves its role, on its role's subject (a credential allows a worker its own role's only). Coordinators name the models of the workers they heard in the last 6 s in run.started, and refuse a submission with a cost budget while a worker they heard has no price for its model.",
      parameters: {
        role: { description: 'The role the worker serves.', enum: [...Role.options] },
      },
      messages: channelMessages(['WorkerPresence']),
      'x-pge-nats': { transport: 'core' },
    },
    rejections: {
      address: 'pge.errors.rejected.{reporter}',
      title: 'Rejected messages',
      description:
        "Every pge process validates each message it receives against its subject's schema; an invalid one is not handed to a handler but reported here, on the subject of the reporting process's role (subscribe to `pge.errors.rejected.*` for every report). The persistence worker also reports here each valid event it cannot place in a log (a run with no run.started, an event after the run's closing event, a predecessor that never reached the stream), and acknowledges it. Core NATS (not stored): only current subscribers see a report.",
      parameters: {
        reporter: {
          description:
            "The role of the reporting process on a deployment `pge nats-config` wrote (each credential may report on its own role's subject only); `pge` for a process without such a credential.",
        },
      },
      messages: channelMessages(['MessageRejection']),
      'x-pge-nats': { transport: 'core' },
    },
  };

  const submitReply = {
    channel: ref('#/channels/runSubmitReply'),
    messages: opMessages('runSubmitReply', ['RunSubmissionReply']),
  };
  const operations: Json = {
    publishRunEvent: {
      action: 'send',
      channel: ref('#/channels/runEvents'),
      title: 'Publish a run event',
      summary: "The coordinator, the only writer of a run's events, publishes each one.",
      description: [
        'The coordinator stamps each event with `id` (`<runId>-<seq>-<random>`), `seq` and `ts` and publishes',
        'it on `pge.run.<runId>.evt.<type>` with the header `Nats-Msg-Id: <runId>-<seq>`, so a publish retried',
        'after a lost acknowledgement is stored once, and a run holds one event per seq across a coordinator',
        'takeover. Nobody else publishes on these subjects.',
      ].join('\n'),
      tags: [tag('coordinator')],
      messages: opMessages('runEvents', eventNames),
    },
    enqueueWork: {
      action: 'send',
      channel: ref('#/channels/work'),
      title: 'Queue a request for a role',
      summary: 'The coordinator queues every request event on the work queue of the role that serves it.',
      tags: [tag('coordinator')],
      messages: opMessages('work', workItemNames),
    },
    receiveResults: {
      action: 'receive',
      channel: ref('#/channels/runResults'),
      title: 'Take the results of a run',
      summary: 'The coordinator turns each result into events and a statechart event.',
      description: [
        'For each result the coordinator records one `model.call.completed` per call, then the event of the',
        'phase (or `role.failed`). A result is applied only when it answers a call the coordinator has',
        'pending, for that run, from the role the request is for, and only once: anything else (a second',
        'answer to a redelivered work item, an unknown request id) is recorded as `result.rejected` and',
        'reported on `pge.errors.rejected`, never applied.',
      ].join('\n'),
      tags: [tag('coordinator')],
      messages: opMessages('runResults', ['RoleResult']),
    },
    acceptSubmission: {
      action: 'receive',
      channel: ref('#/channels/runSubmit'),
      title: 'Start a submitted run',
      summary: 'The coordinator starts the run and replies with its id.',
      description:
        'Coordinators share the subject as the queue group `pge-coordinator`, so each submission starts one run. The reply comes once the run has started; its events then follow on `pge.run.<runId>.evt.>`.',
      tags: [tag('coordinator')],
      messages: opMessages('runSubmit', ['RunSubmission']),
      reply: submitReply,
    },
    takeWork: {
      action: 'receive',
      channel: ref('#/channels/work'),
      title: 'Take a work item',
      summary: "A role worker takes the next request from its role's work queue.",
      description: [
        'Workers of a role share the durable pull consumer `pge-<role>` on stream `PGE_WORK` (filter',
        '`pge.work.<role>`, explicit ack), so each item goes to one worker; scale a role by starting more.',
        "Ack an item after its result is published. An item not acked within the consumer's ack wait is",
        'delivered again, possibly to another worker (signal progress, `+WPI`, while a long call runs); the',
        "coordinator counts only the first result of a request. pge's workers terminate an item that does",
        'not validate (redelivery would only repeat it) and report it on `pge.errors.rejected`. Workers are',
        'stateless: each request carries the whole input of its call.',
      ].join('\n'),
      tags: [tag('worker')],
      messages: opMessages('work', workItemNames),
    },
    publishResult: {
      action: 'send',
      channel: ref('#/channels/runResults'),
      title: 'Answer a request',
      summary: 'A role worker publishes one result per request.',
      description: [
        "The result goes to `pge.run.<runId>.result.<role>` with `requestId` = the request's `id`, `runId` = the",
        "request's `runId`, and the header `Nats-Msg-Id: <requestId>-result`, so a request answered twice",
        'is stored once. A request that cannot be answered gets `status: error`, never silence.',
      ].join('\n'),
      tags: [tag('worker')],
      messages: opMessages('runResults', ['RoleResult']),
    },
    recordEvents: {
      action: 'receive',
      channel: ref('#/channels/runEvents'),
      title: 'Record events in the log',
      summary: "The persistence actor appends every run's events to that run's markdown log.",
      description: "It follows `pge.run.*.evt.>` and is the one ordered writer of each run's log.",
      tags: [tag('persistence')],
      messages: opMessages('runEvents', eventNames),
    },
    submitRun: {
      action: 'send',
      channel: ref('#/channels/runSubmit'),
      title: 'Submit a run',
      summary: 'A client submits a task by request/reply and gets the run id back.',
      description:
        'An invalid submission gets no reply (the request times out); it is reported on `pge.errors.rejected`.',
      tags: [tag('integrator')],
      messages: opMessages('runSubmit', ['RunSubmission']),
      reply: submitReply,
    },
    resumeRun: {
      action: 'send',
      channel: ref('#/channels/runResume'),
      title: 'Ask for a run to be taken over',
      summary: 'A client asks the deployment to take a run over now, and gets its owner back.',
      tags: [tag('integrator')],
      messages: opMessages('runResume', ['RunResumeRequest']),
      reply: {
        channel: ref('#/channels/runResumeReply'),
        messages: opMessages('runResumeReply', ['RunResumeReply']),
      },
    },
    cancelRun: {
      action: 'send',
      channel: ref('#/channels/runCancel'),
      title: 'Cancel a run',
      summary:
        'A person (`pge cancel`) asks for a run to be cancelled, and gets back the coordinator that did.',
      tags: [tag('integrator')],
      messages: opMessages('runCancel', ['RunCancelRequest']),
      reply: {
        channel: ref('#/channels/runCancelReply'),
        messages: opMessages('runCancelReply', ['RunCancelReply']),
      },
    },
    takeCancel: {
      action: 'receive',
      channel: ref('#/channels/runCancel'),
      title: 'Cancel a run on request',
      summary:
        'The coordinator that drives the run cancels it and replies; every other coordinator stays silent.',
      tags: [tag('coordinator')],
      messages: opMessages('runCancel', ['RunCancelRequest']),
      reply: {
        channel: ref('#/channels/runCancelReply'),
        messages: opMessages('runCancelReply', ['RunCancelReply']),
      },
    },
    pingCoordinators: {
      action: 'send',
      channel: ref('#/channels/coordinatorPing'),
      title: 'Ask whether a coordinator runs',
      summary:
        'A client that submits a run pings the coordinators beside it; no answer means that none runs.',
      tags: [tag('integrator')],
      messages: opMessages('coordinatorPing', ['CoordinatorPing']),
      reply: {
        channel: ref('#/channels/coordinatorPingReply'),
        messages: opMessages('coordinatorPingReply', ['CoordinatorPong']),
      },
    },
    answerPings: {
      action: 'receive',
      channel: ref('#/channels/coordinatorPing'),
      title: 'Answer a ping',
      summary: 'A coordinator (queue group `pge-coordinator`) replies with its name, at once.',
      tags: [tag('coordinator')],
      messages: opMessages('coordinatorPing', ['CoordinatorPing']),
      reply: {
        channel: ref('#/channels/coordinatorPingReply'),
        messages: opMessages('coordinatorPingReply', ['CoordinatorPong']),
      },
    },
    takeRunOver: {
      action: 'receive',
      channel: ref('#/channels/runResume'),
      title: 'Take a run over on request',
      summary:
        'A coordinator (queue group `pge-coordinator`) takes the run over unless a live one drives it, and replies with the owner.',
      tags: [tag('coordinator')],
      messages: opMessages('runResume', ['RunResumeRequest']),
      reply: {
        channel: ref('#/channels/runResumeReply'),
        messages: opMessages('runResumeReply', ['RunResumeReply']),
      },
    },
    followRun: {
      action: 'receive',
      channel: ref('#/channels/runEvents'),
      title: 'Follow a run',
      summary: "A client follows a run's events in order, from the start.",
      description: [
        `Lookups from the leader of stream \`${JETSTREAM.events.stream}\` (\`$JS.API.STREAM.MSG.GET\` with \`next_by_subj\`: \`pge.run.<runId>.evt.>\`, from`,
        'stream sequence 1) read the events in order, including those published before the reader',
        'started, and `pge.stored.<runId>.evt.>` says what is stored next; a client or observer credential',
        'may make no consumer. A run ends with `run.completed` or `run.failed`.',
      ].join('\n'),
      tags: [tag('integrator')],
      messages: opMessages('runEvents', eventNames),
    },
    watchStoredEvents: {
      action: 'receive',
      channel: ref('#/channels/storedEvents'),
      title: 'Follow what is stored',
      summary: 'A reader takes each event as the stream stores it, with its stream sequence.',
      tags: [tag('integrator')],
      messages: opMessages('storedEvents', eventNames),
    },
    sendRunControl: {
      action: 'send',
      channel: ref('#/channels/runControl'),
      title: 'Interrupt a run',
      summary: 'The persistence worker (or an operator) asks the run’s coordinator to stop it.',
      tags: [tag('persistence'), tag('integrator')],
      messages: opMessages('runControl', ['RunControl']),
    },
    receiveRunControl: {
      action: 'receive',
      channel: ref('#/channels/runControl'),
      title: 'Act on a command for a run',
      summary: 'The coordinator that owns the run interrupts it; its closing event gives the reason.',
      tags: [tag('coordinator')],
      messages: opMessages('runControl', ['RunControl']),
    },
    sendRunApproval: {
      action: 'send',
      channel: ref('#/channels/runApproval'),
      title: 'Decide a gate',
      summary: 'A person (pge approve, or any client) approves or rejects the gate a run waits at.',
      tags: [tag('integrator')],
      messages: opMessages('runApproval', ['RunApproval']),
    },
    receiveRunApproval: {
      action: 'receive',
      channel: ref('#/channels/runApproval'),
      title: 'Apply a decision at a gate',
      summary: 'The coordinator that owns the run settles the gate it waits at and records approval.decided.',
      tags: [tag('coordinator')],
      messages: opMessages('runApproval', ['RunApproval']),
    },
    sendCallCancel: {
      action: 'send',
      channel: ref('#/channels/callCancels'),
      title: 'Cancel a request',
      summary:
        'The coordinator stopped waiting for a request: its call actor was stopped (an interrupt, say).',
      tags: [tag('coordinator')],
      messages: opMessages('callCancels', ['CallCancel']),
    },
    receiveCallCancel: {
      action: 'receive',
      channel: ref('#/channels/callCancels'),
      title: 'Drop a cancelled request',
      summary: 'A role worker aborts the model call of a request it holds, or skips it when it comes later.',
      tags: [tag('worker')],
      messages: opMessages('callCancels', ['CallCancel']),
    },
    sendWorkerPresence: {
      action: 'send',
      channel: ref('#/channels/workerPresence'),
      title: 'Say a worker is there',
      summary: 'A role worker says, every 2 s, that it is there and which model serves its role.',
      tags: [tag('worker')],
      messages: opMessages('workerPresence', ['WorkerPresence']),
    },
    receiveWorkerPresence: {
      action: 'receive',
      channel: ref('#/channels/workerPresence'),
      title: 'Know the workers and their models',
      summary:
        'A coordinator keeps the workers it heard lately: their models go into run.started, and an unpriced one refuses a cost budget.',
      tags: [tag('coordinator')],
      messages: opMessages('workerPresence', ['WorkerPresence']),
    },
    watchRejections: {
      action: 'receive',
      channel: ref('#/channels/rejections'),
      title: 'Watch rejected messages',
      summary: 'Any process can subscribe to see which messages were refused, on which subject, and why.',
      tags: [tag('integrator')],
      messages: opMessages('rejections', ['MessageRejection']),
    },
    reportRejection: {
      action: 'send',
      channel: ref('#/channels/rejections'),
      title: 'Report a rejected message',
      summary: 'The bus of every pge process reports each invalid message it receives.',
      description:
        'The invalid message is not handed to any handler. A rejection report that is itself invalid is logged, never re-published, so reports cannot loop.',
      tags: [tag('coordinator'), tag('worker'), tag('persistence')],
      messages: opMessages('rejections', ['MessageRejection']),
    },
  };

  return {
    asyncapi: '3.0.0',
    info: {
      title: 'pge',
      version: pkg.version,
      description: [
        'The subjects and payloads of pge, the Planner–Generator–Evaluator harness, on NATS: enough to',
        'submit runs, follow their events and take a role from another language. See docs/integration.md.',
        '',
        'Generated from the zod schemas by `npx tsx scripts/gen-asyncapi.ts`; do not edit by hand.',
        "Payload schemas are JSON Schema draft-07, converted with zod's `io: 'output'`: the shape pge",
        'publishes (the parsed value of every message), with every object closed. A message that follows',
        'them is accepted by pge, except for the rules JSON Schema cannot state, which the schema',
        'descriptions name. Every message is validated when published and when received.',
      ].join('\n'),
      license: { name: 'MIT' },
      tags: Object.entries(TAGS).map(([name, description]) => ({ name, description })),
    },
    defaultContentType: 'application/json',
    servers: {
      nats: {
        host: '{host}',
        protocol: 'nats',
        title: 'NATS with JetStream',
        description:
          'pge processes connect to NATS_URL (default nats://localhost:4222); set `host` to its host:port. JetStream must be enabled.',
        variables: {
          host: { default: natsHost, description: 'host:port of the NATS server (NATS_URL).' },
        },
      },
    },
    channels,
    operations,
    components: {
      schemas,
      messages,
      parameters: {
        runId: {
          description: 'The run id: letters, digits, "-" and "_" only (see SafeId).',
        },
      },
    },
  };
}

/** The document as the committed YAML text. */
export function renderAsyncApi(options: AsyncApiOptions = {}): string {
  const header = '# Generated by scripts/gen-asyncapi.ts from the zod schemas. Do not edit by hand.\n';
  return header + stringify(buildAsyncApi(options), { aliasDuplicateObjects: false, lineWidth: 0 });
}

function main(argv: string[]): void {
  let out = DEFAULT_OUT;
  let natsUrl: string | undefined;
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i];
    const value = argv[i + 1];
    if ((flag === '--out' || flag === '--nats-url') && value !== undefined) {
      if (flag === '--out') out = resolve(value);
      else natsUrl = value;
      i++;
    } else {
      throw new Error(
        `usage: npx tsx scripts/gen-asyncapi.ts [--out <file>] [--nats-url <url>] (got "${flag}")`,
      );
    }
  }
  writeFileSync(out, renderAsyncApi(natsUrl === undefined ? {} : { natsUrl }));
  console.log(`wrote ${out}`);
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url))
  main(process.argv.slice(2));
