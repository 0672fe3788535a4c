import { setTimeout as delay } from 'node:timers/promises';
import type { Model, ModelAnswer, ModelRequest } from '../src/roles/model.js';

/**
 * A model's answer after a fixed delay: an I/O-bound model, as a remote one is. The wrapped model
 * answers at once (the demo model, the bench's instant models); `calls` counts the answers given.
 */
export class DelayedModel implements Model {
  readonly name: string;
  calls = 0;
  readonly #inner: Model;
  readonly #delayMs: number;

  constructor(inner: Model, delayMs: number) {
    this.#inner = inner;
    this.#delayMs = delayMs;
    this.name = inner.name;
  }

  async complete(request: ModelRequest): Promise<ModelAnswer> {
    // A worker stopped with 'abort' cancels the wait, as it would cancel an HTTP request, and the
    // call fails with the worker's reason (WorkerStoppedError) rather than a bare AbortError.
    const { signal } = request;
    await delay(this.#delayMs, undefined, signal ? { signal } : {}).catch((error: unknown) => {
      throw signal?.aborted ? signal.reason : error;
    });
    const answer = await this.#inner.complete(request);
    this.calls++;
    return answer;
  }
}
