import { setTimeout as sleep } from 'node:timers/promises';
import type { Caller, RequestDraft, RoleReply } from '../actors/run-charts.js';
import { publishCancel } from '../bus/channels.js';
import { CallTimeoutError, describeError } from '../errors.js';
import type { CallReport } from '../machines/types.js';
import type { Phase, Role, RoleRequest, RoleResult, RunEventDraft, Usage } from '../schemas/index.js';
import { addUsage, ROLE_OF_REQUEST, ZERO_USAGE } from '../schemas/index.js';
import type { RecorderDeps, RunRecorder } from './run-recorder.js';

/**
 * One run's calls: a call is a request recorded and sent, whose result the coordinator routes
 * here (`answer`) and whose deadline is the `after` of the chart state that made it
 * (`timeOutCall`). A resumed run's calls are answered from its recorded events while it replays.
 */

/** What the coordinator knows of a run it owns, to judge a result no call was waiting for. */
export interface RunState {
  /** False once the run's closing event is recorded. */
  isOpen(): boolean;
  /** Records an event of the run, unless it has ended. */
  recordIfOpen(draft: RunEventDraft): void;
  /** Whether a call of the run waits for `result` (the answer to its request). */
  awaits(result: RoleResult): boolean;
  /** Hands a result a call waits for to that call. */
  answer(result: RoleResult): void;
  /** Requests answered already. */
  answered: Set<string>;
  /** Requests cancelled, with the reason recorded. */
  cancelled: Map<string, string>;
}

/** A call waiting for its result, in the coordinator's table of every run's calls. */
export interface PendingCall {
  run: RunState;
  /** The run that asked: a result must name it. */
  runId: string;
  /** The role that serves the request (`ROLE_OF_REQUEST`): a result must come from it. */
  role: Role;
}

/** What a run's calls need of their coordinator. */
export interface CallDeps extends RecorderDeps {
  /** Every run's calls waiting for results, by request id. */
  pending: Map<string, PendingCall>;
  /** Applies a result a worker stored for a request asked again, or reports it. */
  applyStored: (result: RoleResult) => void;
  /**
   * Where a call that waits long looks for its result (`CoordinatorOptions.storedResult`): every
   * `everyMs` while it waits. None: a call waits for its result to come, or its deadline.
   */
  lookUp?: {
    storedResult: (runId: string, requestId: string) => Promise<RoleResult | null>;
    everyMs: number;
    /** How a look tells a work item that no worker holds (`CoordinatorOptions.lostWork`). */
    lostWork?: LostWork;
  };
}

/**
 * What the transport and the workers say of a role's work items (NATS: the role's consumer, and
 * the requests each worker's presence says it holds), so that a call whose work item was lost
 * (handed out, then neither held by a worker, answered nor handed out again) has it sent again.
 */
export interface LostWork {
  /**
   * When `role`'s work queue was found idle (this object's own clock): every item queued so far
   * handed out at least once, and a worker waiting for more; null when it is not.
   */
  idleAt(role: Role): Promise<number | null>;
  /**
   * Whether a worker of `role` said it held `requestId` at `since` (a time `idleAt` gave) or
   * after; null when it cannot be told.
   */
  heldSince(role: Role, requestId: string, since: number): boolean | null;
  /** How long after a look finds an item lost it looks again before sending it: a presence TTL. */
  confirmMs: number;
  /** Told of each work item sent again (once the queue stored it), with why. */
  onSentAgain?: (request: RoleRequest, why: string) => void;
}

/** A call of this run waiting for its result. */
interface Asking {
  request: RoleRequest;
  /** What the request had cost before a crash, counted in its report. */
  carried: Usage;
  /** Resolves the call (the abort listener removed). */
  resolve: (reply: RoleReply) => void;
}

