import type { RunEvent } from '../schemas/index.js';
import { replayActiveStates } from './active-state.js';
import { afterClosingProblem, buildRunView, byAttention, summarize } from './run-view.js';
import type { ActiveStates, RunSummary, RunView } from './run-view-types.js';

/**
 * The runs the dashboard knows, as event sequences, from whichever source feeds them (a log being
 * followed, the bus). A run's view is built when its events change, once its charts have been
 * replayed over them to say where it stands (`replayActiveStates`): the events that arrive within
 * `replayDelayMs` are replayed together, and one replay of a run runs at a time, so a live run
 * costs one replay of its events per batch of new ones. Listeners are told which run's view
 * changed, so a page that shows another run is not redrawn.
 */

/** Told when a run's view changes (`runId`), or when the list of problems does (`null`). */
export type StoreListener = (runId: string | null) => void;

/** Options of a `RunStore`. */
export interface RunStoreOptions {
  /** Milliseconds to gather a run's new events before replaying them (default 50). */
  replayDelayMs?: number;
}

/**
 * The longest run of events from seq 1 without a gap: what can be replayed while a run seen
 * midway on the bus is still being read back from its start.
 */
function fromTheStart(events: readonly RunEvent[]): readonly RunEvent[] {
  const gap = events.findIndex((e, i) => e.seq !== i + 1);
  return gap === -1 ? events : events.slice(0, gap);
}

/** The events of every run seen, and what went wrong reading them. */
export class RunStore {
  private readonly runs = new Map<string, RunEvent[]>();
  private readonly views = new Map<string, RunView>();
  private readonly listeners = new Set<StoreListener>();
  private readonly problemList: string[] = [];
  /** How many times each run's events changed, and how many of those changes its view shows. */
  private readonly changes = new Map<string, number>();
  private readonly shown = new Map<string, number>();
  /** Runs being replayed: one replay per run at a time, which picks up what changed meanwhile. */
  private readonly replaying = new Set<string>();
  /** Callers of `settled`, each with the changes it waits for. */
  private readonly waiters = new Set<{ wanted: Map<string, number>; resolve: () => void }>();
  private readonly replayDelayMs: number;

  constructor(options: RunStoreOptions = {}) {
    this.replayDelayMs = options.replayDelayMs ?? 50;
  }

  /**
   * Adds one event as the bus delivers it. A redelivered event (same seq) is dropped; a run seen
   * from the middle starts at the first event that arrived; an event after the run's closing
   * event is dropped and reported as a problem.
   */
  add(event: RunEvent): void {
    const events = this.runs.get(event.runId) ?? [];
    if (events.some((e) => e.seq === event.seq)) return;
    const problem = afterClosingProblem(events, event);
    if (problem !== null) {
      this.problem(problem);
      return;
    }
    events.push(event);
    // Delivery is in order per run; sorting keeps a late redelivery from scrambling the timeline.
    if (events.length > 1 && events.at(-2)!.seq > event.seq) events.sort((a, b) => a.seq - b.seq);
    this.runs.set(event.runId, events);
    this.changed(event.runId);
  }

  /** Replaces a run's events with a log's full sequence (the log is the whole truth of its run). */
  replace(runId: string, events: readonly RunEvent[]): void {
    const known = this.runs.get(runId);
    if (known && known.length === events.length && known.at(-1)?.id === events.at(-1)?.id) return;
    this.runs.set(runId, [...events]);
    this.changed(runId);
  }

  /** Records a problem with a source (a log that does not parse, a lost connection), once. */
  problem(message: string): void {
    if (this.problemList.includes(message)) return;
    this.problemList.push(message);
    this.tell(null);
  }

  /** The problems so far, oldest first. */
  get problems(): readonly string[] {
    return this.problemList;
  }

  /** The events of run `runId` seen so far, in seq order; none for a run not seen. */
  events(runId: string): readonly RunEvent[] {
    return this.runs.get(runId) ?? [];
  }

  /** The view of a run as of its latest replay, or undefined for a run not replayed yet. */
  view(runId: string): RunView | undefined {
    return this.views.get(runId);
  }

  /** Every run replayed so far: those waiting for a person first, then running, then ended (`byAttention`). */
  list(): RunSummary[] {
    return [...this.views.values()].map(summarize).sort(byAttention);
  }

  /** The run most recently updated, which the page shows until one is chosen; null before any. */
  latest(): string | null {
    let latest: RunView | null = null;
    for (const view of this.views.values())
      if (latest === null || (view.updatedAt ?? '') > (latest.updatedAt ?? '')) latest = view;
    return latest?.runId ?? null;
  }

  /**
   * Resolves once every run's view shows the events that had arrived when it was called, or after
   * `maxWaitMs` (when given) with the views as they are: a page is never held by a slow replay.
   */
  settled(maxWaitMs?: number): Promise<void> {
    const wanted = new Map(this.changes);
    if (this.shows(wanted)) return Promise.resolve();
    return new Promise((resolve) => {
      const waiter = { wanted, resolve };
      this.waiters.add(waiter);
      if (maxWaitMs === undefined) return;
      setTimeout(() => {
        this.waiters.delete(waiter);
        resolve();
      }, maxWaitMs).unref();
    });
  }

  private shows(wanted: ReadonlyMap<string, number>): boolean {
    return [...wanted].every(([runId, n]) => (this.shown.get(runId) ?? 0) >= n);
  }

  /** Calls `listener` on every change until the returned function is called. */
  subscribe(listener: StoreListener): () => void {
    this.listeners.add(listener);
    return () => void this.listeners.delete(listener);
  }

  /** Tells every listener; one that throws is reported on the console, and the others are still told. */
  private tell(runId: string | null): void {
    for (const listener of this.listeners) {
      try {
        listener(runId);
      } catch (error) {
        console.error('pge dashboard: a run store listener failed:', error);
      }
    }
  }

  private changed(runId: string): void {
    this.changes.set(runId, (this.changes.get(runId) ?? 0) + 1);
    if (this.replaying.has(runId)) return;
    this.replaying.add(runId);
    void this.settle(runId).finally(() => this.replaying.delete(runId));
  }

  /** Replays the run until its view shows every event it has, telling the listeners after each. */
  private async settle(runId: string): Promise<void> {
    while ((this.shown.get(runId) ?? 0) < (this.changes.get(runId) ?? 0)) {
      await new Promise((resolve) => setTimeout(resolve, this.replayDelayMs));
      const version = this.changes.get(runId) ?? 0;
      const events = [...(this.runs.get(runId) ?? [])];
      let active: ActiveStates | null = null;
      try {
        const replayed = await replayActiveStates(fromTheStart(events));
        active = replayed.active;
        if (replayed.problem !== null) this.problem(replayed.problem);
      } catch (error) {
        // A defect in replaying one run must not hide it, nor stop the dashboard for the others.
        this.problem(`run ${runId}: where its charts stand cannot be told: ${String(error)}`);
      }
      try {
        this.views.set(runId, buildRunView(runId, events, active));
      } catch (error) {
        this.problem(`run ${runId}: cannot be shown: ${String(error)}`);
      }
      this.shown.set(runId, version);
      this.tell(runId);
      for (const waiter of this.waiters) {
        if (!this.shows(waiter.wanted)) continue;
        this.waiters.delete(waiter);
        waiter.resolve();
      }
    }
  }
}
