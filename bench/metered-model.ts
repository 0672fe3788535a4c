import type { Model, ModelAnswer, ModelRequest } from '../src/roles/model.js';
import type { Phase } from '../src/schemas/index.js';

/**
 * Wrappers around a `Model` for measuring: `MeteredModel` counts calls and the time spent inside
 * the model, so that the harness's own time is the wall time minus the model's; `Gate` holds calls
 * of some phases until released, so that many runs can be kept in flight at once.
 */

/**
 * Once armed, holds the calls of the given phases until `release()`; before `arm()` every call
 * passes at once. After `release()` every call is answered on a later turn of the event loop, as
 * an answer from the network would be: an instant answer in a microtask never lets timers and
 * disk writes in, which with a thousand runs in flight starves them for minutes.
 */
export class Gate {
  readonly phases: ReadonlySet<Phase>;
  /** Calls waiting at the gate right now. */
  waiting = 0;
  #armed = false;
  #open = false;
  #release: () => void = () => {};
  readonly #opened: Promise<void>;

  constructor(phases: readonly Phase[]) {
    this.phases = new Set(phases);
    this.#opened = new Promise((resolve) => {
      this.#release = resolve;
    });
  }

  /** Whether a call of `phase` must wait. */
  holds(phase: Phase): boolean {
    return this.#armed && !this.#open && this.phases.has(phase);
  }

  /** Whether calls are answered after a turn of the event loop (the gate was released). */
  get yields(): boolean {
    return this.#open;
  }

  /** From now on, calls of the gate's phases wait for `release()`. */
  arm(): void {
    this.#armed = true;
  }

  /** Resolves when the gate opens. */
  async wait(): Promise<void> {
    this.waiting++;
    try {
      await this.#opened;
    } finally {
      this.waiting--;
    }
  }

  /** Opens the gate for the calls waiting and every later one. */
  release(): void {
    this.#open = true;
    this.#release();
  }
}

/** Options of `MeteredModel`. */
export interface MeteredModelOptions {
  /** Told of every request before it reaches the model (not counted as model time). */
  onRequest?: (request: ModelRequest) => void;
  gate?: Gate;
}

/**
 * Counts calls and the model's own time. The wrapped model must do its work before its first
 * `await` (an instant model does all of it), so the time measured around the synchronous part of
 * `complete` is all of the model's time, and none of the harness's.
 */
export class MeteredModel implements Model {
  readonly name: string;
  calls = 0;
  modelMs = 0;
  readonly #inner: Model;
  readonly #options: MeteredModelOptions;

  constructor(inner: Model, options: MeteredModelOptions = {}) {
    this.#inner = inner;
    this.#options = options;
    this.name = inner.name;
  }

  /** Sets the counters back to zero (after a warm-up). */
  reset(): void {
    this.calls = 0;
    this.modelMs = 0;
  }

  complete(request: ModelRequest): Promise<ModelAnswer> {
    this.#options.onRequest?.(request);
    const gate = this.#options.gate;
    if (gate?.holds(request.phase)) return gate.wait().then(() => this.#timed(request));
    if (gate?.yields) return new Promise((resolve) => setImmediate(resolve)).then(() => this.#timed(request));
    return this.#timed(request);
  }

  #timed(request: ModelRequest): Promise<ModelAnswer> {
    this.calls++;
    const started = performance.now();
    const answer = this.#inner.complete(request);
    this.modelMs += performance.now() - started;
    return answer;
  }
}

/** Prompt size of a request in characters: the sum of its message contents. */
export function promptChars(request: ModelRequest): number {
  return request.messages.reduce((n, m) => n + m.content.length, 0);
}
