/**
 * What a failed test shows besides its assertion: the output of every process the test file
 * started (pge processes, nats-servers), each line stamped with when the test file received it.
 * A multi-process test that times out then says which process stopped talking, and when.
 *
 * `tests/setup/diagnose-failures.ts` prints the report for each failed test; support code that
 * starts a process registers it with `watchOutput`.
 */

/** Milliseconds since the test file's module graph loaded: one clock for every process. */
const epoch = performance.now();

/** How much of each process's output the report keeps. */
const TAIL_CHARS = 12 * 1024;

interface Watched {
  readonly name: string;
  /** Stamped lines, oldest first, trimmed to the last TAIL_CHARS. */
  text: string;
  /** The part of a line not yet ended by a newline. */
  partial: string;
}

const watched: Watched[] = [];

/** Keeps a stamped tail of what a process writes; returns the function its output goes through. */
export function watchOutput(name: string): (chunk: string) => void {
  const entry: Watched = { name, text: '', partial: '' };
  watched.push(entry);
  return (chunk) => {
    const stamp = `[+${((performance.now() - epoch) / 1000).toFixed(3)}s] `;
    const lines = (entry.partial + chunk).split('\n');
    entry.partial = lines.pop() ?? '';
    if (lines.length === 0) return;
    entry.text = `${entry.text}${lines.map((line) => stamp + line).join('\n')}\n`.slice(-TAIL_CHARS);
  };
}

/** The stamped output of every process started so far in this file, one section each. */
export function outputReport(): string {
  const now = `[+${((performance.now() - epoch) / 1000).toFixed(3)}s]`;
  const sections = watched.map(
    ({ name, text, partial }) => `--- ${name}\n${text}${partial === '' ? '' : `${partial}\n`}`,
  );
  return `=== output of the processes this file started (report made at ${now})\n${sections.join('')}`;
}

/** Whether any process was started (the report of a file that started none is empty). */
export function anyWatched(): boolean {
  return watched.length > 0;
}
