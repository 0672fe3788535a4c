import type { APIError } from 'openai';
import type { RetryPolicy } from '../retry.js';

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

/**
 * The SDK's rules as a `RetryPolicy`: its pauses (0.5 s doubling to 8 s, less `retry.ts`'s jitter,
 * which is the SDK's), the failures it retries, and the waits its server asks for.
 */
export function modelRetries(sdk: Sdk): RetryPolicy {
  return {
    firstMs: 500,
    maxMs: 8_000,
    retryable: (error) => {
      if (error instanceof sdk.APIConnectionError) return true;
      if (!(error instanceof sdk.APIError) || error.status === undefined || isQuotaExhausted(error))
        return false;
      const told = error.headers?.get('x-should-retry');
      if (told === 'false') return false;
      if (told !== 'true' && !RETRIED_STATUSES.has(error.status) && error.status < 500) return false;
      return (retryAfterMs(error.headers) ?? 0) <= MAX_RETRY_WAIT_MS;
    },
    askedMs: (error) => (error instanceof sdk.APIError ? retryAfterMs(error.headers) : null),
  };
}
