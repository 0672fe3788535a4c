import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import { LogWriteError } from '../errors.js';
import type { RunEvent } from '../schemas/index.js';
import { allocateRing, type RingMemory, RingWriter } from './log-ring.js';
import { COMMAND, type FromLogThread, type ToLogThread } from './log-thread-protocol.js';
import type { LogWriterOptions } from './log-writer.js';

/**
 * A run's log written on the log thread (`log-thread.ts`), as pino writes through a worker
 * thread: the caller's thread only turns each event into JSON and copies it into a ring of shared
 * memory (`log-ring.ts`), which the thread polls while events flow; rendering the markdown and
 * writing the file (with sync calls: the thread has nothing else to do) happen on another core.
 * It has the surface and the guarantees of `LogWriter`, which does the work on the thread: ordered
 * by seq, duplicates ignored, created exclusively, the first failure final and reported once to
 * `onError`.
 *
 * One thread serves every log of the process. It starts with the first writer and keeps the
 * process alive only while a writer is open. If it dies, every open writer fails with a
 * `LogWriteError` and the next writer starts a new one.
 */
export class ThreadedLogWriter {
  readonly path: string;
  readonly runId: string;
  readonly #id: number;
  readonly #thread: LogThread;
  readonly #onError: (error: LogWriteError) => void;
  #failure: LogWriteError | null = null;
  #closing: Promise<void> | null = null;
  /** No more events: `close` was called, or `finish` is done (until then it takes the events it waits for). */
  #closed = false;

  constructor(options: LogWriterOptions) {
    this.path = options.path;
    this.runId = options.runId;
    this.#onError = options.onError;
    this.#thread = LogThread.shared();
    this.#id = this.#thread.open(this, options.path, options.runId);
  }

