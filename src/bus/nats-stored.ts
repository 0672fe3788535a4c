import { setTimeout as sleep } from 'node:timers/promises';
import {
  type JetStreamClient,
  type JetStreamManager,
  RepublishHeaders,
  type StoredMsg,
} from '@nats-io/jetstream';
import type { Msg, MsgHdrs, NatsConnection, Subscription } from '@nats-io/transport-node';
import type { BusHandler } from './bus.js';
import { busError, type OutageReport } from './nats-helpers.js';
import { consumeStored } from './nats-stored-consumer.js';
import { type PgeStream, storedAfter } from './nats-streams.js';
import {
  type NatsHost,
  type NatsSubscription,
  type SerialDelivery,
  storedReading,
} from './nats-subscriptions.js';
import { subjectMatches } from './subjects.js';

/**
 * Reading what a stream stores on a subject without a consumer: message by message, each asked of
 * the stream's leader (`$JS.API.STREAM.MSG.GET.<stream>` with `next_by_subj`, `storedAfter`),
 * which changes nothing on the server and which every reader's credential may use; then live, as
 * the stream's RePublish puts each message it stores on a subject of its own. Hand-written for the
 * processes whose credential may not make a consumer (clients, observers, persistence: see
 * permissions.ts), under two limits of nats-server 2.9: a consumer's configuration names where the
 * server delivers, in the account that holds the streams, past every permission of the reader's,
 * so making one is the coordinator's alone; and there is no batched read (a direct get's `batch`
 * came with 2.11), so one lookup per message. The coordinator reads through an ordered consumer
 * instead (`readStored` with `consumer`, `subscribeOrdered` with `consumer`). A PGE_EVENTS made before pge
 * set its RePublish (2.9 cannot add it in place) is read by a lookup at each core message on the
 * subject, and every `POLL_MS` for a sign that was lost.
 */

/** A message as the stream stored it. */
export interface StoredMessage {
  readonly subject: string;
  readonly data: Uint8Array;
  readonly seq: number;
  readonly headers?: MsgHdrs | undefined;
}

/**
 * Every message `stream` holds on `filter` (a subject or a filter within the stream) from its
 * first, oldest first: how a reader that joined late (a restarted persistence worker, a resumed
 * run) gets what it never received. With `consumer`, the client of a process that may make
 * consumers, through an ordered consumer up to the last message (`consumeStored`), then by
 * lookups. With `first`, only the oldest `first` messages, by lookups (an ordered consumer would
 * cost more round trips than the few lookups it saves). Rejects with `BusError` when the server
 * does not answer.
 */
export async function readStored(
  jsm: JetStreamManager,
  stream: PgeStream,
  filter: string,
  options: { consumer?: JetStreamClient | undefined; first?: number | undefined } = {},
): Promise<StoredMessage[]> {
  const { consumer, first = Number.POSITIVE_INFINITY } = options;
  const messages: StoredMessage[] = [];
  const take = (msg: StoredMessage) =>
    void messages.push({ subject: msg.subject, data: msg.data, seq: msg.seq });
  try {
    const from =
      consumer === undefined || Number.isFinite(first)
        ? 1
        : await consumeStored(consumer, jsm, stream.name, filter, take);
    for await (const msg of storedFrom(jsm, stream.name, filter, from)) {
      take(msg);
      if (messages.length >= first) break;
    }
  } catch (error) {
    throw busError(error, `cannot read ${filter} from ${stream.name}`);
  }
  return messages;
}

/** What `stream` stores on `filter` from stream sequence `from` on, oldest first: a lookup each. */
async function* storedFrom(
  jsm: JetStreamManager,
  stream: string,
  filter: string,
  from: number,
): AsyncGenerator<StoredMsg> {
  let msg = await storedAfter(jsm, stream, filter, from);
  while (msg !== null) {
    yield msg;
    msg = await storedAfter(jsm, stream, filter, msg.seq + 1);
  }
}

