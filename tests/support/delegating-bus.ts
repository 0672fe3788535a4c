import type { Bus } from '../../src/bus/bus.js';

/** `inner` with its `publish` replaced: for tests that script how publishes resolve or reject. */
export function withPublish(inner: Bus, publish: Bus['publish']): Bus {
  return {
    reporter: inner.reporter,
    publish,
    subscribe: (subject, handler, options) => inner.subscribe(subject, handler, options),
    request: (subject, data, options) => inner.request(subject, data, options),
    flush: () => inner.flush(),
    close: () => inner.close(),
  };
}