/** One run's calls. */
export class RunCalls {
  readonly answered = new Set<string>();
  readonly cancelled = new Map<string, string>();
  /** Requests of this run still waiting for their result, with their phase. */
  readonly asked = new Map<string, Phase>();
  readonly #asking = new Map<string, Asking>();
  /** The request each call actor waits for, for its deadline (`timeOutCall`). */
  readonly #requestOf = new WeakMap<object, string>();
  /** Work items sent again so far (`#lookUp`), for their message ids. */
  #sentAgain = 0;
  /** Requests whose work item was sent again: once answered, the other copy is dropped. */
  readonly #copies = new Set<string>();

  constructor(
    private readonly deps: CallDeps,
    private readonly recorder: RunRecorder,
  ) {}

  /** Records that the run stopped waiting for a request, and why. */
  markCancelled(requestId: string, phase: Phase, reason: string): void {
    this.cancelled.set(requestId, reason);
    if (!this.recorder.closed)
      this.recorder.record({ type: 'request.cancelled', payload: { requestId, phase, reason } });
  }

  /**
   * Stops waiting for a request and tells the workers to drop it. The chart records its closing
   * event before XState stops the call actors, so the calls still asked at the close are
   * recorded as cancelled just before it (`recordChart`); here the event is recorded only for a
   * call cancelled while the run goes on.
   */
  cancel(requestId: string, stopped: string): void {
    this.deps.pending.delete(requestId);
    this.#copies.delete(requestId);
    const phase = this.asked.get(requestId);
    if (phase === undefined) return;
    this.asked.delete(requestId);
    // A run taken over is not this coordinator's to cancel: its new owner waits for the result.
    if (this.recorder.takenBy !== null) return;
    const reason = this.cancelled.get(requestId) ?? stopped;
    if (!this.cancelled.has(requestId)) this.markCancelled(requestId, phase, reason);
    const { runId } = this.recorder.spec;
    publishCancel(this.deps.bus, { runId, requestId, reason, ts: this.deps.timestamp() }).catch(() => {
      // A worker that misses the cancel finishes the call; its result is then rejected as late.
    });
  }