/** Where a reading starts, and how it learns what is stored next. */
export interface StoredStart {
  /** A stream sequence (1: everything stored), or `'new'`: only what the stream stores from now on. */
  readonly from: number | 'new';
  /**
   * Where the server republishes what the stream stores on the subject, with its stream sequence
   * (the stream's RePublish: `PgeStream.republish`); null for a stream that does not, whose
   * readers then take a core message on the subject itself as the sign to look.
   */
  readonly republishedOn: string | null;
}

/**
 * When a core message said something new was published but the stream did not hold it yet (the
 * server hands a message to its subscribers and to the stream side by side), the lookups are made
 * again after these pauses.
 */
const SETTLE_MS = [5, 25, 100, 400];
/** Without republished messages: lookups made this often, whatever the core messages say. */
const POLL_MS = 2_000;
/** Pause before lookups that failed are made again. */
const RETRY_MS = 1_000;

/**
 * A subscription of the NATS bus that reads a stream subject in stream order, each message once,
 * from a stream sequence or from what is stored next, without a consumer: what the stream held
 * from there is read by lookups; then each message comes as the server republishes it, with its
 * stream sequence. A reconnect (or a server restart) brings lookups from the stream sequence after
 * the last message handed on, and republished messages that come meanwhile wait for them, so that
 * nothing is missed or handed on twice. On a stream that does not republish, every message is
 * read by lookups, made whenever a core message on the subject says something was published (and
 * every `POLL_MS`, for a sign that was lost).
 */
export class StoredSubscription implements NatsSubscription {
  readonly queue = null;
  private active = true;
  /** The stream sequence of the next message to hand on; null until `'new'` is resolved. */
  private next: number | null;
  private readonly delivery: SerialDelivery<StoredMessage>;
  private readonly live: Subscription;
  private readonly republished: boolean;
  /** Republished messages that came while lookups were under way, for after them. */
  private held: StoredMessage[] = [];
  private readonly poll: NodeJS.Timeout | null;
  private readonly unlisten: (() => void)[];
  /**
   * After a loss of the connection, the first pass of lookups that begins after it: until that
   * pass has read the stream, republished messages wait (what was published while the connection
   * was down never came, and the reconnect may be told after the first new ones arrive).
   */
  private resyncFrom: number | null = null;
  /** The pass of lookups under way, and whether another was asked for meanwhile. */
  private reading: Promise<void> | null = null;
  private again = false;
  /** Whether a core message asked for the pass to come (see `read`). */
  private againAnnounced = false;
  /** Passes begun and ended, counted from 1: how `caughtUp` knows a pass began after it was called. */
  private begun = 0;
  private ended = 0;
  private readonly outage: OutageReport;

  constructor(
    nc: NatsConnection,
    private readonly jsm: JetStreamManager,
    private readonly stream: string,
    readonly subject: string,
    handler: BusHandler,
    private readonly host: NatsHost,
    start: StoredStart,
  ) {
    ({ delivery: this.delivery, outage: this.outage } = storedReading(
      handler,
      host,
      subject,
      () => this.active,
    ));
    this.next = start.from === 'new' ? null : Math.max(1, Math.floor(start.from));
    this.republished = start.republishedOn !== null;
    // Subscribed before the first lookup (and before `'new'` is resolved), so that nothing stored
    // after it goes unseen.
    this.live = nc.subscribe(start.republishedOn ?? subject, { callback: (_, msg) => this.receive(msg) });
    this.poll = this.republished ? null : setInterval(() => this.wake(false), POLL_MS);
    this.unlisten = [
      host.onReconnect(() => this.wake(false)),
      host.onDisconnect(() => {
        this.resyncFrom = this.begun + 1;
      }),
    ];
    this.wake(false);
  }

  unsubscribe(): void {
    if (!this.active) return;
    this.stop();
    this.host.detach(this);
  }

  stop(): void {
    this.active = false;
    for (const unlisten of this.unlisten) unlisten();
    if (this.poll !== null) clearInterval(this.poll);
    if (!this.live.isClosed()) this.live.unsubscribe();
  }

