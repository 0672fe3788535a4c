import { readFile } from 'node:fs/promises';
import { ResumeError } from '../errors.js';
import { readLogRunId, readLogTail } from '../persistence/log-reader.js';

/**
 * The log of a run to resume or fork, as read from `path`: its bytes, its text, and its events up
 * to the end of its last complete one (`readLogTail`). `ResumeError` says why it cannot be read:
 * no such file, not a pge log, or damaged beyond a torn last write.
 */
export async function readCrashedLog(
  path: string,
  verb: 'resume' | 'fork' | 'continue',
): Promise<{ bytes: Buffer; text: string; tail: ReturnType<typeof readLogTail> }> {
  const refuse = (why: string, cause?: unknown) =>
    new ResumeError(`cannot ${verb} ${path}: ${why}`, cause === undefined ? undefined : { cause });
  let bytes: Buffer;
  try {
    bytes = await readFile(path);
  } catch (error) {
    throw refuse((error as Error).message, error);
  }
  const text = bytes.toString('utf8');
  if (readLogRunId(text) === null) throw refuse('it is not a pge log');
  try {
    return { bytes, text, tail: readLogTail(text, path) };
  } catch (error) {
    throw refuse((error as Error).message, error);
  }
}
