import type { ActorRefLike, AnyMachineSnapshot, InspectionEvent, StateValue } from 'xstate';
import { InProcessBus } from '../bus/in-process-bus.js';
import { createCoordinator } from '../conductor/coordinator.js';
import { ReplayDivergence, readRecordedRun } from '../conductor/replay.js';
import { ResumeError, RunTakenOverError } from '../errors.js';
import type { StepContext } from '../machines/step-context.js';
import { isClosingEvent, type RunEvent } from '../schemas/index.js';
import { OPTION_DEFAULTS } from '../schemas/setting-values.js';
import type { RunTracing } from '../telemetry/run-tracing.js';
import type { ActiveStates } from './run-view-types.js';

/**
 * Where a run's statecharts stand, asked of the charts themselves: the session chart, the run
 * chart it invokes and the step chart under that, fed the run's events by a coordinator of its
 * own, and followed through XState's inspection. A run that has ended is replayed as `pge replay`
 * replays its log (`replayOnly`), to its closing event. A run still going is resumed as a
 * coordinator taking it over would resume it, on a private in-process bus where no worker listens
 * and nothing is written: its events are replayed, and where they run out the session goes live
 * (it records `run.resumed` and waits for the call, or at the gate, the events leave open), so it
 * stands where the real run's session does. The states are read there and the run is let go
 * (`abandon`, which records nothing), its deadlines cancelled with the states that set them; what
 * the resume recorded goes nowhere but its private bus, and the view is built from the real events
 * only. So the dashboard holds no table of what each event means, and a chart that changes moves
 * the highlight with it.
 */

/** What replaying a run's events found. */
export interface ReplayedStates {
  /** Null when the events cannot be replayed: they do not start with `run.started` (seen from the middle). */
  active: ActiveStates | null;
  /**
   * Why the charts part from a run's events before their end, for a run that has ended (its
   * closing event is in them); null when they agree, or when the run has not ended.
   */
  problem: string | null;
}

/** The machines whose states the dashboard draws, by their ids. */
const SESSION = 'session';
const RUN = 'run';
const STEP = 'step';

/** Who resumes the run, in the `run.resumed` that only the private bus sees. */
const OWNER = 'pge dashboard';

/**
 * The id of the deepest active state in `value`, as `machineGraph` names its nodes
 * (`run.stepping.waiting`). The charts have no parallel states, so one path leads down.
 */
function stateIdOf(machineId: string, value: StateValue): string {
  if (typeof value === 'string') return `${machineId}.${value}`;
  const [entry] = Object.entries(value);
  return entry === undefined ? machineId : stateIdOf(`${machineId}.${entry[0]}`, entry[1] as StateValue);
}

/**
 * True when an inspected event or snapshot carries the error that ends a replay: a chart failing
 * with it. The session's own `diverged` event is not the end yet: it comes as the charts make the
 * first request past the events, and the step chart that made it is still to report the state it
 * waits in (the charts fail only at their next event, `session-machine.ts`).
 */
function endsReplay(event: InspectionEvent): boolean {
  const carried =
    event.type === '@xstate.event'
      ? event.event.type === 'diverged'
        ? undefined
        : (event.event as { error?: unknown }).error
      : event.type === '@xstate.snapshot'
        ? (event.snapshot as { error?: unknown }).error
        : undefined;
  return carried instanceof ResumeError;
}

/** What the watch saw of one step chart: its latest state, its plan position, and whether it ended. */
interface WatchedStep {
  state: string;
  stepNumber: number;
  /** Its chart reached a final state. */
  done: boolean;
}

/**
 * Follows the charts of one replay through XState's inspection. Each state is taken after every
 * microstep (a transition that records an event completes one) and from each snapshot (a new step
 * chart's first state comes as one). Every step actor is followed, one per step the run chart
 * spawned (`step.<id>`): a step runs while its chart has not ended and the run chart still holds
 * it as a child (it stops them all as it ends). The latest step is the newest step actor's: an
 * ended step's last snapshot may be reported after the next step's first. The watch ends where the
 * replay parts from the events, and once the events have run out (a tick after the first event
 * the resume records itself): what the charts do past the events says nothing of the run.
 */
class ChartWatch {
  session: string | null = null;
  run: string | null = null;
  /** Resolves when the watch ends. */
  readonly ended: Promise<void>;
  /** Every step actor seen, in the order they started. */
  readonly #steps = new Map<ActorRefLike, WatchedStep>();
  /** The newest step actor's. */
  #latest: WatchedStep | null = null;
  /** The run chart's children, as of its latest state taken. */
  #runChildren: ReadonlySet<unknown> = new Set();
  /** The charts that made a transition past the run's events: their states are no longer taken. */
  readonly #past = new WeakSet<ActorRefLike>();
  #over = false;
  #end!: () => void;
  /** Set once the charts record an event past the run's (not `run.resumed`): a state it leads to is not the run's. */
  #pastEvents = false;
  /** The events sent to an actor before the charts went past the run's events. */
  readonly #before = new WeakSet<object>();

