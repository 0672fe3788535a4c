/**
 * Settles as `call` does, or rejects with the signal's reason as soon as `signal` aborts, for work
 * that may not heed its signal (a model, a tool, a validator written by someone else). The
 * listener is removed once `call` settles, so a long-lived signal does not collect them.
 */
export function raceAbort<T>(call: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) {
    // The call was started all the same: its own end (often the same abort) is nobody's to hear.
    call.catch(() => undefined);
    return Promise.reject(signal.reason);
  }
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    call.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
}
