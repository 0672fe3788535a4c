/**
 * pge's one retry policy: a pause that starts at a caller's first and doubles up to its longest,
 * less up to a quarter at random (the OpenAI SDK's own jitter, which the model calls must keep),
 * so that processes cut off together do not all ask again at the same moment. Each caller names
 * only what differs: which failures are worth another try, its first and longest pause, its
 * deadline or number of retries, its signal, and the error it gives up with.
 *
 * A module of its own rather than p-retry, which takes each pause from its options (not from the
 * failure, where a server's `retry-after` is) and whose jitter only lengthens a pause (×1–2), so
 * the SDK's rules could not be kept; what is left is some fifty lines.
 */

/** The share of a pause that jitter may take off it. */
export const JITTER = 0.25;

/** A caller's pauses: the first, and the longest one that doubling reaches. */
export interface Backoff {
  /** Milliseconds of the first pause, before jitter. */
  readonly firstMs: number;
  /** Milliseconds that no pause exceeds. */
  readonly maxMs: number;
}

/** The pause before retry number `retry` (from 0): `firstMs` doubled `retry` times, capped, less the jitter. */
export function backoffMs(retry: number, { firstMs, maxMs }: Backoff): number {
  return Math.min(firstMs * 2 ** retry, maxMs) * (1 - Math.random() * JITTER);
}

/** Which failures a caller retries, and after how long. */
export interface RetryPolicy extends Backoff {
  /** Whether `error` is worth another try (every failure when left out); one that is not is final at once. */
  readonly retryable?: (error: unknown) => boolean;
  /** A wait that `error` itself asks for (a server's `retry-after`), taken instead of the backoff. */
  readonly askedMs?: (error: unknown) => number | null;
}

/** How long to wait before retry number `retry` (from 0) after `error`, or null when it is not retried. */
export function pauseMs(error: unknown, retry: number, policy: RetryPolicy): number | null {
  if (policy.retryable !== undefined && !policy.retryable(error)) return null;
  return Math.max(0, policy.askedMs?.(error) ?? backoffMs(retry, policy));
}

/** Options of `retry`: its policy, and when it stops. */
export interface RetryOptions extends RetryPolicy {
  /**
   * A `performance.now()` time from which a failure is final. A pause that would end after it is
   * cut to end at it, so that jitter never shortens the time a caller keeps trying; a caller that
   * bounds its attempts by the time left gives up on time.
   */
  readonly deadline?: number;
  /** Retries after the first attempt at most (no bound when left out). */
  readonly maxRetries?: number;
  /** Ends a pause, and stops before the next attempt, rejecting with the signal's reason. */
  readonly signal?: AbortSignal | undefined;
  /** The error thrown for the last failure, from it and the attempts made (the failure itself when left out). */
  readonly giveUp?: (error: unknown, attempts: number) => unknown;
}

/**
 * Calls `attempt` (with its number, from 1) until it resolves: a failure that `options` retries is
 * tried again after its pause, until the deadline or the number of retries is reached; the last
 * failure is thrown through `giveUp`.
 */
export async function retry<T>(attempt: (attempts: number) => Promise<T>, options: RetryOptions): Promise<T> {
  const { deadline = Number.POSITIVE_INFINITY, maxRetries = Number.POSITIVE_INFINITY, signal } = options;
  for (let attempts = 1; ; attempts++) {
    signal?.throwIfAborted();
    try {
      return await attempt(attempts);
    } catch (error) {
      const pause = attempts <= maxRetries ? pauseMs(error, attempts - 1, options) : null;
      const left = deadline - performance.now();
      if (pause === null || left <= 0)
        throw options.giveUp === undefined ? error : options.giveUp(error, attempts);
      await sleep(Math.min(pause, left), signal);
    }
  }
}

/**
 * Growing pauses for a loop that looks again until something holds (a lock comes free): each call
 * waits the next pause of `backoff`, and rejects with `signal`'s reason when it aborts.
 */
export function pacer(backoff: Backoff, signal?: AbortSignal): () => Promise<void> {
  let waited = 0;
  return () => sleep(backoffMs(waited++, backoff), signal);
}

/** Waits `ms`; rejects with `signal`'s reason (not an `AbortError`, as `node:timers/promises` does) once it aborts. */
function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
