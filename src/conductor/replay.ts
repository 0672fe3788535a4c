import { ResumeError } from '../errors.js';
import { INTERRUPTED, type RunStopEvent } from '../machines/run-context.js';
import type {
  ApprovalDecision,
  RoleRequest,
  RoleResult,
  RunEvent,
  RunEventDraft,
  RunEventOf,
  RunEventType,
  Usage,
} from '../schemas/index.js';
import { addUsage, isRoleRequest, RunEvent as RunEventSchema, ZERO_USAGE } from '../schemas/index.js';

/**
 * Deterministic replay of a recorded run, the idiom of durable-execution systems: a resumed run
 * starts its charts again with the recorded input, answers each call from the recorded events
 * instead of a model, and checks that every event the charts produce again equals the recorded
 * one. When the recorded events run out the run is live, and only a request recorded without its
 * answer (in flight at the crash) is asked again.
 *
 * This module reads the recorded events (from a log, or from a stream) into what the coordinator
 * replays: the answers by request id, and the events the charts do not produce, which the replay
 * takes as they are (`facts`): the model calls the workers reported, stray results, cancels,
 * earlier resumes, and the pieces of an answer lost in a crash.
 */

/**
 * Where a replay and its log part: the seq of the first recorded event that the replay did not
 * produce again (or the seq after the last, when the replay goes on past the log), and how.
 */
export class ReplayDivergence extends ResumeError {
  constructor(
    message: string,
    readonly seq: number,
    readonly problem: string,
    /** The replay produced every recorded event, then went on past them (or asked what they do not answer). */
    readonly beyondLog = false,
  ) {
    super(message);
  }
}

/** A request's answer as the log holds it: the worker's result, what its calls cost, when it came. */
export interface RecordedAnswer {
  result: RoleResult['result'];
  /** Usage of every call the request cost, those of an attempt lost in a crash included. */
  usage: Usage;
  /** When the answer arrived, in the run's time (epoch ms less the time the run was paused). */
  finishedAt: number;
  /** The time of the answer's event, epoch ms. */
  receivedAt: number;
  /**
   * The seq of the answer's first event (its first model call, else the answer itself): a replay
   * hands the answer out when it reaches it, as the answer came then.
   */
  turn: number;
}

/** A run's recorded events, read for a replay. */
export interface RecordedRun {
  readonly runId: string;
  readonly started: RunEventOf<'run.started'>;
  /** Every recorded event, in seq order (`events[i].seq === i + 1`). */
  readonly events: readonly RunEvent[];
  /** Seqs of the events the charts do not produce: the replay takes them as recorded. */
  readonly facts: ReadonlySet<number>;
  /** Answered requests, by request id. */
  readonly answers: ReadonlyMap<string, RecordedAnswer>;
  /** Usage of the calls recorded for each request, by request id. */
  readonly usage: ReadonlyMap<string, Usage>;
  /**
   * A person's decisions at the run's gates, by the id of the `approval.requested` they answer,
   * with the seq of their `approval.decided`.
   */
  readonly decisions: ReadonlyMap<string, { decision: ApprovalDecision; seq: number }>;
  /** Epoch ms of the last recorded event: the last moment the run is known to have been alive. */
  readonly lastAt: number;
  /** Time the run spent paused across earlier resumes (the sum of their `pausedMs`). */
  readonly pausedMs: number;
}

/** Events that close a run: a log that ends with one has nothing to resume. */
const TERMINAL: ReadonlySet<RunEventType> = new Set(['run.completed', 'run.failed']);

/** Events that record something outside the charts: never produced again by a replay. */
const FACTS: ReadonlySet<RunEventType> = new Set([
  'model.call.completed',
  'result.rejected',
  'request.cancelled',
  'run.resumed',
]);

/** The answer events of each phase's call (`run-charts.ts` records them), besides `role.failed`. */
type AnswerEvent = RunEventOf<
  | 'plan.created'
  | 'step.contract.proposed'
  | 'step.contract.reviewed'
  | 'step.work.completed'
  | 'step.work.invalid'
  | 'step.evaluation.completed'
  | 'step.evaluation.invalid'
  | 'role.failed'
>;

