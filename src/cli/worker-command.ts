import { optionsGiven } from './flag-options.js';
import type { CliIo } from './io.js';
import { workerOptions } from './worker-options.js';

/**
 * `pge worker --role <role>`: one process of the distributed deployment on NATS. Declared here
 * whole, as commander takes a command: its options (`worker-options.ts`) and its action, which
 * loads the process (`worker-process.ts`); `program.ts` adds the help's prose.
 */

/** `pge worker`, declared: it runs until drained; `done` is given its exit code. */
export function workerCommand(io: CliIo, done: (code: number) => void) {
  return workerOptions().action(async (flags, parsed) => {
    const { runWorker, workerPlan } = await import('./worker-process.js');
    done(await runWorker(workerPlan(flags, optionsGiven(parsed), io), io));
  });
}
