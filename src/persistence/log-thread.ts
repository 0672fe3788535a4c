import { parentPort } from 'node:worker_threads';
import type { RunEvent } from '../schemas/index.js';
import type { FromLogThread, ToLogThread } from './log-thread-protocol.js';
import { LogWriter } from './log-writer.js';

/**
 * The log thread: a worker thread that owns the `LogWriter` of every log the process writes.
 * Rendering the markdown and waiting for the disk happen here, beside the event loop that runs
 * the charts, which only turns each event into JSON and posts it (see `ThreadedLogWriter`).
 * Commands arrive in batches and are carried out in order; replies go back in batches too.
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
    case 'events':
      for (const line of command[1].split('\n')) append(line);
      return;
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

port.on('message', (batch: ToLogThread[]) => {
  for (const command of batch) run(command);
});