/** The request an answer event answers, by type. */
const REQUEST_OF_ANSWER: Record<Exclude<AnswerEvent['type'], 'role.failed'>, RoleRequest['type']> = {
  'plan.created': 'plan.requested',
  'step.contract.proposed': 'step.contract.requested',
  'step.contract.reviewed': 'step.review.requested',
  'step.work.completed': 'step.work.requested',
  'step.work.invalid': 'step.work.requested',
  'step.evaluation.completed': 'step.evaluation.requested',
  'step.evaluation.invalid': 'step.evaluation.requested',
};

/** An answer event; a given plan's `plan.created` answers no request (the chart records it, no planner was asked). */
const isAnswer = (event: RunEvent): event is AnswerEvent =>
  event.type === 'role.failed' ||
  (Object.hasOwn(REQUEST_OF_ANSWER, event.type) &&
    !(event.type === 'plan.created' && event.payload.given !== undefined));

const epochMs = (event: RunEvent): number => Date.parse(event.ts);

/** The step a request is for (a plan request: none), as its answer event names it. */
const stepIdOf = (payload: { input: object }): string | null =>
  (payload.input as { step?: { id: string } }).step?.id ?? null;

/** A request waiting for its answer while the log is read, with the plan's cut if it had one. */
interface OpenRequest {
  request: RoleRequest;
  truncation: RunEventOf<'plan.truncated'> | null;
}

/**
 * The open request an answer event answers: `role.failed` names it; another answer, by its type,
 * answers its step's request of that type (a step makes one call at a time; the plan is asked for
 * while no step runs).
 */
function answered(open: ReadonlyMap<string, OpenRequest>, event: AnswerEvent): OpenRequest | undefined {
  if (event.type === 'role.failed') return open.get(event.payload.requestId);
  const type = REQUEST_OF_ANSWER[event.type];
  const stepId = 'stepId' in event.payload ? event.payload.stepId : null;
  for (const o of open.values())
    if (o.request.type === type && stepIdOf(o.request.payload) === stepId) return o;
  return undefined;
}

/** The worker's result behind an answer event: what the call actor turned into that event. */
function resultOf(
  answer: AnswerEvent,
  truncation: RunEventOf<'plan.truncated'> | null,
): RoleResult['result'] {
  switch (answer.type) {
    case 'plan.created': {
      const cut = truncation && {
        from: truncation.payload.from,
        droppedStepIds: truncation.payload.droppedStepIds,
      };
      return { status: 'ok', phase: 'plan', output: { plan: answer.payload.plan, truncation: cut } };
    }
    case 'step.contract.proposed':
      return { status: 'ok', phase: 'contract', output: answer.payload.proposal };
    case 'step.contract.reviewed':
      return { status: 'ok', phase: 'contract_review', output: answer.payload.review };
    case 'step.work.completed': {
      const { work, validation } = answer.payload;
      return {
        status: 'ok',
        phase: 'work',
        output: work,
        ...(validation === undefined ? {} : { validation }),
      };
    }
    case 'step.evaluation.completed':
      return { status: 'ok', phase: 'evaluation', output: answer.payload.evaluation };
    case 'step.work.invalid':
    case 'step.evaluation.invalid': {
      const phase = answer.type === 'step.work.invalid' ? 'work' : 'evaluation';
      const error = { name: 'InvalidOutputError', message: answer.payload.problem, retryable: false };
      return { status: 'error', phase, error, raw: answer.payload.raw };
    }
    case 'role.failed': {
      const { phase, error, raw } = answer.payload;
      return { status: 'error', phase, error, raw };
    }
  }
}

/**
 * What reading a run's events for a replay gathers, event by event (`readRecordedRun`): the
 * answers by request, their usage, the gates' decisions, the facts, and the requests still open.
 */
class RunReading {
  readonly facts = new Set<number>();
  readonly answers = new Map<string, RecordedAnswer>();
  readonly usage = new Map<string, Usage>();
  readonly decisions = new Map<string, { decision: ApprovalDecision; seq: number }>();
  /** Time the run spent paused across the resumes read so far. */
  pausedMs = 0;
  /** When each request's latest recorded call came, in run time. */
  private readonly lastCallAt = new Map<string, number>();
  /** The seq of each request's first recorded call since it was (last) asked. */
  private readonly firstCallSeq = new Map<string, number>();
  /** Requests still waiting for their answer, by id: steps side by side each have one. */
  private readonly open = new Map<string, OpenRequest>();

