import { userInfo } from 'node:os';
import type { ProgressStream } from './progress.js';

/** The process as the CLI sees it, so that tests can run commands in-process with fakes. */

/** What the CLI reads and writes; `processIo()` in production. */
export interface CliIo {
  stdout: { write(text: string): unknown };
  stderr: ProgressStream & { isTTY?: boolean };
  env: Readonly<Record<string, string | undefined>>;
  cwd: string;
}

/**
 * A reader that goes away early (`pge run … | head -3`) closes the pipe: later writes fail with
 * EPIPE, which is no error of the run's, so it must not crash the process mid-run. Anything else is.
 */
function toleratingClosedPipe<T extends NodeJS.WriteStream>(stream: T): T {
  if (stream.listenerCount('error') === 0) {
    stream.on('error', (error: NodeJS.ErrnoException) => {
      if (error.code !== 'EPIPE') throw error;
    });
  }
  return stream;
}

/** The real process's streams, environment and directory. */
export function processIo(): CliIo {
  return {
    stdout: toleratingClosedPipe(process.stdout),
    stderr: toleratingClosedPipe(process.stderr),
    env: process.env,
    cwd: process.cwd(),
  };
}

/** The user's name, for the runs' logs; a container's user may have none. */
export function whoAmI(io: Pick<CliIo, 'env'>): string {
  try {
    return userInfo().username;
  } catch {
    return io.env.USER?.trim() || 'unknown';
  }
}
