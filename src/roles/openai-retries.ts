import { setTimeout as sleep } from 'node:timers/promises';
import type { APIError } from 'openai';

/**
 * When a model call is tried again. The rules are the SDK's (its README, "Retries"): connection
 * errors and timeouts, 408, 409, 429 and 5xx, or whatever the server's `x-should-retry` says; the
 * wait is what `retry-after-ms` / `retry-after` ask, else 0.5 s doubling to 8 s minus up to 25 %
 * jitter. pge adds two refusals: a wait longer than a minute (a daily quota, say) and OpenAI's
 * `insufficient_quota`, which no wait fixes. The SDK's own retries are switched off
 * (`maxRetries: 0`) because it has no hook to refuse one: only the server's header can.
 */

/** The SDK's module, loaded at the first model call (see `openai-model.ts`). */
type Sdk = typeof import('openai');

/** Longest `retry-after` pge waits for; a longer one ends the call at once. */
export const MAX_RETRY_WAIT_MS = 60_000;

const RETRIED_STATUSES = new Set([408, 409, 429]);

/** The wait the server asks for, in ms: `retry-after-ms`, else `retry-after` in seconds or as a date. */
export function retryAfterMs(headers: Headers | undefined): number | null {
  const ms = Number.parseFloat(headers?.get('retry-after-ms') ?? '');
  if (!Number.isNaN(ms)) return ms;
  const value = headers?.get('retry-after');
  if (!value) return null;
  const seconds = Number.parseFloat(value);
  const wait = Number.isNaN(seconds) ? Date.parse(value) - Date.now() : seconds * 1000;
  return Number.isNaN(wait) ? null : wait;
}

/** OpenAI's answer when the key's account has no quota left: a 429 that no wait fixes. */
export function isQuotaExhausted(error: APIError): boolean {
  return error.status === 429 && (error.code === 'insufficient_quota' || error.type === 'insufficient_quota');
}

function backoffMs(retry: number): number {
  return Math.min(500 * 2 ** retry, 8000) * (1 - Math.random() * 0.25);
}

/** How long to wait before retry number `retry` (from 0) of a call that failed with `error`; null: give up. */
export function retryDelayMs(error: unknown, retry: number, sdk: Sdk): number | null {
  if (error instanceof sdk.APIConnectionError) return backoffMs(retry);
  if (!(error instanceof sdk.APIError) || error.status === undefined || isQuotaExhausted(error)) return null;
  const told = error.headers?.get('x-should-retry');
  if (told === 'false') return null;
  if (told !== 'true' && !RETRIED_STATUSES.has(error.status) && error.status < 500) return null;
  const asked = retryAfterMs(error.headers);
  if (asked !== null && asked > MAX_RETRY_WAIT_MS) return null;
  return Math.max(0, asked ?? backoffMs(retry));
}

/** How `withRetries` tries: at most `maxRetries` retries, each after `delayOf`'s wait. */
export interface RetryPolicy {
  maxRetries: number;
  /** The wait before retry number `retry` (from 0) after `error`, or null to give up. */
  delayOf: (error: unknown, retry: number) => number | null;
  /** The error to throw when giving up, from the last one and the number of attempts made. */
  giveUp: (error: unknown, attempts: number) => unknown;
  /** Aborts a wait between attempts too, rejecting with the signal's reason. */
  signal?: AbortSignal | undefined;
}

/** Calls `attempt` until it resolves, or until `policy` gives up on it. */
export async function withRetries<T>(attempt: () => Promise<T>, policy: RetryPolicy): Promise<T> {
  for (let attempts = 1; ; attempts += 1) {
    try {
      return await attempt();
    } catch (error) {
      const wait = attempts <= policy.maxRetries ? policy.delayOf(error, attempts - 1) : null;
      if (wait === null) throw policy.giveUp(error, attempts);
      // The SDK's own wait could not be cut short; this one ends with the call's signal.
      await sleep(wait, undefined, { signal: policy.signal }).catch(() => {
        throw policy.signal?.reason ?? error;
      });
    }
  }
}
