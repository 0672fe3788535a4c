import type { RunEvent } from '../schemas/index.js';
import { afterClosingProblem, buildRunView, summarize } from './run-view.js';
import type { RunSummary, RunView } from './run-view-types.js';

/**
 * The runs the dashboard knows, as event sequences, from whichever source feeds them (a log being
 * followed, the bus). Views are built on demand and cached until the run's events change;
 * listeners are told which run changed, so a page that shows another run is not redrawn.
 */

/** Told when a run's events change (`runId`), or when the list of problems does (`null`). */
export type StoreListener = (runId: string | null) => void;

/** The events of every run seen, and what went wrong reading them. */
export class RunStore {
  private readonly runs = new Map<string, RunEvent[]>();
  private readonly views = new Map<string, RunView>();
  private readonly listeners = new Set<StoreListener>();
  private readonly problemList: string[] = [];

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
    for (const listener of this.listeners) listener(null);
  }

  /** The problems so far, oldest first. */
  get problems(): readonly string[] {
    return this.problemList;
  }

  /** The view of a run, or undefined for a run never seen. */
  view(runId: string): RunView | undefined {
    const cached = this.views.get(runId);
    if (cached) return cached;
    const events = this.runs.get(runId);
    if (!events) return undefined;
    const view = buildRunView(runId, events);
    this.views.set(runId, view);
    return view;
  }

  /** Every run, the most recently updated first. */
  list(): RunSummary[] {
    return [...this.runs.keys()]
      .map((runId) => summarize(this.view(runId)!))
      .sort((a, b) => (b.updatedAt ?? '').localeCompare(a.updatedAt ?? ''));
  }

  /** Calls `listener` on every change until the returned function is called. */
  subscribe(listener: StoreListener): () => void {
    this.listeners.add(listener);
    return () => void this.listeners.delete(listener);
  }

  private changed(runId: string): void {
    this.views.delete(runId);
    for (const listener of this.listeners) listener(runId);
  }
}