  constructor() {
    this.ended = new Promise((resolve) => {
      this.#end = () => {
        this.#over = true;
        resolve();
      };
    });
  }

  /**
   * The coordinator's `tracing` is told every event it records itself and none that a replay takes
   * from the events: so the first it is told is `run.resumed`, where the events ran out, and any
   * other goes past them. The watch ends once the microtasks this started have run: the calls and
   * gates the events leave open go on waiting then (the session at a gate), each a few microtasks
   * after the resume.
   */
  readonly recorded: RunTracing = {
    begin: () => '',
    resume: () => {},
    observe: (event) => {
      if (event.type !== 'run.resumed') this.#pastEvents = true;
      setImmediate(this.#end);
    },
    traceparent: () => undefined,
  };

  readonly inspect = (event: InspectionEvent): void => {
    if (this.#over) return;
    if (endsReplay(event)) {
      this.#end();
      return;
    }
    if (event.type === '@xstate.event' && !this.#pastEvents) this.#before.add(event.event);
    if (event.type !== '@xstate.microstep' && event.type !== '@xstate.snapshot') return;
    const snapshot = event.snapshot as AnyMachineSnapshot;
    if (snapshot.status === 'error' || snapshot.status === 'stopped') return;
    const id = snapshot.machine?.id;
    if (id === SESSION) this.#takeSession(event, snapshot);
    else if (this.#pastEvents && event.type === '@xstate.microstep') {
      // A transition past the events, which `pge replay` would have failed: where it leads is not
      // the run's, nor is anything that chart does after it. Another chart's states still are: a
      // step the run chart started within the events reports its first state (a snapshot) only
      // once the run chart's macrostep is over, which may have gone past them (starting the next
      // ready step), and a step takes what the run sent it then (`company`) after its first request.
      this.#past.add(event.actorRef);
    } else if (this.#past.has(event.actorRef)) return;
    else if (id === RUN) this.#takeRun(snapshot);
    else if (id === STEP) this.#takeStep(event.actorRef, snapshot);
  };

  /**
   * Past the events the session still takes what it was told before them (`replay.ended`, queued
   * while the run chart that went past them ran), and nothing more.
   */
  #takeSession(event: InspectionEvent, snapshot: AnyMachineSnapshot): void {
    if (!this.#pastEvents || (event.type === '@xstate.microstep' && this.#before.has(event.event)))
      this.session = stateIdOf(SESSION, snapshot.value);
  }

  #takeRun(snapshot: AnyMachineSnapshot): void {
    this.run = stateIdOf(RUN, snapshot.value);
    // A run chart that ended stops the steps it still ran, and reports no snapshot of theirs as it does.
    this.#runChildren = new Set(snapshot.status === 'active' ? Object.values(snapshot.children) : []);
  }

  #takeStep(actor: ActorRefLike, snapshot: AnyMachineSnapshot): void {
    const state = stateIdOf(STEP, snapshot.value);
    const done = snapshot.status === 'done';
    const seen = this.#steps.get(actor);
    if (seen) Object.assign(seen, { state, done });
    // A step is the run's once the run chart, in a state taken, holds it: not one it started past the events.
    else if (this.#runChildren.has(actor)) {
      const step = { state, stepNumber: (snapshot.context as StepContext).input.stepNumber, done };
      this.#steps.set(actor, step);
      this.#latest = step;
    }
  }

  get states(): ActiveStates | null {
    const { session, run } = this;
    if (session === null || run === null) return null;
    const steps = [...this.#steps]
      .filter(([actor, step]) => !step.done && this.#runChildren.has(actor))
      .map(([, { state, stepNumber }]) => ({ stepNumber, step: state }))
      .sort((a, b) => a.stepNumber - b.stepNumber);
    const latest = this.#latest;
    return { session, run, step: latest?.state ?? null, stepNumber: latest?.stepNumber ?? null, steps };
  }
}

/**
 * Replays a run's events (in seq order, from its first) with its charts and says where they
 * stand after the last one. Never rejects for the events' sake: events that cannot be replayed
 * give no states. Leaves nothing behind: no actor, timer or subscription outlives the call.
 */
export async function replayActiveStates(events: readonly RunEvent[]): Promise<ReplayedStates> {
  const last = events.at(-1);
  const ended = last !== undefined && isClosingEvent(last);
  let recorded: ReturnType<typeof readRecordedRun>;
  try {
    recorded = readRecordedRun(events, `run ${events[0]?.runId}`, { ended });
  } catch (error) {
    if (error instanceof ResumeError) return { active: null, problem: null };
    throw error;
  }
  const bus = new InProcessBus();
  const watch = new ChartWatch();
  const coordinator = createCoordinator({
    bus,
    inspect: watch.inspect,
    // The run's time stands at its last event: a gate's deadline counts from there, as it did then.
    clock: () => recorded.lastAt,
    tracing: watch.recorded,
  });
  let problem: string | null = null;
  try {
    const run = coordinator.resumeRun(recorded, {
      owner: OWNER,
      replayOnly: ended,
      resend: false,
      // A log written before run.started recorded its thresholds replays with the defaults, as `pge replay` does.
      defaults: { defaultThresholds: {}, fallbackThreshold: OPTION_DEFAULTS.fallbackThreshold },
    });
    // A replay of an ended run ends with the run; a resumed one waits where the events leave it.
    if (!ended) {
      await Promise.race([run.done, watch.ended]);
      run.abandon(OWNER);
    }
    await run.done;
  } catch (error) {
    if (error instanceof ReplayDivergence) {
      if (ended)
        problem = `run ${recorded.runId}: its charts part from its events at seq ${error.seq}: ${error.problem}`;
    } else if (!(error instanceof RunTakenOverError)) throw error;
  } finally {
    coordinator.close();
    await bus.close();
  }
  return { active: watch.states, problem };
}