  constructor(private readonly fail: (message: string) => never) {}

  read(event: RunEvent): void {
    if (FACTS.has(event.type)) this.facts.add(event.seq);
    if (event.type === 'model.call.completed') this.modelCall(event);
    else if (event.type === 'request.cancelled') this.open.delete(event.payload.requestId);
    else if (event.type === 'approval.decided') {
      const { requestId, decision, reason, by } = event.payload;
      this.decisions.set(requestId, { decision: { decision, reason, by }, seq: event.seq });
    } else if (event.type === 'run.resumed') this.resumed(event);
    else if (event.type === 'plan.truncated') this.planTruncated(event);
    else if (isRoleRequest(event)) this.request(event);
    else if (isAnswer(event)) this.answer(event);
  }

  /**
   * The end of the events: in flight at the crash, a cut the harness made of a plan whose
   * plan.created was lost is part of the lost answer, which the repeated call gives again.
   */
  finish(): void {
    const inFlightPlan = this.openPlan();
    if (inFlightPlan?.truncation) this.facts.add(inFlightPlan.truncation.seq);
  }

  private openPlan(): OpenRequest | undefined {
    return [...this.open.values()].find((o) => o.request.type === 'plan.requested');
  }

  private modelCall(event: RunEventOf<'model.call.completed'>): void {
    const { requestId, promptTokens, completionTokens, costUsd } = event.payload;
    const call = { promptTokens, completionTokens, costUsd, calls: 1 };
    this.usage.set(requestId, addUsage(this.usage.get(requestId) ?? ZERO_USAGE, call));
    this.lastCallAt.set(requestId, epochMs(event) - this.pausedMs);
    if (!this.firstCallSeq.has(requestId)) this.firstCallSeq.set(requestId, event.seq);
  }

  private resumed(event: RunEventOf<'run.resumed'>): void {
    // A plan cut by the harness whose plan.created the crash lost: the repeated call cuts it again.
    const plan = this.openPlan();
    if (plan?.truncation && event.payload.repeated.includes(plan.request.id)) {
      this.facts.add(plan.truncation.seq);
      plan.truncation = null;
    }
    // Asked again: its answer, when it comes, came after this.
    for (const id of event.payload.repeated) this.firstCallSeq.delete(id);
    this.pausedMs += event.payload.pausedMs;
  }

  private planTruncated(event: RunEventOf<'plan.truncated'>): void {
    const plan = this.openPlan();
    if (plan === undefined) this.fail(`plan.truncated at seq ${event.seq} follows no plan request`);
    else plan.truncation = event;
  }

  private request(event: RoleRequest): void {
    // A step makes one call at a time: its request is answered or cancelled before its next.
    const stepId = stepIdOf(event.payload);
    for (const o of this.open.values())
      if (stepIdOf(o.request.payload) === stepId)
        this.fail(
          `${event.type} at seq ${event.seq} while request ${o.request.id} still waits for its answer`,
        );
    this.open.set(event.id, { request: event, truncation: null });
  }

  private answer(event: AnswerEvent): void {
    const request = answered(this.open, event);
    const expected = event.type === 'role.failed' ? request?.request.type : REQUEST_OF_ANSWER[event.type];
    if (request === undefined || request.request.type !== expected)
      this.fail(`${event.type} at seq ${event.seq} answers no open request`);
    const id = request.request.id;
    this.answers.set(id, {
      result: resultOf(event, request.truncation),
      usage: this.usage.get(id) ?? ZERO_USAGE,
      // A result is stamped when it arrives, on its model calls; one without calls, on its answer.
      finishedAt: this.lastCallAt.get(id) ?? epochMs(event) - this.pausedMs,
      receivedAt: epochMs(event),
      turn: this.firstCallSeq.get(id) ?? event.seq,
    });
    this.open.delete(id);
  }
}

/**
 * Reads a run's recorded events for a replay. Throws `ResumeError` when they cannot be resumed:
 * none, not starting with `run.started`, ending with the run's closing event, or an answer that no
 * open request asked for. `source` names them in errors (the log's path).
 */
