import { describe, expect, it } from 'vitest';
import { allocateRing, RingReader, RingWriter } from '../../src/persistence/log-ring.js';

/** Reads everything sent, moving the writer's backlog in as the reader makes room, as the two threads do. */
function drain(writer: RingWriter, reader: RingReader): string[] {
  const lines: string[] = [];
  do lines.push(...reader.read());
  while (!writer.retry());
  lines.push(...reader.read());
  return lines;
}

describe('the shared-memory ring of the log thread', () => {
  it('carries lines in order across many wraps, multi-byte characters included', () => {
    const memory = allocateRing(64);
    const writer = new RingWriter(memory);
    const reader = new RingReader(memory);
    const sent: string[] = [];
    const received: string[] = [];
    // Lengths and characters chosen so that 1-, 2-, 3- and 4-byte characters meet the ring's end.
    const pieces = ['a', 'é', '€', '𝄞', 'json {"k":"v"}'];
    for (let i = 0; i < 400; i++) {
      const line = `${i} ${pieces[i % pieces.length]!.repeat(1 + (i % 7))}`;
      sent.push(line);
      writer.write(`${line}\n`);
      if (i % 3 === 2) received.push(...drain(writer, reader));
    }
    received.push(...drain(writer, reader));
    expect(received).toEqual(sent);
  });

  it('holds back what does not fit, in order, and yields only complete lines', () => {
    const memory = allocateRing(32);
    const writer = new RingWriter(memory);
    const reader = new RingReader(memory);
    const long = `${'x'.repeat(100)}`;
    expect(writer.write(`${long}\n`)).toBe(false);
    expect(writer.backlogged).toBe(true);
    // Later text waits behind the backlog even when it would fit.
    expect(writer.write('short\n')).toBe(false);
    expect(reader.read()).toEqual([]); // 32 bytes of a 101-byte line: no complete line yet
    expect(drain(writer, reader)).toEqual([long, 'short']);
    expect(writer.backlogged).toBe(false);
    expect(writer.write('next\n')).toBe(true);
    expect(reader.read()).toEqual(['next']);
  });

  it('lets a writer know, once, that the reader went to sleep', () => {
    const memory = allocateRing(64);
    const writer = new RingWriter(memory);
    const reader = new RingReader(memory);
    expect(writer.claimWake()).toBe(false); // awake: nothing to claim
    expect(reader.sleep()).toBe(true);
    writer.write('one\n');
    expect(writer.claimWake()).toBe(true);
    expect(writer.claimWake()).toBe(false); // someone already woke it
    // Text waiting when the reader would sleep keeps it awake.
    expect(reader.sleep()).toBe(false);
    expect(writer.claimWake()).toBe(false);
    expect(reader.read()).toEqual(['one']);
  });

  it('waits until text comes or the timeout passes', () => {
    const memory = allocateRing(64);
    const writer = new RingWriter(memory);
    const reader = new RingReader(memory);
    let started = performance.now();
    reader.wait(20);
    expect(performance.now() - started).toBeGreaterThanOrEqual(15);
    writer.write('ready\n');
    started = performance.now();
    reader.wait(10_000);
    expect(performance.now() - started).toBeLessThan(1_000);
    expect(reader.read()).toEqual(['ready']);
  });

  it('takes only a power of two of at least 16 bytes', () => {
    expect(() => allocateRing(100)).toThrow(RangeError);
    expect(() => allocateRing(8)).toThrow(RangeError);
    expect(allocateRing(1024).data.byteLength).toBe(1024);
  });
});