  /** Resolves once what the stream held when it was called has been handed to the handler. */
  async caughtUp(): Promise<void> {
    // The first pass to begin after this call reads all of it: begun now, or after the one under way.
    const target = this.begun + 1;
    this.wake(false);
    while (this.active && (this.ended < target || this.outage.ongoing)) {
      await (this.reading ?? sleep(RETRY_MS));
    }
    await new Promise<void>((resolve) => setImmediate(resolve));
  }

  /** Asks for a pass of lookups; with `announced`, a core message said something is new. */
  private wake(announced: boolean): void {
    if (!this.active) return;
    if (this.reading !== null) {
      this.again = true;
      this.againAnnounced ||= announced;
      return;
    }
    const number = ++this.begun;
    const pass = this.read(announced).finally(() => {
      this.ended = number;
      this.reading = null;
      // After lookups that read the stream to its end, what was republished meanwhile follows on.
      if (!this.outage.ongoing && (this.resyncFrom === null || number >= this.resyncFrom)) {
        this.resyncFrom = null;
        for (const msg of this.held.splice(0)) this.handOn(msg);
      }
      if (this.again) {
        const next = this.againAnnounced;
        this.again = false;
        this.againAnnounced = false;
        this.wake(next);
      }
    });
    this.reading = pass;
  }

  /** Hands on everything stored from `next` on; when announced news is not there yet, looks again. */
  private async read(announced: boolean): Promise<void> {
    try {
      this.next ??= await this.firstOfNew();
      let found = await this.readForward();
      for (const pause of announced ? SETTLE_MS : []) {
        if (found || this.again || !this.active) break;
        await sleep(pause);
        found = await this.readForward();
      }
      this.outage.ended();
    } catch (error) {
      if (!this.active) return;
      this.outage.failed(error);
      await sleep(RETRY_MS);
      this.again = true;
    }
  }

  /**
   * Where `'new'` starts: after what the stream held when this subscription was made. The
   * stream's last sequence is asked for after subscribing, so it may count a few messages stored
   * since, whose republished copies are already held (the server sent them before its answer):
   * the first of those is where it starts then.
   */
  private async firstOfNew(): Promise<number> {
    const after = (await this.jsm.streams.info(this.stream)).state.last_seq + 1;
    return Math.min(after, this.held[0]?.seq ?? after);
  }

  /** Hands on every message stored from `next` on; true when there was any. */
  private async readForward(): Promise<boolean> {
    let found = false;
    if (this.next === null) return found;
    // Nothing else hands a message on meanwhile (republished ones are held): each follows the last.
    for await (const msg of storedFrom(this.jsm, this.stream, this.subject, this.next)) {
      if (!this.active) break;
      found = true;
      this.handOn({ subject: msg.subject, data: msg.data, seq: msg.seq, headers: msg.header });
    }
    return found;
  }

  /**
   * A message on the live subscription: republished, it is handed on in turn (held while lookups
   * are under way); otherwise (or without the republish headers) it only says to look.
   */
  private receive(msg: Msg): void {
    if (!this.active) return;
    const seq = Number(msg.headers?.get(RepublishHeaders.Sequence));
    const subject = msg.headers?.get(RepublishHeaders.Subject) ?? '';
    if (!this.republished || !Number.isSafeInteger(seq) || !subjectMatches(this.subject, subject)) {
      this.wake(true);
      return;
    }
    const stored = { subject, data: msg.data, seq, headers: msg.headers };
    if (this.reading !== null || this.next === null || this.resyncFrom !== null) {
      this.held.push(stored);
      // Held after a loss of the connection with no pass to follow: one is asked for.
      if (this.reading === null && this.next !== null) this.wake(false);
    } else this.handOn(stored);
  }

  /** Hands `msg` on unless an earlier one of the stream's was handed on after it. */
  private handOn(msg: StoredMessage): void {
    if (this.next === null || msg.seq < this.next) return;
    this.next = msg.seq + 1;
    this.delivery.push(msg);
  }
}
