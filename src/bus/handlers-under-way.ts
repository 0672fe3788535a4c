/**
 * The handlers a reader has under way, counted, and a wait for room among them. Not
 * `Promise.race` over the set of them: every race adds a reaction to each promise still pending,
 * so a reader that holds hundreds of handlers (persistence, half of `PERSISTENCE_BATCH`) would do
 * work in proportion to them for every message it takes, and keep all those reactions alive.
 */
export class HandlersUnderWay {
  #size = 0;
  #roomMade: (() => void) | null = null;

  /** Counts `handled` until it settles; it must not reject (the caller reports its failure). */
  add(handled: Promise<void>): void {
    this.#size++;
    void handled.finally(() => {
      this.#size--;
      const roomMade = this.#roomMade;
      this.#roomMade = null;
      roomMade?.();
    });
  }

  /** How many are under way. */
  get size(): number {
    return this.#size;
  }

  /** Resolves once fewer than `most` handlers are under way. */
  async room(most: number): Promise<void> {
    while (this.#size >= most) {
      await new Promise<void>((resolve) => {
        this.#roomMade = resolve;
      });
    }
  }
}
