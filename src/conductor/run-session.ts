import { type Actor, createActor, type InspectionEvent, toPromise } from 'xstate';
import type { AnyActorSystem, Caller, RequestDraft, RoleReply, RunScope } from '../actors/run-charts.js';
import { RunTakenOverError } from '../errors.js';
import type { RunOutcome } from '../machines/run-machine.js';
import type { SessionEvent, SessionInput, sessionMachine } from '../machines/session-machine.js';
import type { ApprovalInput, ApprovalOutput, RecordParams } from '../machines/types.js';
import type {
  ApprovalDecision,
  ApprovalGate,
  ModelCall,
  RunEventDraft,
  RunEventOf,
} from '../schemas/index.js';
import { phaseTotals } from '../schemas/index.js';
import { type CallDeps, RunCalls, type RunState } from './run-calls.js';
import { RunGates } from './run-gates.js';
import { type Resumption, RunRecorder } from './run-recorder.js';
import type { RunSpec } from './run-spec.js';

/**
 * One run on its coordinator: the session chart (`src/machines/session-machine.ts`) as an actor,
 * with the recorder that stamps and publishes its events and the calls and gates it waits for.
 * This is what the session's provided actions and the charts' call actors reach through their
 * actor system (`RunScope`), and what the run's handle sends its events to.
 */

/** A run in progress. */
export interface RunHandle {
  readonly runId: string;
  /** Resolves with the outcome once the chart is done and every event is published. */
  readonly done: Promise<RunOutcome>;
  /** Every model call of the run so far, repairs included. */
  readonly calls: readonly ModelCall[];
  /** Ends the run as interrupted, `reason` going into its closing event; a call in flight is cancelled. */
  interrupt(reason?: string): void;
  /**
   * Ends the run as cancelled by `by` (`pge cancel`), with `reason` if given: every step running
   * stops and its call is cancelled; the closing event says who and why.
   */
  cancel(by: string, reason?: string): void;
  /**
   * A person's decision at a gate the run waits at (the oldest of that kind, or the one of
   * `requestId` when given); false (and nothing done) when it waits at no such gate.
   */
  decide(gate: ApprovalGate, decision: ApprovalDecision, requestId?: string): boolean;
  /** The gates the run waits at (steps side by side may each wait at one), with their requests' ids. */
  waitingAt(): { gate: ApprovalGate; requestId: string }[];
  /**
   * Lets the run go, because `owner` took it over (this coordinator lost its lease): the chart
   * stops, nothing more is recorded or published (the call in flight is not cancelled: the new
   * owner waits for its result), and `done` rejects with `RunTakenOverError`.
   */
  abandon(owner: string): void;
}

/** What a session needs of its coordinator. */
export interface SessionDeps extends CallDeps {
  /** The session machine with its I/O provided (`provideSession`). */
  machine: typeof sessionMachine;
  /** Where the provided actors find a run's scope, by the run's actor system. */
  scopes: WeakMap<AnyActorSystem, RunScope>;
  inspect?: ((event: InspectionEvent) => void) | undefined;
}

/** A chart's event, completed with what only the coordinator knows: the per-phase table. */
function completeDraft(draft: RecordParams, calls: readonly ModelCall[]): RunEventDraft {
  if (draft.type === 'run.completed')
    return { type: draft.type, payload: { ...draft.payload, byPhase: phaseTotals(calls) } };
  if (draft.type === 'run.failed')
    return { type: draft.type, payload: { ...draft.payload, byPhase: phaseTotals(calls) } };
  return draft;
}

/**
 * The `run.started` of a new run: its task, its log, its settings whole (what a resume reads back),
 * and what it carries on, who started it and its trace, each when it has one, in the order logs
 * have them.
 */
function startedDraft(
  { task, logPath, settings, job, continues, startedBy }: RunSpec,
  traceparent: string | undefined,
): Extract<RunEventDraft, { type: 'run.started' }> {
  return {
    type: 'run.started',
    payload: {
      task,
      logPath,
      settings,
      ...(job === undefined ? {} : { job }),
      ...(continues === undefined ? {} : { continues }),
      ...(startedBy === undefined ? {} : { startedBy }),
      ...(traceparent === undefined ? {} : { traceparent }),
    },
  };
}

/** One run's session: its actor, recorder, calls and gates. */
export class RunSession implements RunScope {
  readonly recorder: RunRecorder;
  readonly calls: RunCalls;
  readonly gates: RunGates;
  readonly actor: Actor<typeof sessionMachine>;
  /** The time a decision comes, for the session (its gates' deadlines count from it). */
  readonly #clock: () => number;