export function readRecordedRun(
  events: readonly RunEvent[],
  source: string,
  { ended = false }: { ended?: boolean } = {},
): RecordedRun {
  const fail = (message: string): never => {
    throw new ResumeError(`cannot ${ended ? 'replay' : 'resume'} ${source}: ${message}`);
  };
  const first = events[0];
  if (first === undefined) return fail('it holds no event');
  if (first.type !== 'run.started') return fail(`its first event is ${first.type}, not run.started`);
  const last = events.at(-1)!;
  if (TERMINAL.has(last.type) !== ended)
    fail(
      ended
        ? `run ${first.runId} has not ended (its last event is ${last.type} at seq ${last.seq}): resume it instead`
        : `run ${first.runId} has already ended (${last.type} at seq ${last.seq}); there is nothing to resume`,
    );
  const reading = new RunReading(fail);
  for (const event of events) reading.read(event);
  reading.finish();
  const { facts, answers, usage, decisions, pausedMs } = reading;
  return {
    runId: first.runId,
    started: first,
    events,
    facts,
    answers,
    usage,
    decisions,
    lastAt: epochMs(last),
    pausedMs,
  };
}

/**
 * The cursor of one replay: hands out the recorded events in order as the charts produce them
 * again. Before each produced event it passes the facts recorded ahead of it to `onFact`.
 */
export class Replay {
  readonly recorded: RecordedRun;
  readonly #onFact: (event: RunEvent) => void;
  /** Index of the next recorded event; run.started is taken as the run's input, not produced again. */
  #next = 1;

  constructor(recorded: RecordedRun, onFact: (event: RunEvent) => void) {
    this.recorded = recorded;
    this.#onFact = onFact;
  }

  /** The seq of the last recorded event handed out. */
  get seq(): number {
    return this.#next;
  }

