import { describe, expect, it } from 'vitest';
import { isLoopback, isLoopbackUrl } from '../../src/loopback.js';

/**
 * One answer to "is this host this machine?", for the model client (a loopback server needs no
 * API key) and the local web pages (a request must name a loopback host: no DNS rebinding).
 */
describe('isLoopback', () => {
  it.each(['localhost', 'LOCALHOST', 'pge.localhost', '127.0.0.1', '127.8.9.10', '::1', '[::1]'])(
    '%s is loopback',
    (host) => expect(isLoopback(host)).toBe(true),
  );

  it.each([
    '127.evil.example',
    '127.0.0.1.nip.io',
    'localhost.example',
    '0.0.0.0',
    '10.0.0.1',
    '::',
    'example.com',
    '',
  ])('%s is not', (host) => expect(isLoopback(host)).toBe(false));

  it('reads the host of a URL, and says no for a text that is no URL', () => {
    expect(isLoopbackUrl('http://127.0.0.1:11434/v1')).toBe(true);
    expect(isLoopbackUrl('http://[::1]:8000/v1')).toBe(true);
    expect(isLoopbackUrl('http://127.evil.example/v1')).toBe(false);
    expect(isLoopbackUrl('127.0.0.1:8000')).toBe(false);
  });
});
