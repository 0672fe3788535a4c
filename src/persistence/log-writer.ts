import { writeSync } from 'node:fs';
import { type FileHandle, open } from 'node:fs/promises';
import { LogWriteError } from '../errors.js';
import { isClosingEvent, type RunEvent } from '../schemas/index.js';
import { findLogEnd } from './log-end.js';
import { renderEvent } from './markdown-log.js';

/** Options of `LogWriter`. */
export interface LogWriterOptions {
  /** The log file; created if missing, appended to if it already holds this run, never truncated. */
  path: string;
  /** The run whose events this writer takes; an event of another run is refused. */
  runId: string;
  /**
   * The seq of the first event this writer takes (a resumed run's `run.resumed`): the file must
   * end right before it, else opening fails (the log changed after the resume read it).
   */
  continuesAt?: number;
  /** Told once, with the first failure; the run must stop, since the log is not best-effort. */
  onError: (error: LogWriteError) => void;
}

interface Waiter {
  seq: number;
  resolve: () => void;
  reject: (error: LogWriteError) => void;
}

const message = (error: unknown): string => (error instanceof Error ? error.message : String(error));

/**
 * The one ordered writer of one run's log. `append` takes events in any order and holds each until
 * every lower seq has arrived; chunks are written in seq order through one append-mode handle, and
 * the chunks rendered in one turn of the event loop (or while a write is in flight) go out together
 * in one write, so a burst of events costs one system call. The first failure is final: it is
 * reported to `onError`, rejects `flushed()` and `close()`, and every later `append` throws it.
 *
 * It runs on the event loop that runs the charts. Opening a log uses Node's asynchronous file
 * API; finding where an existing one ends reads its head and tail synchronously (`findLogEnd`), and
 * appending to a regular file is one `writeSync` at the end of the turn (see `#writeInline`: both
 * cheaper than the thread pool's hand-off), and to a device or pipe an asynchronous write.
 *
 * The constructor starts opening the file and accepts events at once; `LogWriter.open` waits
 * until the file is open and checked. Events come validated from the bus, so they are not parsed
 * again here.
 */
export class LogWriter {
  readonly path: string;
  readonly runId: string;
  /** Settles when the file is open and checked: rejects with the `LogWriteError` that prevented it. */
  readonly ready: Promise<void>;
  readonly #onError: (error: LogWriteError) => void;
  readonly #continuesAt: number | undefined;
  #handle: FileHandle | null = null;
  /** Events that arrived before a lower seq did, or before the file was open. */
  readonly #held = new Map<number, RunEvent>();
  /** The seq to render next; anything lower is rendered, or was already in the file. */
  #nextSeq = 1;
  #chunks: string[] = [];
  #inFlight = false;
  /** A regular file is written with `writeSync`; a device or pipe through the thread pool. */
  #writesInline = false;
  /** The inline write scheduled for the end of this turn of the event loop, if any. */
  #inlineWrite: NodeJS.Immediate | null = null;
  #writtenSeq = 0;
  #highestSeq = 0;
  /** The seq of the run's closing event once appended (or found in a resumed file): the log ends there. */
  #endSeq: number | null = null;
  #waiters: Waiter[] = [];
  #failure: LogWriteError | null = null;
  #closed = false;
  #closing: Promise<void> | null = null;
  #releasing: Promise<void> | null = null;

  constructor(options: LogWriterOptions) {
    this.path = options.path;
    this.runId = options.runId;
    this.#onError = options.onError;
    this.#continuesAt = options.continuesAt;
    this.ready = this.#open();
    // The rejection is reported through #fail; callers that await `ready` see it as well.
    this.ready.then(
      () => {
        this.#settle();
        this.#drain();
      },
      (error: unknown) => this.#fail(error, 'cannot open'),
    );
  }

  /** Opens the log of `runId` at `path`; rejects with `LogWriteError` if it cannot, or if it holds another run. */
  static async open(options: LogWriterOptions): Promise<LogWriter> {
    const writer = new LogWriter(options);
    await writer.ready;
    return writer;
  }