  /**
   * The recorded event that `draft` produces again, or null when the recorded events the charts
   * produce have run out (the draft is the run's first live event). Throws `ResumeError` when the
   * draft differs from the recorded event.
   */
  match(draft: RunEventDraft): RunEvent | null {
    const { events, facts } = this.recorded;
    while (this.#next < events.length && facts.has(this.#next + 1)) this.#onFact(events[this.#next++]!);
    const recorded = events[this.#next];
    if (recorded === undefined) return null;
    const problem = difference(withLegacyInFlight(draft, recorded), withLegacyInterruptReason(recorded));
    if (problem !== null) throw this.#disagree(recorded.seq, problem);
    this.#next++;
    return recorded;
  }

  /** Takes the remaining recorded events, which must all be facts: the replay is over. */
  finish(): void {
    const { events, facts } = this.recorded;
    for (; this.#next < events.length; this.#next++) {
      const event = events[this.#next]!;
      if (!facts.has(event.seq))
        throw this.#disagree(event.seq, `the log has ${event.type} here, which the replay did not produce`);
      this.#onFact(event);
    }
  }

  #disagree(seq: number, problem: string): ReplayDivergence {
    return new ReplayDivergence(
      `cannot resume run ${this.recorded.runId}: the log and its replay disagree at seq ${seq}: ${problem}. ` +
        'Nothing was asked of a model or written. Resume it with the version of pge that wrote it ' +
        '(and, if its run.started records no thresholds, the defaultThresholds and fallbackThreshold it ran with)',
      seq,
      problem,
    );
  }

  /** The replay went on where the log ends, or asked what the log does not answer. */
  beyond(problem: string): ReplayDivergence {
    const seq = this.#next + 1;
    return new ReplayDivergence(
      `the replay of run ${this.recorded.runId} parts from its log at seq ${seq}: ${problem}`,
      seq,
      problem,
      true,
    );
  }

  /**
   * When all the log holds from here is the run interrupted or cancelled while it waited (the
   * facts of its cancelled calls, then `run.failed` for `interrupted` or `cancelled`): the event
   * that stopped it, with the reason it was given (and for a cancel, who asked). Undefined when the
   * log holds anything else. A stop reaches a run only while it waits for an answer or a
   * decision, so this is where a replay stops it the same way.
   */
  interruption(): RunStopEvent | undefined {
    const { events, facts } = this.recorded;
    let next = this.#next;
    while (next < events.length && facts.has(next + 1)) next++;
    const closing = events[next];
    if (next !== events.length - 1 || closing?.type !== 'run.failed') return undefined;
    const { reason, interruptReason, cancelled } = withLegacyInterruptReason(closing).payload;
    if (reason === 'cancelled' && cancelled !== undefined) {
      const { by, reason: why } = cancelled;
      return why === null ? { type: 'cancel', by } : { type: 'cancel', by, reason: why };
    }
    if (reason !== 'interrupted') return undefined;
    return interruptReason == null ? { type: 'interrupt' } : { type: 'interrupt', reason: interruptReason };
  }

  /**
   * The recorded events from the cursor up to the next one the charts produce: the facts ahead of
   * it, then it (none at the log's end).
   */
  ahead(): RunEvent[] {
    const { events, facts } = this.recorded;
    const upcoming: RunEvent[] = [];
    for (let next = this.#next; next < events.length; next++) {
      upcoming.push(events[next]!);
      if (!facts.has(next + 1)) break;
    }
    return upcoming;
  }

  /** True when only facts are left: the charts have produced every recorded event. */
  get atEnd(): boolean {
    const last = this.ahead().at(-1);
    return last === undefined || this.recorded.facts.has(last.seq);
  }

  /** True once every recorded event was handed out. */
  get done(): boolean {
    return this.#next >= this.recorded.events.length;
  }
}

/**
 * Exists only for logs written before `run.failed` carried `interruptReason`: the closing event of
 * such a log's interrupted run, given the field as pge records it now, read back from its message
 * (`the run was interrupted: <reason>`, or no reason). Every other event is returned as it is, so
 * a log with the field is read from the field alone.
 */
function withLegacyInterruptReason<E extends RunEvent>(event: E): E {
  if (event.type !== 'run.failed') return event;
  const { payload } = event as RunEventOf<'run.failed'>;
  if (payload.reason !== 'interrupted' || payload.interruptReason !== undefined) return event;
  const reason =
    payload.message === INTERRUPTED
      ? null
      : payload.message.startsWith(`${INTERRUPTED}: `)
        ? payload.message.slice(INTERRUPTED.length + 2)
        : undefined;
  return reason === undefined ? event : { ...event, payload: { ...payload, interruptReason: reason } };
}

/**
 * Exists only for logs written before `run.failed` listed the steps in flight (`inFlight`, #34):
 * the draft without that field when the recorded closing event has none, so that such a log
 * replays. A log with the field is compared on it.
 */
function withLegacyInFlight(draft: RunEventDraft, recorded: RunEvent): RunEventDraft {
  if (
    draft.type !== 'run.failed' ||
    recorded.type !== 'run.failed' ||
    recorded.payload.inFlight !== undefined
  )
    return draft;
  const { inFlight: _, ...payload } = draft.payload;
  return { ...draft, payload };
}

/** Where a produced draft differs from the recorded event, in words, or null when it does not. */
function difference(draft: RunEventDraft, recorded: RunEvent): string | null {
  if (draft.type !== recorded.type) return `the log has ${recorded.type}, the replay produced ${draft.type}`;
  // Parsed as the log's events were (zod's output, without undefined fields), so that only
  // what the log would hold is compared.
  const parsed = RunEventSchema.safeParse({ ...envelopeOf(recorded), ...draft });
  if (!parsed.success) return `the replay produced an invalid ${draft.type}`;
  const path = firstDifference(parsed.data.payload, recorded.payload, 'payload');
  return path === null ? null : `${recorded.type} differs at ${path}`;
}

const envelopeOf = ({ id, runId, seq, ts }: RunEvent) => ({ id, runId, seq, ts });

/** The path of the first difference between two JSON values, or null when they are equal. */
function firstDifference(a: unknown, b: unknown, path: string): string | null {
  if (Object.is(a, b)) return null;
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return path;
  if (Array.isArray(a) !== Array.isArray(b)) return path;
  const keys = new Set([...Object.keys(a), ...Object.keys(b)]);
  for (const key of keys) {
    const at = Array.isArray(a) ? `${path}[${key}]` : `${path}.${key}`;
    const found = firstDifference(
      (a as Record<string, unknown>)[key],
      (b as Record<string, unknown>)[key],
      at,
    );
    if (found !== null) return found;
  }
  return null;
}