  /** Queues one event (see `LogWriter.append`); throws the writer's failure once it has one. */
  append(event: RunEvent): void {
    if (this.#failure !== null) throw this.#failure;
    if (event.runId !== this.runId) {
      throw new LogWriteError(
        `event of run ${event.runId} given to the log of run ${this.runId} (${this.path})`,
      );
    }
    if (this.#closed)
      throw new LogWriteError(`the log ${this.path} is closed; event seq ${event.seq} was not written`);
    this.#thread.append(this.#id, JSON.stringify(event));
  }

  /** Resolves when every event appended so far is on disk; rejects with the writer's failure. */
  flushed(): Promise<void> {
    if (this.#failure !== null) return Promise.reject(this.#failure);
    return this.#thread.request((token) => ['flush', this.#id, token]);
  }

  /** Waits for the queued writes and releases the file; rejects with `LogWriteError` if any failed. */
  close(): Promise<void> {
    return this.#end('close');
  }

  /** Closes the log once every event up to the highest seq appended is written (see `LogWriter.finish`). */
  finish(): Promise<void> {
    return this.#end('finish');
  }

  #end(how: 'close' | 'finish'): Promise<void> {
    if (how === 'close') this.#closed = true;
    this.#closing ??= this.#thread
      .request((token) => [how, this.#id, token])
      .finally(() => {
        this.#closed = true;
        this.#thread.release(this.#id);
      })
      .then(() => {
        if (this.#failure !== null) throw this.#failure;
      });
    return this.#closing;
  }

  /** Called by the thread with the writer's first failure. */
  fail(error: LogWriteError): void {
    if (this.#failure !== null) return;
    this.#failure = error;
    this.#onError(error);
  }
}

/** The ring's size: about 40 runs' worth of events before a writer has to wait for the thread. */
const RING_BYTES = 4 * 1024 * 1024;
/** How long text that found the ring full waits before it tries again. */
const RETRY_MS = 1;

interface Pending {
  resolve(): void;
  reject(error: LogWriteError): void;
}

/** The main side of the log thread: numbering, the ring, replies, and the thread's lifetime. */
class LogThread {
  static #shared: LogThread | null = null;

  /** The process's log thread, started if there is none (or the last one died). */
  static shared(): LogThread {
    LogThread.#shared ??= new LogThread();
    return LogThread.#shared;
  }

  /** The running thread, if any. */
  static current(): LogThread | null {
    return LogThread.#shared;
  }

  readonly #worker: Worker;
  readonly #ring: RingWriter;
  readonly #writers = new Map<number, ThreadedLogWriter>();
  readonly #pending = new Map<number, Pending>();
  /** The retry of text that found the ring full. */
  #retrying: NodeJS.Timeout | null = null;
  #next = 1;
  #dead: LogWriteError | null = null;
  readonly #retry = (): void => {
    this.#retrying = null;
    if (this.#dead !== null) return;
    if (!this.#ring.retry()) this.#retrying = setTimeout(this.#retry, RETRY_MS);
    if (this.#ring.claimWake()) this.#ring.notify();
  };

  private constructor() {
    const memory = allocateRing(RING_BYTES);
    this.#ring = new RingWriter(memory);
    this.#worker = startWorker(memory);
    this.#worker.unref();
    this.#worker.on('message', (batch: FromLogThread[]) => {
      for (const message of batch) this.#receive(message);
    });
    this.#worker.on('error', (error) => this.#die(`the log thread failed: ${error.message}`));
    this.#worker.on('exit', (code) => this.#die(`the log thread exited with code ${code}`));
  }

  open(writer: ThreadedLogWriter, path: string, runId: string): number {
    const id = this.#next++;
    if (this.#dead !== null) {
      const error = this.#dead;
      queueMicrotask(() => writer.fail(error));
      return id;
    }
    // An open writer keeps the process alive until its log is closed, as an open file would.
    if (this.#writers.size === 0) this.#worker.ref();
    this.#writers.set(id, writer);
    this.send(['open', id, path, runId]);
    return id;
  }

  release(id: number): void {
    if (this.#writers.delete(id) && this.#writers.size === 0) this.#worker.unref();
  }

  /** Sends a command; one that waits for a reply wakes the thread rather than wait for its next poll. */
  send(command: ToLogThread): void {
    this.#write(command[0] !== 'open', COMMAND, JSON.stringify(command), '\n');
  }

  /** Sends an event's JSON for writer `id`, as the line `<id> <json>` (JSON text holds no raw line break). */
  append(id: number, json: string): void {
    this.#write(false, `${id} `, json, '\n');
  }

  #write(urgent: boolean, ...texts: string[]): void {
    if (this.#dead !== null) return;
    if (!this.#ring.write(...texts)) this.#retrying ??= setTimeout(this.#retry, RETRY_MS);
    if (this.#ring.claimWake() || urgent) this.#ring.notify();
  }

  /** Sends the command built with a fresh token and settles when the thread answers it. */
  request(command: (token: number) => ToLogThread): Promise<void> {
    if (this.#dead !== null) return Promise.reject(this.#dead);
    const token = this.#next++;
    return new Promise<void>((resolve, reject) => {
      this.#pending.set(token, { resolve, reject });
      this.send(command(token));
    });
  }

  async stop(): Promise<void> {
    this.#die('the log thread was stopped');
    await this.#worker.terminate();
  }

  #receive(message: FromLogThread): void {
    if (message[0] === 'failed') {
      this.#writers.get(message[1])?.fail(new LogWriteError(message[2]));
      return;
    }
    const [, token, error] = message;
    const pending = this.#pending.get(token);
    this.#pending.delete(token);
    if (error === null) pending?.resolve();
    else pending?.reject(new LogWriteError(error));
  }

  #die(why: string): void {
    if (this.#dead !== null) return;
    this.#dead = new LogWriteError(why);
    if (LogThread.#shared === this) LogThread.#shared = null;
    for (const writer of this.#writers.values()) writer.fail(this.#dead);
    for (const pending of this.#pending.values()) pending.reject(this.#dead);
    this.#writers.clear();
    this.#pending.clear();
  }
}

/**
 * Starts the thread. From the build it runs `log-thread.js`; from the TypeScript sources (tests,
 * `tsx`), Node cannot load a `.ts` worker itself, so the thread registers tsx first.
 */
function startWorker(ring: RingMemory): Worker {
  const here = import.meta.url;
  if (!here.endsWith('.ts')) return new Worker(new URL('./log-thread.js', here), { workerData: ring });
  const tsx = pathToFileURL(
    createRequire(here)
      .resolve('tsx/esm/api')
      .replace(/\.cjs$/, '.mjs'),
  ).href;
  const entry = new URL('./log-thread.ts', here).href;
  return new Worker(
    `import(${JSON.stringify(tsx)}).then((tsx) => { tsx.register(); return import(${JSON.stringify(entry)}); });`,
    { eval: true, workerData: ring },
  );
}

/**
 * Stops the log thread, if one runs: every open writer fails with a `LogWriteError`, and the next
 * writer starts a new thread. For shutdown paths that must not wait, and for tests.
 */
export async function stopLogThread(): Promise<void> {
  await LogThread.current()?.stop();
}