  /**
   * Queues one event. Duplicates and events already in a resumed file are ignored (delivery is
   * at-least-once). The run's closing event ends the log: an event after it is refused with a
   * `LogWriteError` (the writer stays usable), and events held above it are dropped.
   */
  append(event: RunEvent): void {
    if (this.#failure !== null) throw this.#failure;
    if (event.runId !== this.runId) {
      throw new LogWriteError(
        `event of run ${event.runId} given to the log of run ${this.runId} (${this.path})`,
      );
    }
    if (this.#endSeq !== null && event.seq > this.#endSeq) {
      throw new LogWriteError(
        `${event.type} (seq ${event.seq}) of run ${this.runId} comes after its closing event (seq ${this.#endSeq}); the log ${this.path} ends there`,
      );
    }
    if (this.#endSeq !== null && isClosingEvent(event) && event.seq !== this.#endSeq) {
      throw new LogWriteError(
        `${event.type} (seq ${event.seq}) of run ${this.runId} is a second closing event; the log ${this.path} ends at seq ${this.#endSeq}`,
      );
    }
    if (event.seq < this.#nextSeq || this.#held.has(event.seq)) return;
    if (this.#closed)
      throw new LogWriteError(`the log ${this.path} is closed; event seq ${event.seq} was not written`);
    if (isClosingEvent(event)) this.#end(event.seq);
    this.#held.set(event.seq, event);
    if (event.seq > this.#highestSeq) this.#highestSeq = event.seq;
    this.#drain();
  }

  /**
   * The seq that events held back wait for, or null when none waits (every event appended so far
   * is written or on its way). Before `ready` the file's last seq is unknown, so this is a guess.
   */
  get missingSeq(): number | null {
    return this.#held.size === 0 ? null : this.#nextSeq;
  }

  /** The seq of the run's closing event, once appended or found at the end of a resumed log; else null. */
  get endSeq(): number | null {
    return this.#endSeq;
  }

  /** The events held back behind `missingSeq`, in seq order. */
  waiting(): RunEvent[] {
    return [...this.#held.values()].sort((a, b) => a.seq - b.seq);
  }

  /** Resolves when every event appended so far is written (a missing seq holds back those after it). */
  flushed(): Promise<void> {
    if (this.#failure !== null) return Promise.reject(this.#failure);
    if (this.#writtenSeq >= this.#highestSeq) return Promise.resolve();
    return new Promise((resolve, reject) => this.#waiters.push({ seq: this.#highestSeq, resolve, reject }));
  }

  /**
   * Closes the log once every event up to the highest seq appended so far is written: unlike
   * `close`, it waits for a missing seq (over NATS an earlier event may still be on its way).
   */
  finish(): Promise<void> {
    return this.flushed().then(() => this.close());
  }

  /**
   * Waits for the queued writes, then releases the file. Rejects with `LogWriteError` when an
   * event could not be written: the file could not be opened or written, or a seq never arrived.
   */
  close(): Promise<void> {
    this.#closing ??= this.#close();
    return this.#closing;
  }

  async #close(): Promise<void> {
    this.#closed = true;
    await this.ready.catch(() => undefined); // an open failure is already recorded in #failure
    // What is rendered goes to the file now, even if a missing seq fails the close below.
    if (this.#inlineWrite !== null) this.#writeInline();
    if (this.#failure === null && this.#held.size > 0) {
      // Everything contiguous is rendered by now, so what is held waits behind a missing seq.
      const seqs = [...this.#held.keys()].sort((a, b) => a - b);
      this.#fail(
        new Error(`events ${seqs.join(', ')} still wait for seq ${this.#nextSeq}`),
        'closed before writing all events to',
      );
    }
    if (this.#failure === null) await this.flushed();
    await this.#release();
    if (this.#failure !== null) throw this.#failure;
  }

  async #open(): Promise<void> {
    let handle: FileHandle;
    // A new log is created exclusively, so two writers can never share one file; only an existing
    // log of this very run is opened for appending (a resume).
    let created = true;
    try {
      handle = await open(this.path, 'wx');
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') {
        throw new LogWriteError(`cannot open ${this.path}: ${message(error)}`, { cause: error });
      }
      created = false;
      try {
        handle = await open(this.path, 'a');
      } catch (error2) {
        throw new LogWriteError(`cannot open ${this.path}: ${message(error2)}`, { cause: error2 });
      }
    }
    try {
      const found = created
        ? { last: null, keep: null, regularFile: true }
        : await findLogEnd(handle, {
            path: this.path,
            runId: this.runId,
            resumed: this.#continuesAt !== undefined,
          });
      // A log that ends with its closing event closes the writer at that seq.
      if (found.last !== null && isClosingEvent(found.last)) this.#end(found.last.seq);
      this.#nextSeq = (found.last?.seq ?? 0) + 1;
      const expected = this.#continuesAt;
      if (expected !== undefined && this.#nextSeq !== expected) {
        const what = created ? 'did not exist' : `ends at seq ${this.#nextSeq - 1}`;
        throw new LogWriteError(
          `${this.path} ${what}, but the resumed run continues at seq ${expected}: the log changed after the resume read it`,
        );
      }
      // The torn end of a write the crash cut short goes before the resumed run's first event.
      if (found.keep !== null) await handle.truncate(found.keep);
      this.#writesInline = found.regularFile;
    } catch (error) {
      await handle.close().catch(() => undefined); // the refusal below is the error that matters
      throw error instanceof LogWriteError
        ? error
        : new LogWriteError(`cannot read ${this.path}: ${message(error)}`, { cause: error });
    }
    this.#handle = handle;
    for (const seq of this.#held.keys()) if (seq < this.#nextSeq) this.#held.delete(seq);
    this.#writtenSeq = this.#nextSeq - 1;
  }

  /** Records the closing event's seq: nothing above it is ever written. */
  #end(seq: number): void {
    this.#endSeq = seq;
    for (const held of this.#held.keys()) if (held > seq) this.#held.delete(held);
    if (this.#highestSeq > seq) this.#highestSeq = seq;
  }

  /** Renders every held event whose predecessors are rendered, and starts a write if none is in flight. */
  #drain(): void {
    const handle = this.#handle;
    if (handle === null || this.#failure !== null) return;
    let held = this.#held.get(this.#nextSeq);
    while (held !== undefined) {
      this.#held.delete(this.#nextSeq);
      this.#chunks.push(renderEvent(held));
      held = this.#held.get(++this.#nextSeq);
    }
    if (this.#inFlight || this.#chunks.length === 0) return;
    this.#inFlight = true;
    if (this.#writesInline) {
      // Once the events that arrive in this turn of the event loop are rendered too: one write for them all.
      this.#inlineWrite = setImmediate(() => this.#writeInline());
      return;
    }
    const data = Buffer.from(this.#chunks.join(''), 'utf8');
    const upTo = this.#nextSeq - 1;
    this.#chunks = [];
    writeAll(handle, data).then(
      () => this.#written(upTo),
      (error: unknown) => this.#fail(error, 'cannot write'),
    );
  }

  /**
   * Appends what is rendered to a regular file with `writeSync`, as Node writes `process.stdout`
   * to a file: a few kilobytes go to the page cache in microseconds, less than handing the write
   * to the thread pool costs (waking a thread, a promise, a callback: about ten times the write on
   * a 2-core machine, docs/benchmarks.md section 8). A device or pipe, whose reader may not read,
   * is written asynchronously, so that it never holds the event loop.
   */
  #writeInline(): void {
    if (this.#inlineWrite !== null) clearImmediate(this.#inlineWrite);
    this.#inlineWrite = null;
    const handle = this.#handle;
    if (handle === null || this.#failure !== null) {
      this.#inFlight = false;
      return;
    }
    const data = Buffer.from(this.#chunks.join(''), 'utf8');
    const upTo = this.#nextSeq - 1;
    this.#chunks = [];
    try {
      let offset = 0;
      while (offset < data.length) offset += writeSync(handle.fd, data, offset);
    } catch (error) {
      this.#fail(error, 'cannot write');
      return;
    }
    this.#written(upTo);
  }

  #written(upTo: number): void {
    this.#inFlight = false;
    this.#writtenSeq = upTo;
    this.#settle();
    this.#drain();
  }

  /** Resolves the `flushed()` calls whose events are all in the file. */
  #settle(): void {
    if (this.#waiters.length === 0) return;
    const waiting: Waiter[] = [];
    for (const w of this.#waiters) {
      if (w.seq <= this.#writtenSeq) w.resolve();
      else waiting.push(w);
    }
    this.#waiters = waiting;
  }

  #fail(error: unknown, what: string): void {
    if (this.#failure !== null) return;
    this.#failure =
      error instanceof LogWriteError
        ? error
        : new LogWriteError(`${what} ${this.path}: ${message(error)}`, { cause: error });
    this.#held.clear();
    this.#chunks = [];
    for (const w of this.#waiters) w.reject(this.#failure);
    this.#waiters = [];
    this.#onError(this.#failure);
    // Release the handle now: nothing more will be written, and close() may never be called.
    this.#release().catch(() => undefined); // a close error adds nothing to the failure reported above
  }

  /** Closes the handle once; every caller waits for that one close. */
  #release(): Promise<void> {
    this.#releasing ??= this.#closeHandle();
    return this.#releasing;
  }

  async #closeHandle(): Promise<void> {
    const handle = this.#handle;
    this.#handle = null;
    if (handle === null) return;
    try {
      await handle.close();
    } catch (error) {
      this.#fail(error, 'cannot close');
    }
  }
}

/** Writes all of `data` at the end of the file: `FileHandle.write` may write less than asked. */
async function writeAll(handle: FileHandle, data: Uint8Array): Promise<void> {
  let offset = 0;
  while (offset < data.length) {
    const { bytesWritten } = await handle.write(data, offset, data.length - offset);
    offset += bytesWritten;
  }
}
