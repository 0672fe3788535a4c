import type { ActorRefLike, AnyMachineSnapshot, InspectionEvent, StateValue } from 'xstate';
import { InProcessBus } from '../bus/in-process-bus.js';
import { createCoordinator } from '../conductor/coordinator.js';
import { ReplayDivergence, readRecordedRun } from '../conductor/replay.js';
import { ResumeError } from '../errors.js';
import type { StepContext } from '../machines/step-context.js';
import { isClosingEvent, type RunEvent } from '../schemas/index.js';
import { OPTION_DEFAULTS } from '../schemas/setting-values.js';
import type { ActiveStates } from './run-view-types.js';

/**
 * Where a run's statecharts stand, asked of the charts themselves: the run's events are replayed
 * as `pge replay` replays a log (`resumeRun` with `replayOnly`: every call answered from the
 * events, nothing asked of a model), and XState's inspection reports each chart's state as it
 * moves. A run still going is a log that ends mid-run: the replay stops where the events end (it
 * parts from them with a `ReplayDivergence`), and where the charts stood then is where the run
 * stands. So the dashboard holds no table of what each event means, and a chart that changes
 * moves the highlight with it.
 */

/** What replaying a run's events found. */
export interface ReplayedStates {
  /** Null when the events cannot be replayed: they do not start with `run.started` (seen from the middle). */
  active: ActiveStates | null;
  /**
   * Why the charts part from a run's events before their end, for a run that has ended (its
   * closing event is in them); null when they agree, or when the run has not ended, whose replay
   * always parts where its events stop.
   */
  problem: string | null;
}

/** The machines whose states the dashboard draws, by their ids. */
const RUN = 'run';
const STEP = 'step';

/**
 * The id of the deepest active state in `value`, as `machineGraph` names its nodes
 * (`run.stepping.running`). The charts have no parallel states, so one path leads down.
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

/**
 * Follows the charts of one replay through XState's inspection. Each state is taken after every
 * microstep (a transition that records an event completes one, even when the next one stops at
 * the end of the events) and from each snapshot (a new step chart's first state comes as one).
 * The step chart is the newest step actor's: an ended step's last snapshot may be reported after
 * the next step's first. Once the replay has parted from the events, nothing more is taken: the
 * charts then only fail or stop, which says nothing of the run.
 */
class ChartWatch {
  run: string | null = null;
  step: string | null = null;
  stepNumber: number | null = null;
  readonly #seen = new WeakSet<ActorRefLike>();
  #stepActor: ActorRefLike | null = null;
  #ended = false;

  readonly inspect = (event: InspectionEvent): void => {
    if (this.#ended) return;
    if (endsReplay(event)) {
      this.#ended = true;
      return;
    }
    if (event.type !== '@xstate.microstep' && event.type !== '@xstate.snapshot') return;
    const snapshot = event.snapshot as AnyMachineSnapshot;
    if (snapshot.status === 'error' || snapshot.status === 'stopped') return;
    const id = snapshot.machine?.id;
    if (id === RUN) this.run = stateIdOf(RUN, snapshot.value);
    if (id !== STEP) return;
    if (!this.#seen.has(event.actorRef)) {
      this.#seen.add(event.actorRef);
      this.#stepActor = event.actorRef;
    }
    if (event.actorRef !== this.#stepActor) return;
    this.step = stateIdOf(STEP, snapshot.value);
    this.stepNumber = (snapshot.context as StepContext).input.stepNumber;
  };

  get states(): ActiveStates | null {
    return this.run === null ? null : { run: this.run, step: this.step, stepNumber: this.stepNumber };
  }
}

/**
 * Replays a run's events (in seq order, from its first) with its charts and says where they
 * stand after the last one. Never rejects for the events' sake: events that cannot be replayed
 * give no states.
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
  const coordinator = createCoordinator({ bus, inspect: watch.inspect });
  let problem: string | null = null;
  try {
    await coordinator.resumeRun(recorded, {
      owner: 'pge dashboard',
      replayOnly: true,
      // A log written before run.started recorded its thresholds replays with the defaults, as `pge replay` does.
      defaults: { defaultThresholds: {}, fallbackThreshold: OPTION_DEFAULTS.fallbackThreshold },
    }).done;
  } catch (error) {
    if (!(error instanceof ReplayDivergence)) throw error;
    if (ended)
      problem = `run ${recorded.runId}: its charts part from its events at seq ${error.seq}: ${error.problem}`;
  } finally {
    coordinator.close();
    await bus.close();
  }
  return { active: watch.states, problem };
}
