import type { JsMsg } from '@nats-io/jetstream';
import { settle } from './nats-subscriptions.js';

/**
 * On an `AckPolicy.All` consumer, the longest a handled message waits for the ack that covers it:
 * far below any ack wait, so the server never hands a handled message to another reader.
 */
const ACK_ALL_DELAY_MS = 50;

/**
 * The acks of a reader of an `AckPolicy.All` consumer, which handles its messages in order: one
 * ack of the last message handled covers every one before it. Held here because nats.js sends
 * each `ack()` at once, and has no batching of its own for the server's cumulative acks. It goes out once `every` messages
 * are handled, when asked (`flush`) or the subscription stops, and at most `ACK_ALL_DELAY_MS` after a
 * message was handled.
 */
export class CumulativeAcks {
  #last: JsMsg | null = null;
  #count = 0;
  #timer: NodeJS.Timeout | null = null;
  #closed = false;

  constructor(private readonly every: number) {}

  handled(msg: JsMsg): void {
    // A message handled again (redelivered) acks nothing new.
    if (this.#last === null || msg.info.streamSequence > this.#last.info.streamSequence) this.#last = msg;
    this.#count += 1;
    if (this.#closed || this.#count >= this.every) this.flush();
    else this.#timer ??= setTimeout(() => this.flush(), ACK_ALL_DELAY_MS);
  }

  /** Sends what it holds; from now on each message handled is acknowledged at once. */
  close(): void {
    this.#closed = true;
    this.flush();
  }

  flush(): void {
    if (this.#timer !== null) clearTimeout(this.#timer);
    this.#timer = null;
    const last = this.#last;
    this.#last = null;
    this.#count = 0;
    if (last !== null) settle(() => last.ack());
  }
}
