import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import { LogWriteError } from '../errors.js';
import type { RunEvent } from '../schemas/index.js';
import type { FromLogThread, ToLogThread } from './log-thread-protocol.js';
import type { LogWriterOptions } from './log-writer.js';

/**
 * A run's log written on the log thread (`log-thread.ts`), as pino writes through a worker
 * thread: the caller's thread only turns each event into JSON and posts it, in batches (at the
 * end of each turn of the event loop, or every `EVENTS_PER_POST` events); rendering the markdown
 * and writing the file (with sync calls: the thread has nothing else to do) happen on another
 * core. It has the surface and the guarantees of `LogWriter`, which does the work on the thread:
 * ordered by seq, duplicates ignored, created exclusively, the first failure final and reported
 * once to `onError`.
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

/** Events per `postMessage` at most; a run of 31 model calls publishes about 125. */
const EVENTS_PER_POST = 32;

interface Pending {
  resolve(): void;
  reject(error: LogWriteError): void;
}

/** The main side of the log thread: numbering, batching, replies, and the thread's lifetime. */
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
  readonly #writers = new Map<number, ThreadedLogWriter>();
  readonly #pending = new Map<number, Pending>();
  #outbox: ToLogThread[] = [];
  /** The pending post: at the end of this turn of the event loop, or sooner once a batch is big. */
  #scheduled: NodeJS.Immediate | null = null;
  #appended = 0;
  #next = 1;
  #dead: LogWriteError | null = null;
  readonly #post = (): void => {
    const batch = this.#outbox;
    this.#outbox = [];
    this.#scheduled = null;
    this.#appended = 0;
    if (this.#dead === null) this.#worker.postMessage(batch);
  };

  private constructor() {
    this.#worker = startWorker();
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

  send(command: ToLogThread): void {
    this.#outbox.push(command);
    this.#scheduled ??= setImmediate(this.#post);
  }

  /**
   * Queues an event's JSON for writer `id`. Consecutive events, of any writers, travel as one
   * string, a line each (JSON text holds no raw line break), and a batch goes out as soon as it
   * holds `EVENTS_PER_POST` events: the thread renders while this thread goes on producing.
   */
  append(id: number, json: string): void {
    const last = this.#outbox.length - 1;
    const previous = this.#outbox[last];
    if (previous !== undefined && previous[0] === 'events')
      this.#outbox[last] = ['events', `${previous[1]}\n${id} ${json}`];
    else this.send(['events', `${id} ${json}`]);
    if (++this.#appended >= EVENTS_PER_POST) this.#postNow();
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

  /** Posts what is queued now rather than at the end of this turn of the event loop. */
  #postNow(): void {
    clearImmediate(this.#scheduled!);
    this.#post();
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
function startWorker(): Worker {
  const here = import.meta.url;
  if (!here.endsWith('.ts')) return new Worker(new URL('./log-thread.js', here));
  const tsx = pathToFileURL(
    createRequire(here)
      .resolve('tsx/esm/api')
      .replace(/\.cjs$/, '.mjs'),
  ).href;
  const entry = new URL('./log-thread.ts', here).href;
  return new Worker(
    `import(${JSON.stringify(tsx)}).then((tsx) => { tsx.register(); return import(${JSON.stringify(entry)}); });`,
    { eval: true },
  );
}

/**
 * Stops the log thread, if one runs: every open writer fails with a `LogWriteError`, and the next
 * writer starts a new thread. For shutdown paths that must not wait, and for tests.
 */
export async function stopLogThread(): Promise<void> {
  await LogThread.current()?.stop();
}