  constructor(deps: SessionDeps, spec: RunSpec, resume: Resumption | null) {
    this.recorder = new RunRecorder(deps, spec, resume);
    // A session that has ended takes no more events: the calls it stopped say so on their way out.
    const send = (event: SessionEvent) => {
      if (this.actor.getSnapshot().status === 'active') this.actor.send(event);
    };
    this.calls = new RunCalls(deps, this.recorder);
    this.gates = new RunGates(deps.clock, this.recorder, { send });
    this.#clock = deps.clock;
    this.recorder.notify = send;
    let startedAt: number;
    if (resume === null) {
      startedAt = deps.clock();
      const traceparent = deps.tracing?.begin(spec.runId);
      // The run's start is its first event's time, so that a replay reads it back exactly.
      this.recorder.record(startedDraft(spec, traceparent), startedAt);
    } else {
      startedAt = Date.parse(resume.recorded.started.ts);
      this.recorder.seq = 1;
    }
    const { runId, task, logPath, settings, continues } = spec;
    const input: SessionInput = {
      runId,
      run: { ...settings, task, logPath, continues, startedAt },
      replaying: resume !== null,
    };
    this.actor = createActor(deps.machine, { input, ...(deps.inspect ? { inspect: deps.inspect } : {}) });
    deps.scopes.set(this.actor.system, this);
  }

  /** The run as the coordinator's result routing sees it. */
  get state(): RunState {
    return this.calls.state;
  }

  record<T extends RunEventDraft>(draft: T, at?: number): RunEventOf<T['type']> {
    return this.recorder.record(draft, at);
  }

  /** Records a chart's event; before a closing one, the calls still asked are recorded as cancelled. */
  recordChart(draft: RecordParams): void {
    if (draft.type === 'run.completed' || draft.type === 'run.failed') {
      const reason = draft.type === 'run.failed' ? draft.payload.message : 'the run ended';
      for (const [requestId, phase] of this.calls.asked) this.calls.markCancelled(requestId, phase, reason);
    }
    this.recorder.record(completeDraft(draft, this.recorder.calls));
  }

  ask(draft: RequestDraft, caller: Caller): Promise<RoleReply> {
    return this.calls.ask(draft, caller);
  }

  awaitDecision(input: ApprovalInput, signal: AbortSignal): Promise<ApprovalOutput> {
    return this.gates.awaitDecision(input, signal);
  }

  timeOutCall(caller: object): void {
    this.calls.timeOutCall(caller);
  }

  settleDecision(requestId: string, decision: ApprovalDecision): void {
    this.gates.settleDecision(requestId, decision);
  }

  letGo(owner: string, error: Error): void {
    this.recorder.letGo(owner, error);
  }

  /**
   * Starts the session; `done` settles with its final state's output once every event is
   * published, and `onEnd` is told then (with who took the run over, if anyone did).
   */
  start(onEnd: (takenBy: string | null) => void): RunHandle {
    const { actor, recorder } = this;
    const { runId } = recorder.spec;
    // Observed before the start: a replay that disagrees may end the session in the first ticks.
    const finished = toPromise(actor);
    actor.start();
    const done = (async (): Promise<RunOutcome> => {
      try {
        const output = await finished;
        if (output.outcome === undefined) throw output.error;
        await Promise.all(recorder.publishing);
        if (recorder.publishFailure) throw recorder.publishFailure;
        return output.outcome;
      } finally {
        actor.stop();
        onEnd(recorder.takenBy);
      }
    })();
    return {
      runId,
      done,
      calls: recorder.calls,
      interrupt: (reason?: string) =>
        actor.send(reason ? { type: 'interrupt', reason } : { type: 'interrupt' }),
      cancel: (by: string, reason?: string) =>
        actor.send(reason ? { type: 'cancel', by, reason } : { type: 'cancel', by }),
      decide: (gate, decision, requestId) => {
        const event: SessionEvent = {
          type: 'decide',
          gate,
          decision,
          ...(requestId === undefined ? {} : { requestId }),
          now: this.#clock(),
        };
        if (recorder.closed || !actor.getSnapshot().can(event)) return false;
        actor.send(event);
        return true;
      },
      waitingAt: () => {
        const snapshot = actor.getSnapshot();
        return snapshot.hasTag('waiting')
          ? snapshot.context.gates.map(({ gate, requestId }) => ({ gate, requestId }))
          : [];
      },
      abandon: (owner: string) => {
        if (recorder.closed) return;
        const error = new RunTakenOverError(`run ${runId} was taken over by ${owner}`);
        actor.send({ type: 'abandon', owner, error });
      },
    };
  }
}
