import { busError, isUnservedPull, UNSERVED_MOVE_MS } from './nats-helpers.js';
import { type NatsHost, PULL_EXPIRES_MS } from './nats-subscriptions.js';

/** How long pulls may keep failing (a server restart) before it is reported, and then how often. */
const PULL_FAILING_MS = 10_000;

/**
 * How the pulls of one pull subscription fare, all its handlers' together: the bus hears when they
 * go unserved and when they are served again (it moves to another server of the cluster when its
 * own leaves them unserved: `ServerMove`), and pulls that keep failing are reported every
 * `PULL_FAILING_MS`, so that a worker is never stuck in silence.
 */
export class PullHealth {
  private failingSince: number | null = null;
  private reportedAt = 0;
  /** When the pulls began to go unserved (null while served), and when one last did. */
  private unservedSince: number | null = null;
  private unservedAt = Number.NEGATIVE_INFINITY;
  /** When the server last sent something, or the reader last asked again after its handler. */
  private heardAt = Date.now();

  constructor(
    private readonly host: NatsHost,
    /** What is pulled, for the report: `<subject> as <durable>`. */
    private readonly what: string,
    private readonly subject: string,
  ) {}

  /** The server sent a message, or a heartbeat of a pull it holds. */
  served(): void {
    this.heardAt = Date.now();
    this.failingSince = null;
    this.unservedSince = null;
    this.host.served();
  }

  /** A reader that asked for nothing while in its handler asks again from now. */
  askedAgain(): void {
    this.heardAt = Date.now();
  }

  /**
   * A pull ended empty at its expiry. nats.js ends it so whether or not the server answered it:
   * only a spell without unserved pulls says the server serves.
   */
  expired(): void {
    this.failingSince = null;
    if (Date.now() - this.unservedAt >= UNSERVED_MOVE_MS) this.served();
  }

  /** A consume's heartbeats went missing, or its server had no responders: nothing serves it. */
  unanswered(what: string): void {
    // nats.js counts missed heartbeats from the last message, while the reader may have been in
    // its handler since, asking nothing: silence counts from when it asked again.
    if (Date.now() - this.heardAt < PULL_EXPIRES_MS) return;
    this.failed(new Error(what), this.heardAt, true);
  }

  /** A pull that began at `pulledAt` failed; `unserved` when nothing served it (`isUnservedPull`). */
  failed(error: unknown, pulledAt: number, unserved = isUnservedPull(error)): void {
    const now = Date.now();
    if (unserved) {
      // Unserved since the pull began (a missed heartbeat takes seconds to tell); other failures
      // neither start nor end it.
      this.unservedSince ??= pulledAt;
      this.unservedAt = now;
      this.host.unserved(this.unservedSince);
    }
    // A pull cut by a reconnect or a server restart is simply made again; pulls that keep failing
    // are reported.
    this.failingSince ??= now;
    if (now - this.failingSince >= PULL_FAILING_MS && now - this.reportedAt >= PULL_FAILING_MS) {
      this.reportedAt = now;
      const failing = `cannot pull ${this.what} (failing for ${Math.round((now - this.failingSince) / 1000)} s)`;
      this.host.report(busError(error, failing), this.subject);
    }
  }
}
