import { randomBytes } from 'node:crypto';
import { mkdir, readdir, rename, rm, stat, utimes, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { type Backoff, pacer } from '../retry.js';

/**
 * A reader/writer lock on a run's workspace, kept in the file system so that it holds between
 * processes that share the workspace (generator workers on one volume) as well as within one: a
 * write of the workspace tools takes it shared, a validator run takes it exclusive, so validators
 * see the workspace as no step is writing it, and two validators never run at once.
 *
 * Its state is a directory: `exclusive/` (made with `mkdir`, which only one maker wins) while a
 * validator run holds or awaits it, and one file per shared holder in `shared/`. Each side marks
 * itself first and then looks at the other (a shared holder that finds `exclusive/` steps back), so
 * of a write and a validator that start together at least one sees the other, and the validator
 * waits for the writes in flight while new ones wait for it. A holder touches its mark every
 * `HEARTBEAT_MS`; a mark untouched for `STALE_MS` is one a crashed process left, and is broken.
 * Two waiters that break the same stale mark at the very same moment can let a new holder's mark go
 * too: the price of a lock with no server, paid only after a crash.
 */

/** Milliseconds between the touches that show a holder is alive. */
export const HEARTBEAT_MS = 5_000;
/** Milliseconds after which an untouched mark is taken for a crashed holder's, and broken. */
export const STALE_MS = 30_000;
/** Waits between two looks at the lock. */
const POLL: Backoff = { firstMs: 5, maxMs: 100 };

/** Gives the lock back. */
export type Release = () => Promise<void>;

const EXCLUSIVE = 'exclusive';
const SHARED = 'shared';

function token(): string {
  return `${process.pid}-${randomBytes(8).toString('hex')}`;
}

function code(error: unknown): string | undefined {
  return (error as NodeJS.ErrnoException | null)?.code;
}

/** Keeps `path`'s modification time fresh until the returned function is called. */
function heartbeat(path: string): () => void {
  const timer = setInterval(() => {
    const now = new Date();
    // A lost touch only ages the mark; the next one, or the release, settles it.
    utimes(path, now, now).catch(() => {});
  }, HEARTBEAT_MS);
  // A held lock must not keep the process alive: its holder's own work does.
  timer.unref();
  return () => clearInterval(timer);
}

/** Whether the mark at `path` exists and is not stale, breaking it when stale. */
async function live(path: string, dir: string): Promise<boolean> {
  const info = await stat(path).catch((error: unknown) => {
    if (code(error) === 'ENOENT') return null;
    throw error;
  });
  if (info === null) return false;
  if (Date.now() - info.mtimeMs < STALE_MS) return true;
  // Moved aside first, so that a holder of a fresh mark of the same name is not removed by `rm`
  // walking into it later.
  const aside = join(dir, `broken-${token()}`);
  await rename(path, aside).catch(() => {});
  await rm(aside, { recursive: true, force: true });
  return false;
}

/**
 * The reader/writer lock kept in `dir` (a hidden directory of the workspace, made as needed).
 * Both acquirers wait as long as it takes, and reject with the signal's reason when it aborts.
 */
export class WorkspaceLock {
  constructor(private readonly dir: string) {}

  /** Takes the lock shared (a write of the workspace): waits while a validator run holds it. */
  async shared(signal: AbortSignal): Promise<Release> {
    const shared = join(this.dir, SHARED);
    const exclusive = join(this.dir, EXCLUSIVE);
    const mine = join(shared, token());
    const wait = pacer(POLL, signal);
    await mkdir(shared, { recursive: true });
    for (;;) {
      signal.throwIfAborted();
      if (await live(exclusive, this.dir)) {
        await wait();
        continue;
      }
      await writeFile(mine, '', { flag: 'wx' });
      if (!(await live(exclusive, this.dir))) break;
      // A validator run marked the lock between the two looks: it goes first.
      await rm(mine, { force: true });
      await wait();
    }
    const stop = heartbeat(mine);
    return async () => {
      stop();
      await rm(mine, { force: true });
    };
  }

  /**
   * Takes the lock exclusive (a validator run): waits for another exclusive holder to release it,
   * then, holding its mark so that no new write begins, for the writes in flight to end.
   */
  async exclusive(signal: AbortSignal): Promise<Release> {
    const shared = join(this.dir, SHARED);
    const exclusive = join(this.dir, EXCLUSIVE);
    const wait = pacer(POLL, signal);
    await mkdir(shared, { recursive: true });
    for (;;) {
      signal.throwIfAborted();
      try {
        await mkdir(exclusive);
        break;
      } catch (error) {
        if (code(error) !== 'EEXIST') throw error;
      }
      if (await live(exclusive, this.dir)) await wait();
    }
    const stop = heartbeat(exclusive);
    const release = async () => {
      stop();
      await rm(exclusive, { recursive: true, force: true });
    };
    try {
      const drain = pacer(POLL, signal);
      for (;;) {
        signal.throwIfAborted();
        let writing = false;
        for (const name of await readdir(shared))
          if (await live(join(shared, name), this.dir)) writing = true;
        if (!writing) return release;
        await drain();
      }
    } catch (error) {
      await release();
      throw error;
    }
  }
}

/** Runs `work` holding `lock` the way `take` takes it, and gives the lock back however it ends. */
export async function holding<T>(take: Promise<Release>, work: () => Promise<T>): Promise<T> {
  const release = await take;
  try {
    return await work();
  } finally {
    await release();
  }
}
