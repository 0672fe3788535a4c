/**
 * A one-way text channel between two threads over shared memory, as pino's thread-stream is: the
 * writer encodes UTF-8 straight into a `SharedArrayBuffer` ring and publishes how far it wrote;
 * the reader decodes what is there and hands back the space. Sending costs the writer an
 * `encodeInto` and an atomic store: nothing is serialised, queued or allocated, and no thread is
 * woken. Waking a thread costs the waker a system call (about 20 µs on a small VM), so the reader
 * polls, blocked in `Atomics.wait` with a short timeout, while text flows, and sleeps without one
 * when none came for a while; the writer learns from `claimWake` that it has to wake it with
 * `notify` (the reader's `sleep` and the writer's claim are atomic: text is never left unread by
 * a sleeping reader). `notify` also cuts a poll short when the writer waits for an answer.
 *
 * Text is a stream of lines: the reader yields complete lines only, so a writer may stop in the
 * middle of one when the ring is full and go on once the reader has made room. It never splits a
 * character: `encodeInto` stops before one that does not fit, and the bytes left at the physical
 * end of the ring are then filled with NUL, which the reader drops (JSON text and the commands
 * sent here never hold a raw NUL).
 */

/** Indexes in the shared state: positions are byte counts that wrap at 2³², compared modulo it. */
const WRITTEN = 0;
const READ = 1;
/** 1 while the reader sleeps and waits to be woken; whoever turns it back to 0 wakes it. */
const ASLEEP = 2;

/** The shared memory of a ring: pass it to the other thread (it is a structured-cloneable object). */
export interface RingMemory {
  readonly data: SharedArrayBuffer;
  readonly state: SharedArrayBuffer;
}

/** Allocates a ring of `bytes` bytes, a power of two (positions are masked, not divided). */
export function allocateRing(bytes: number): RingMemory {
  if (!Number.isInteger(Math.log2(bytes)) || bytes < 16) {
    throw new RangeError(`a ring holds a power of two of at least 16 bytes, not ${bytes}`);
  }
  return { data: new SharedArrayBuffer(bytes), state: new SharedArrayBuffer(12) };
}

const encoder = new TextEncoder();
/** Bytes UTF-8 needs for any one character (a surrogate pair). */
const WIDEST_CHARACTER = 4;

/** The writing end. Text that does not fit waits in order and goes out as the reader makes room. */
export class RingWriter {
  readonly #data: Uint8Array;
  readonly #state: Int32Array;
  readonly #mask: number;
  /** Where the next byte goes; published to the reader by `#publish`. */
  #cursor: number;
  /** Text that found no room yet; while any waits, later text waits behind it. */
  #backlog: string[] = [];

  constructor(memory: RingMemory) {
    this.#data = new Uint8Array(memory.data);
    this.#state = new Int32Array(memory.state);
    this.#mask = memory.data.byteLength - 1;
    this.#cursor = Atomics.load(this.#state, WRITTEN);
  }

  /** Text still waiting for room in the ring. */
  get backlogged(): boolean {
    return this.#backlog.length > 0;
  }

  /**
   * Puts the texts in the ring, one after the other, or behind the backlog; returns false when
   * some of them have to wait. Several texts rather than one joined string: joining a line's
   * prefix to a long JSON text would copy the JSON once more before it is encoded.
   */
  write(...texts: string[]): boolean {
    for (let i = 0; i < texts.length; i++) {
      if (this.#backlog.length > 0) {
        this.#backlog.push(texts[i]!);
        continue;
      }
      const rest = this.#put(texts[i]!);
      if (rest !== '') this.#backlog.push(rest);
    }
    return this.#backlog.length === 0;
  }

  /** Moves what it can of the backlog into the ring; returns whether the backlog is now empty. */
  retry(): boolean {
    while (this.#backlog.length > 0) {
      const rest = this.#put(this.#backlog[0]!);
      if (rest !== '') {
        this.#backlog[0] = rest;
        return false;
      }
      this.#backlog.shift();
    }
    return true;
  }

  /** True once after the reader went to sleep: the caller must then wake it with `notify`. */
  claimWake(): boolean {
    return Atomics.compareExchange(this.#state, ASLEEP, 1, 0) === 1;
  }

  /** Wakes the reader if it waits, asleep or between two polls. */
  notify(): void {
    Atomics.notify(this.#state, WRITTEN);
  }

  /** Encodes as much of `text` as the ring has room for, publishes it, and returns the rest. */
  #put(text: string): string {
    const size = this.#mask + 1;
    let rest = text;
    while (rest !== '') {
      const free = size - ((this.#cursor - Atomics.load(this.#state, READ)) | 0);
      if (free < WIDEST_CHARACTER) break;
      const at = this.#cursor & this.#mask;
      const end = Math.min(size, at + free);
      const { read, written } = encoder.encodeInto(rest, this.#data.subarray(at, end));
      this.#cursor = (this.#cursor + written) | 0;
      rest = read === rest.length ? '' : rest.slice(read);
      if (rest === '' || end < size) continue; // done, or out of room (the loop's check stops it)
      // The next character did not fit before the physical end: fill the gap, go on at 0.
      const gap = size - (at + written);
      this.#data.fill(0, at + written, size);
      this.#cursor = (this.#cursor + gap) | 0;
    }
    Atomics.store(this.#state, WRITTEN, this.#cursor);
    return rest;
  }
}

/** The reading end: complete lines, in order, as they arrive. */
export class RingReader {
  readonly #data: SharedArrayBuffer;
  readonly #state: Int32Array;
  readonly #mask: number;
  /** The start of a line whose end has not arrived yet. */
  #partial = '';

  constructor(memory: RingMemory) {
    this.#data = memory.data;
    this.#state = new Int32Array(memory.state);
    this.#mask = memory.data.byteLength - 1;
  }

  /** The complete lines that arrived since the last call (possibly none); frees their space. */
  read(): string[] {
    const written = Atomics.load(this.#state, WRITTEN);
    const read = Atomics.load(this.#state, READ);
    const length = (written - read) | 0;
    if (length === 0) return [];
    const at = read & this.#mask;
    const size = this.#mask + 1;
    let text =
      at + length <= size
        ? this.#decode(at, length)
        : this.#decode(at, size - at) + this.#decode(0, length - (size - at));
    Atomics.store(this.#state, READ, written);
    // The filling before a wrap; nothing else sent here holds a NUL.
    if (text.includes('\0')) text = text.replaceAll('\0', '');
    const lines = (this.#partial + text).split('\n');
    this.#partial = lines.pop()!;
    return lines;
  }

  /**
   * Marks the reader asleep unless text is waiting: returns false (and stays awake) if there is
   * some. Once asleep, the next writer to `claimWake` must `notify` it.
   */
  sleep(): boolean {
    Atomics.store(this.#state, ASLEEP, 1);
    if (Atomics.load(this.#state, WRITTEN) === Atomics.load(this.#state, READ)) return true;
    Atomics.store(this.#state, ASLEEP, 0);
    return false;
  }

  /**
   * Blocks the thread until the writer publishes more than was read, or `timeoutMs` pass
   * (`Infinity`: until woken). Only for a thread that has nothing else to do.
   */
  wait(timeoutMs: number): void {
    Atomics.wait(this.#state, WRITTEN, Atomics.load(this.#state, READ), timeoutMs);
  }

  #decode(at: number, length: number): string {
    return Buffer.from(this.#data, at, length).toString('utf8');
  }
}
