import { isIP } from 'node:net';

/**
 * Whether a host name or address names this machine only: `localhost` and its subdomains (RFC
 * 6761 reserves them for loopback, and browsers resolve them so), `127.0.0.0/8` and `::1`, with or
 * without the brackets of a URL. The model client lets a loopback server go without an API key;
 * the local web pages refuse a request whose `Host` is not loopback (DNS rebinding). Both ask the
 * same question, so they share this answer.
 */
export function isLoopback(host: string): boolean {
  const bare = host.replace(/^\[|\]$/g, '').toLowerCase();
  if (bare === 'localhost' || bare.endsWith('.localhost')) return true;
  if (isIP(bare) === 4) return bare.startsWith('127.');
  return bare === '::1';
}

/** Whether a URL points at this machine (see `isLoopback`); false for a text that is no URL. */
export function isLoopbackUrl(url: string): boolean {
  return URL.canParse(url) && isLoopback(new URL(url).hostname);
}
