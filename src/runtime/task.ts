import { ConfigurationError } from '../errors.js';

/**
 * Refuses a task pge will not run, before anything starts (`ConfigurationError`): one that is not
 * a non-empty string, holds a NUL character, or is longer than `maxTaskBytes` in UTF-8. Every
 * request of a run carries the task, and so does its log, many times over: a size limit keeps a
 * run's messages within what NATS carries and its log within reason. A task is text: a NUL is most
 * likely a binary file given by mistake, and it has no place in a markdown log.
 */
export function checkTask(task: unknown, maxTaskBytes: number): asserts task is string {
  if (typeof task !== 'string' || task.trim() === '')
    throw new ConfigurationError('Task must be a non-empty string');
  const nul = task.indexOf('\0');
  if (nul !== -1)
    throw new ConfigurationError(
      `the task holds a NUL character (at character ${nul}): a task must be text, not binary data`,
    );
  // A UTF-16 unit is at most 3 UTF-8 bytes: most tasks are judged without counting their bytes.
  if (task.length * 3 <= maxTaskBytes) return;
  const bytes = Buffer.byteLength(task, 'utf8');
  if (bytes > maxTaskBytes)
    throw new ConfigurationError(
      `the task is ${bytes} bytes, more than maxTaskBytes allows (${maxTaskBytes}): ` +
        'shorten it, or raise the limit (maxTaskBytes; on the command line --max-task-bytes)',
    );
}
