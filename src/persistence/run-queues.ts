/**
 * One queue per run: the work on a run's log (placing its events, checking its gaps) runs one
 * task at a time, in the order given, while the work of other runs goes on beside it. Runs share
 * nothing but the map of logs, each entry its own run's, so a run joined midway that waits for the
 * stream (its opening event) holds up no other run: a restarted persistence worker joins the runs
 * of its backlog side by side.
 */
export class RunQueues {
  /** The last task queued of each run with work under way; removed once it settles. */
  readonly #tails = new Map<string, Promise<unknown>>();

  /** Runs `task` after every task queued before it for `runId`, whatever they ended with. */
  run<T>(runId: string, task: () => T | Promise<T>): Promise<T> {
    const before = this.#tails.get(runId);
    const result = before === undefined ? Promise.resolve().then(task) : before.then(task, task);
    const tail = result.then(
      () => undefined,
      () => undefined, // the caller of `run` gets the failure; the next task runs all the same
    );
    this.#tails.set(runId, tail);
    void tail.then(() => {
      if (this.#tails.get(runId) === tail) this.#tails.delete(runId);
    });
    return result;
  }

  /** Resolves once every task queued so far, and any queued meanwhile, has settled. */
  async idle(): Promise<void> {
    while (this.#tails.size > 0) await Promise.all([...this.#tails.values()]);
  }
}
