import { describe, expect, it, vi } from 'vitest';
import { Delivery, NO_HEADERS } from '../../src/bus/bus.js';
import { InProcessBus } from '../../src/bus/in-process-bus.js';

describe('Delivery', () => {
  it('decodes headers given as a function only when first read, and once', async () => {
    const bus = new InProcessBus();
    const decode = vi.fn(() => Object.freeze({ traceparent: '00-abc-def-01' }));
    const delivery = new Delivery(bus, 'pge.test', { n: 1 }, null, decode);
    expect(decode).not.toHaveBeenCalled();
    expect(delivery.headers).toEqual({ traceparent: '00-abc-def-01' });
    expect(delivery.headers).toBe(delivery.headers);
    expect(decode).toHaveBeenCalledTimes(1);
    await bus.close();
  });

  it('keeps headers given as a value, and none by default', async () => {
    const bus = new InProcessBus();
    const headers = Object.freeze({ a: '1' });
    expect(new Delivery(bus, 'pge.test', null, null, headers).headers).toBe(headers);
    expect(new Delivery(bus, 'pge.test', null, null).headers).toBe(NO_HEADERS);
    await bus.close();
  });
});
