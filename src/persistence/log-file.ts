import { closeSync, fstatSync, openSync, writeSync } from 'node:fs';
import { type FileHandle, open } from 'node:fs/promises';

/**
 * The file under a log, in one of two modes. `async` goes through Node's thread pool, so the
 * event loop never blocks: right for a writer on a thread that runs other work. `sync` makes the
 * system calls directly: right on the log thread, which does nothing else, and which then avoids
 * two hops through the thread pool per write — the wait at the end of every run.
 */
export type LogIo = 'async' | 'sync';

/** An open log file. */
export interface LogFile {
  /** Whether `write` has finished writing when it returns. */
  readonly sync: boolean;
  /** Whether it is a regular file (not a device or a pipe), and its size. */
  stat(): Promise<{ isFile: boolean; size: number }>;
  /** Writes all of `data` at the end of the file; the sync mode returns once it is written. */
  write(data: Buffer): Promise<void> | undefined;
  close(): Promise<void>;
}

/** Opens `path` with `flags` (`wx`: create exclusively; `a`: append) in the given mode. */
export async function openLogFile(path: string, flags: 'wx' | 'a', io: LogIo): Promise<LogFile> {
  return io === 'sync' ? new SyncFile(openSync(path, flags)) : new AsyncFile(await open(path, flags));
}

class AsyncFile implements LogFile {
  readonly sync = false;
  readonly #handle: FileHandle;

  constructor(handle: FileHandle) {
    this.#handle = handle;
  }

  async stat() {
    const stat = await this.#handle.stat();
    return { isFile: stat.isFile(), size: stat.size };
  }

  /** `FileHandle.write` may write less than asked; loop until the whole batch is in the file. */
  async write(data: Buffer): Promise<void> {
    let offset = 0;
    while (offset < data.length) {
      const { bytesWritten } = await this.#handle.write(data, offset, data.length - offset);
      offset += bytesWritten;
    }
  }

  close(): Promise<void> {
    return this.#handle.close();
  }
}

class SyncFile implements LogFile {
  readonly sync = true;
  readonly #fd: number;

  constructor(fd: number) {
    this.#fd = fd;
  }

  stat() {
    try {
      const stat = fstatSync(this.#fd);
      return Promise.resolve({ isFile: stat.isFile(), size: stat.size });
    } catch (error) {
      return Promise.reject(error);
    }
  }

  write(data: Buffer): undefined {
    let offset = 0;
    while (offset < data.length) offset += writeSync(this.#fd, data, offset, data.length - offset);
    return undefined;
  }

  close(): Promise<void> {
    try {
      closeSync(this.#fd);
      return Promise.resolve();
    } catch (error) {
      return Promise.reject(error);
    }
  }
}