  /**
   * Records the model calls a result reports, stamped with the time it arrived (which a replay
   * reads back as the answer's time), and what they cost on top of `carried`.
   */
  #spent(request: RoleRequest, result: RoleResult, carried: Usage, now: number): CallReport {
    let usage = carried;
    for (const call of result.calls) {
      const { promptTokens, completionTokens, costUsd } = call;
      usage = addUsage(usage, { promptTokens, completionTokens, costUsd, calls: 1 });
      this.recorder.calls.push(call);
      const payload = { requestId: request.id, worker: result.worker, ...call };
      this.recorder.record({ type: 'model.call.completed', payload }, now);
    }
    return { usage, finishedAt: now - this.recorder.pausedMs };
  }

  /**
   * Sends a request for the call actor `caller` and waits for its result; records the calls it
   * cost. The result's routing answers it (`answerCall`), or the chart state's deadline times
   * it out (`timeOutCall`).
   */
  async ask(draft: RequestDraft, { self: caller, signal }: Caller): Promise<RoleReply> {
    signal.throwIfAborted();
    const request = this.recorder.record(draft as RunEventDraft) as RoleRequest;
    let carried = ZERO_USAGE;
    let stored: ((requestId: string) => Promise<RoleResult | null>) | undefined;
    const { replay, resume } = this.recorder;
    // Still replaying: the request is a recorded one.
    if (replay !== null && resume !== null) {
      const answer = resume.recorded.answers.get(request.id);
      if (answer !== undefined) {
        this.answered.add(request.id);
        // Given when the log had it come: steps side by side go on in the order they did.
        await this.recorder.inTurn(answer.turn);
        const report = { usage: answer.usage, finishedAt: answer.finishedAt };
        return { request, result: answer.result, report, receivedAt: answer.receivedAt };
      }
      // In flight at the crash: its answer was lost, so it is asked again once the replay has
      // reached the log's end (other steps' calls may have been in flight too); the calls it had
      // cost are recorded, and count.
      carried = resume.recorded.usage.get(request.id) ?? ZERO_USAGE;
      const missing = `${request.type} ${request.id} has no recorded answer`;
      if (await this.recorder.atLogEnd(request.id, missing, signal)) return untilStopped(signal);
      if (resume.options.resend !== false) this.recorder.enqueueAgain(request);
      stored = resume.options.storedResult;
    }
    // `record` published the request both as an event and on the role's work queue.
    this.asked.set(request.id, request.payload.phase);
    const { runId } = this.recorder.spec;
    const looking = this.#lookUp(request);
    const promise = new Promise<RoleReply>((resolve, reject) => {
      const onAbort = () => {
        clearInterval(looking);
        this.#asking.delete(request.id);
        this.cancel(request.id, abortReason(signal));
        reject(signal.reason);
      };
      signal.addEventListener('abort', onAbort, { once: true });
      const done = (reply: RoleReply) => {
        clearInterval(looking);
        signal.removeEventListener('abort', onAbort);
        this.#asking.delete(request.id);
        this.asked.delete(request.id);
        resolve(reply);
      };
      this.#asking.set(request.id, { request, carried, resolve: done });
    });
    this.deps.pending.set(request.id, { run: this.#state, runId, role: ROLE_OF_REQUEST[request.type] });
    this.#requestOf.set(caller, request.id);
    // Asked again after a crash: a worker may have answered after the last owner died.
    stored?.(request.id).then(
      (result) => result !== null && this.deps.applyStored(result),
      () => {
        // Not found is the usual case; the request was queued again and will be answered.
      },
    );
    return promise;
  }

  /**
   * Looks for the result of a call that waits long in the stream, every `lookUp.everyMs` while it
   * waits (`CallDeps.lookUp`); undefined without one. What it finds is routed as a result that
   * came (`applyStored`): to the call if it still waits, else dropped as answered. With
   * `lookUp.lostWork`, the call's work item is lost when its role's queue was idle (every item
   * handed out, a worker waiting for more) at two looks in a row, no worker said it held the item
   * from the first to the second nor by `confirmMs` later, and no result is stored: it is sent
   * again as a new item, and once the call is answered the workers are told to drop the other copy.
   * An item due to be handed out again (its worker died) goes to the waiting worker, who says so.
   */
  #lookUp(request: RoleRequest): NodeJS.Timeout | undefined {
    const { lookUp, applyStored, clock } = this.deps;
    if (lookUp === undefined) return undefined;
    const { lostWork } = lookUp;
    const { runId } = this.recorder.spec;
    const { id: requestId } = request;
    const role = ROLE_OF_REQUEST[request.type];
    /** When the previous look found the role's queue idle (`LostWork.idleAt`), else null. */
    let idleSince: number | null = null;
    let looking = false;
    /** True once a result is found or applied: the look has nothing more to do. */
    const answered = async (): Promise<boolean> => {
      const result = await lookUp.storedResult(runId, requestId);
      if (!this.#asking.has(requestId)) return true;
      if (result !== null) applyStored(result);
      return result !== null;
    };
    const look = async () => {
      if ((await answered()) || lostWork === undefined) return;
      const since = idleSince;
      idleSince = await lostWork.idleAt(role);
      if (since === null || idleSince === null || lostWork.heldSince(role, requestId, since) !== false)
        return;
      // Once every worker has said again what it holds: one that took the item a moment ago says so.
      await sleep(lostWork.confirmMs, undefined, { ref: false });
      if ((await answered()) || lostWork.heldSince(role, requestId, since) !== false) return;
      idleSince = null;
      // A message id of its own: a coordinator that took the run over may send it again too.
      const messageId = `${requestId}-again-${clock()}-${++this.#sentAgain}`;
      this.#copies.add(requestId);
      if (await this.recorder.enqueueAgain(request, messageId))
        lostWork.onSentAgain?.(
          request,
          `run ${runId}: ${request.type} ${requestId} was handed out, and no ${role} worker held it from one look to the next (${lookUp.everyMs} ms apart), nor stored its result: sent again`,
        );
    };
    const timer = setInterval(() => {
      // A look that outlasts the interval (a slow server) is not doubled.
      if (looking) return;
      looking = true;
      look()
        .catch(() => {
          // Not read now (the stream electing its leader, say): looked for again at the next turn.
          idleSince = null;
        })
        .finally(() => {
          looking = false;
        });
    }, lookUp.everyMs);
    // A call's look-ups never hold a process open.
    timer.unref();
    return timer;
  }

  /** The result goes to its call, in the tick it arrived. */
  answerCall(requestId: string, result: RoleResult): void {
    const call = this.#asking.get(requestId);
    if (call === undefined) return;
    const now = this.deps.clock();
    const report = this.#spent(call.request, result, call.carried, now);
    call.resolve({ request: call.request, result: result.result, report, receivedAt: now });
    if (this.#copies.delete(requestId)) this.#dropCopy(requestId);
  }

  /**
   * Tells the workers to drop the other copy of a request sent again and answered: whichever copy
   * still runs is aborted (not recorded: the call was answered, not cancelled).
   */
  #dropCopy(requestId: string): void {
    const { runId } = this.recorder.spec;
    const reason = `answered by another copy of ${requestId}`;
    publishCancel(this.deps.bus, { runId, requestId, reason, ts: this.deps.timestamp() }).catch(() => {
      // A copy that is not told finishes its call; its result is then rejected as a duplicate.
    });
  }

  /**
   * The charts' `timeOutCall`: the request of `caller` (a call actor), with no result within the
   * run's `callTimeoutMs`, is cancelled and answered with a failure, as if its worker had given
   * up: the chart then goes on as it does after any failed call. A call answered from the
   * recorded events of a replay has no request waiting, and nothing to time out.
   */
  timeOutCall(caller: object): void {
    const requestId = this.#requestOf.get(caller);
    const call = requestId === undefined ? undefined : this.#asking.get(requestId);
    if (call === undefined) return;
    const { request, carried } = call;
    const timeout = new CallTimeoutError(
      `no answer to ${request.type} ${request.id} within ${this.recorder.spec.settings.callTimeoutMs} ms`,
    );
    this.cancel(request.id, timeout.message);
    const now = this.deps.clock();
    const { phase } = request.payload;
    call.resolve({
      request,
      result: { status: 'error', phase, error: describeError(timeout), raw: null },
      report: { usage: carried, finishedAt: now - this.recorder.pausedMs },
      receivedAt: now,
    });
  }

  /** The run as the coordinator's result routing sees it. */
  readonly #state: RunState = {
    isOpen: () => !this.recorder.closed,
    recordIfOpen: (draft) => {
      if (!this.recorder.closed) this.recorder.record(draft);
    },
    // Taken in the same tick as the result arrives: an interrupt handled right after it finds
    // the call answered and its cost recorded, not a request still asked.
    awaits: (result) => this.#asking.has(result.requestId),
    answer: (result) => this.answerCall(result.requestId, result),
    answered: this.answered,
    cancelled: this.cancelled,
  };

  /** The run as the coordinator's result routing sees it. */
  get state(): RunState {
    return this.#state;
  }
}

/**
 * The promise of a call a replay-only run is interrupted at (`atLogEnd`): it rejects when the
 * interrupt stops the call's actor.
 */
export function untilStopped<T>(signal: AbortSignal): Promise<T> {
  return new Promise<T>((_, reject) => {
    signal.addEventListener('abort', () => reject(signal.reason), { once: true });
  });
}

/** Why a call's actor was stopped, in words for its cancel. */
function abortReason(signal: AbortSignal): string {
  const reason: unknown = signal.reason;
  if (reason instanceof Error && reason.name !== 'AbortError') return reason.message;
  return 'the state that made the call was left';
}
