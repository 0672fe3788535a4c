import { parentPort, workerData } from 'node:worker_threads';
import type { RunEvent } from '../schemas/index.js';
import { type RingMemory, RingReader } from './log-ring.js';
import { COMMAND, type FromLogThread, type ToLogThread } from './log-thread-protocol.js';
import { LogWriter } from './log-writer.js';

/**
 * The log thread: a worker thread that owns the `LogWriter` of every log the process writes.
 * Rendering the markdown and waiting for the disk happen here, beside the event loop that runs
 * the charts, which only turns each event into JSON and posts it (see `ThreadedLogWriter`).
 * Events and commands arrive in order as lines through the shared ring (`log-ring.ts`); replies
 * go back by `postMessage`, in batches.
 */

const port = parentPort;
if (port === null) throw new Error('log-thread.js runs as a worker thread (see ThreadedLogWriter)');

const writers = new Map<number, LogWriter>();
let outbox: FromLogThread[] = [];

function post(): void {
  const batch = outbox;
  outbox = [];
  port!.postMessage(batch);
}

function reply(message: FromLogThread): void {
  if (outbox.push(message) === 1) queueMicrotask(post);
}

const messageOf = (error: unknown): string => (error instanceof Error ? error.message : String(error));

function settle(token: number, work: Promise<void>): void {
  work.then(
    () => reply(['settled', token, null]),
    (error: unknown) => reply(['settled', token, messageOf(error)]),
  );
}

/** Appends one `<writer id> <event JSON>` line to its writer. */
function append(line: string): void {
  const space = line.indexOf(' ');
  const id = Number(line.slice(0, space));
  const writer = writers.get(id);
  if (writer === undefined) return;
  const json = line.slice(space + 1);
  try {
    writer.append(JSON.parse(json) as RunEvent, json);
  } catch (error) {
    // The main side keeps only the first failure of a writer; this one may be a repeat.
    reply(['failed', id, messageOf(error)]);
  }
}

function run(command: ToLogThread): void {
  switch (command[0]) {
    case 'open': {
      const [, id, path, runId] = command;
      // Sync writes: this thread has nothing else to do, and skips the thread pool's round trips.
      const onError = (error: Error): void => reply(['failed', id, error.message]);
      writers.set(id, new LogWriter({ path, runId, io: 'sync', onError }));
      return;
    }
    case 'flush': {
      const [, id, token] = command;
      const writer = writers.get(id);
      settle(token, writer ? writer.flushed() : Promise.resolve());
      return;
    }
    case 'close':
    case 'finish': {
      const [how, id, token] = command;
      const writer = writers.get(id);
      // Forgotten once done, not now: a finishing log still takes the events it waits for.
      settle(token, writer ? writer[how]().finally(() => writers.delete(id)) : Promise.resolve());
      return;
    }
  }
}

/** One line from the ring: a command, or an event of a writer. */
function receive(line: string): void {
  if (line.startsWith(COMMAND)) run(JSON.parse(line.slice(COMMAND.length)) as ToLogThread);
  else append(line);
}

/**
 * How long the thread waits for more text before it looks again while events flow, and how many
 * empty looks in a row put it to sleep until a writer wakes it.
 */
const POLL_MS = 0.25;
const EMPTY_POLLS_BEFORE_SLEEP = 200;

const ring = new RingReader(workerData as RingMemory);

/**
 * A turn of the event loop. The writers here make sync system calls only (`io: 'sync'`), but a
 * turn keeps anything else from starving.
 */
const turn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/**
 * Takes what the ring holds or, when it held nothing, blocks until it does (for `POLL_MS`, or
 * asleep); then lets the writers' promises settle and the replies go out. The thread does nothing
 * else, so blocking costs nobody; the writer pays for a wake-up only when the thread sleeps, or
 * when it waits for an answer.
 */
async function serve(): Promise<never> {
  let empty = 0;
  for (;;) {
    const lines = ring.read();
    if (lines.length > 0) {
      empty = 0;
      for (const line of lines) receive(line);
    } else if (++empty < EMPTY_POLLS_BEFORE_SLEEP) ring.wait(POLL_MS);
    else if (ring.sleep()) ring.wait(Number.POSITIVE_INFINITY);
    await turn();
  }
}

void serve();
