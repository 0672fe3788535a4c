import { randomUUID } from 'node:crypto';
import { JetStreamApiCodes, JetStreamApiError } from '@nats-io/jetstream';
import type { KV, KvWatchEntry } from '@nats-io/kv';
import { Kvm } from '@nats-io/kv';
import type { NatsConnection } from '@nats-io/transport-node';
import { BusError, ConfigurationError } from '../errors.js';
import { type Backoff, retry } from '../retry.js';
import { DEFAULT_PUBLISH_RETRY_MS } from '../schemas/setting-values.js';
import { isNoResponders } from './nats-helpers.js';
import { isTransportFailure } from './nats-publish.js';
import { checkReplicas } from './nats-streams.js';

/**
 * Who owns which run on NATS: one lease per run in the JetStream KV bucket `pge-runs`, created by
 * the coordinator that starts the run and renewed by its heartbeats. Every coordinator watches the
 * bucket; one that sees another's lease go unrenewed for `leaseMs` is told (`onExpired`) and may
 * take the run over with a compare-and-set on the revision it saw, so that of several coordinators
 * exactly one wins. An owner whose renewal is refused (another took the run while it was cut off)
 * is told (`onLost`) and must let the run go. Time is each process's own monotonic clock: a lease
 * expires when its holder has not renewed it for `leaseMs` as the watcher saw it, so clocks that
 * disagree between machines do not matter.
 */

/** The KV bucket of run leases. */
export const LEASE_BUCKET = 'pge-runs';

/** Options of `RunLeases.open`. */
export interface RunLeasesOptions {
  /** This coordinator's name, stored in the leases it holds. */
  owner: string;
  /** Milliseconds a lease lasts without renewal (default 3000). */
  leaseMs?: number;
  /** A lease of another owner went unrenewed for `leaseMs`: its run may be taken over. */
  onExpired: (runId: string, owner: string) => void;
  /** A lease this owner held was taken by another: stop driving the run. */
  onLost: (runId: string, owner: string) => void;
  /** A renewal or a watch failed for a reason other than a lost lease (the server restarting, say). */
  onError?: (error: unknown) => void;
  /**
   * Servers of a JetStream cluster that keep the bucket: it is made with this many, and an existing
   * one with another count is a `ConfigurationError` (see `StreamLimits.replicas`). Left out, a new
   * bucket has 1 and an existing one is taken as it is.
   */
  replicas?: number;
}

/** What a watcher knows of one lease. */
interface Seen {
  owner: string;
  /** Written by this very process (its incarnation), not merely under its name. */
  mine: boolean;
  revision: number;
  /** `performance.now()` when this revision was seen. */
  at: number;
  /** `onExpired` was called for this revision. */
  told: boolean;
}

/**
 * A lease's value: the owner's name, for people and events, and the incarnation of the process
 * that wrote it, which tells two processes of one name apart (a restart under the same worker id,
 * or `pge-1` in every container).
 */
interface LeaseValue {
  owner: string;
  incarnation: string;
}

function leaseIn(entry: { string(): string }): LeaseValue {
  try {
    const value = JSON.parse(entry.string()) as Partial<LeaseValue>;
    return {
      owner: typeof value.owner === 'string' ? value.owner : '',
      incarnation: typeof value.incarnation === 'string' ? value.incarnation : '',
    };
  } catch {
    return { owner: '', incarnation: '' };
  }
}

/**
 * Whether a run is live on NATS, for role workers (`createRoleWorker`'s `isLiveRun`): a run has
 * a lease from its submission, before any of its work is queued, until it ends, so a work item
 * whose run has none was issued by no coordinator. Read-only: the bucket is bound, not created
 * or updated (nothing is asked of the server until the first read, a `$JS.API.STREAM.MSG.GET`
 * of the bucket's stream), so a worker needs only the permission to read it. With no bucket at
 * all no run is live. A read the server does not answer (a restart, a lost connection), or answers
 * with JetStream unavailable for now (503: the bucket's stream without a leader, during an
 * election), is asked again, as a worker's result is published again, for up to `retryMs`, then
 * fails (the work item is handed back to the queue).
 */
export async function readRunLeases(
  nc: NatsConnection,
  retryMs = DEFAULT_PUBLISH_RETRY_MS,
): Promise<(runId: string) => Promise<boolean>> {
  const kv = await new Kvm(nc).open(LEASE_BUCKET);
  return (runId) =>
    retry(
      async () => {
        try {
          const entry = await kv.get(runId);
          return entry !== null && entry.operation === 'PUT';
        } catch (error) {
          if (apiError(error, JetStreamApiCodes.StreamNotFound)) return false;
          throw error;
        }
      },
      // The server's own answer (no permission, …) does not change by asking again; a stream
      // without a leader for now (503, during an election) does.
      { ...READ_RETRY, retryable: isTransportFailure, deadline: performance.now() + retryMs },
    );
}

/** Pauses between reads, and claims, of a lease that the bucket did not answer. */
const READ_RETRY: Backoff = { firstMs: 250, maxMs: 2_000 };
/**
 * How long a claim of a new run's lease is asked again while the bucket cannot answer: an election
 * takes seconds, and longer on a loaded machine; the submitter asks again meanwhile.
 */
const CLAIM_RETRY_MS = 20_000;

/** The message of any thrown value. */
function errorText(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** Whether `error`, or one of its causes, is the JetStream API's error `code`. */
function apiError(error: unknown, code: number): boolean {
  for (let e: unknown = error; e instanceof Error; e = e.cause) {
    if (e instanceof JetStreamApiError && e.code === code) return true;
  }
  return false;
}

/** The error of a compare-and-set whose revision is not the key's last: another wrote it. */
function wrongRevision(error: unknown): boolean {
  return apiError(error, JetStreamApiCodes.StreamWrongLastSequence);
}

/** The leases of runs, as one coordinator holds and watches them. */
export class RunLeases {
  readonly owner: string;
  readonly leaseMs: number;
  readonly #value: string;
  readonly #incarnation = randomUUID();
  /** Runs this coordinator holds, with the revision of its last write. */
  readonly #held = new Map<string, number>();
  /** Runs whose lease this coordinator is creating now. */
  readonly #claiming = new Set<string>();
  readonly #seen = new Map<string, Seen>();
  readonly #timer: NodeJS.Timeout;
  #stopped = false;
  /** A renewal failed for want of an answer, and was reported; cleared by the next that succeeds. */
  #renewalsFailing = false;

  private constructor(
    private readonly kv: KV,
    private readonly nc: NatsConnection,
    private readonly options: RunLeasesOptions,
    private readonly watch: AsyncIterable<KvWatchEntry> & { stop(): void },
  ) {
    this.owner = options.owner;
    this.#value = JSON.stringify({ owner: this.owner, incarnation: this.#incarnation } satisfies LeaseValue);
    this.leaseMs = options.leaseMs ?? 3_000;
    // Renewals and expiry checks every third of a lease: a holder gets two tries before it is late.
    this.#timer = setInterval(() => this.#tick(), this.leaseMs / 3);
    void this.#follow();
    void this.#graceAfterReconnect();
  }

  /** Opens (creating if needed) the bucket and starts watching it. */
  static async open(nc: NatsConnection, options: RunLeasesOptions): Promise<RunLeases> {
    let kv: KV;
    let replicas: number;
    try {
      // An existing bucket is opened as it is, whatever the options: its count is checked below.
      kv = await new Kvm(nc).create(LEASE_BUCKET, {
        history: 1,
        replicas: options.replicas ?? 1,
        // Read from the leader, as the streams are (storedAfter), never from a replica that lags.
        allow_direct: false,
      });
      replicas = (await kv.status()).replicas;
    } catch (cause) {
      const reason = cause instanceof Error ? cause.message : String(cause);
      throw new ConfigurationError(`cannot open the JetStream KV bucket ${LEASE_BUCKET}: ${reason}`, {
        cause,
      });
    }
    if (options.replicas !== undefined)
      checkReplicas(`KV_${LEASE_BUCKET}`, replicas, options.replicas, `JetStream KV bucket ${LEASE_BUCKET}`);
    const watch = await kv.watch();
    return new RunLeases(kv, nc, options, watch);
  }

  /** The owner of `runId`'s lease as last seen, or null. */
  ownerOf(runId: string): string | null {
    return this.#held.has(runId) ? this.owner : (this.#seen.get(runId)?.owner ?? null);
  }

  /**
   * Takes the lease of a new run; false when the run already has one (its id is in use), or a claim
   * of it is under way here. A create the server does not answer (a cluster electing the bucket's
   * leader) is asked again for up to `CLAIM_RETRY_MS`, then rejects with a `BusError`; one that was
   * stored although its answer was lost is recognised by this process's incarnation in the lease,
   * so the run is not refused by its own claim.
   */
  async claim(runId: string): Promise<boolean> {
    if (this.#claiming.has(runId)) return false;
    this.#claiming.add(runId);
    try {
      const revision = await this.#create(runId);
      if (revision === null) return false;
      this.#held.set(runId, revision);
      return true;
    } finally {
      this.#claiming.delete(runId);
    }
  }

  /** Creates `runId`'s lease: its revision, or null when another holds it (see `claim`). */
  async #create(runId: string): Promise<number | null> {
    let unanswered = false;
    const create = async (): Promise<number | null> => {
      for (;;) {
        if (unanswered) {
          // The last create may have been stored: a lease of this incarnation is this claim's.
          const entry = await this.kv.get(runId);
          if (entry !== null && entry.operation === 'PUT')
            return leaseIn(entry).incarnation === this.#incarnation ? entry.revision : null;
        }
        try {
          return await this.kv.create(runId, this.#value);
        } catch (error) {
          unanswered = true;
          // Another create won, or this one was stored unanswered: the lease is read at once.
          if (!wrongRevision(error)) throw error;
        }
      }
    };
    return retry(create, {
      ...READ_RETRY,
      retryable: isTransportFailure,
      deadline: performance.now() + CLAIM_RETRY_MS,
      giveUp: (error) =>
        new BusError(`cannot claim run ${runId}'s lease: ${errorText(error)}`, { cause: error }),
    });
  }

  /**
   * Takes over the lease of `runId` if it is still the revision seen expired; true when this
   * coordinator won it, false when another did (or the holder renewed it after all).
   */
  async takeOver(runId: string): Promise<boolean> {
    const seen = this.#seen.get(runId);
    if (seen === undefined) return false;
    try {
      const revision = await this.kv.update(runId, this.#value, seen.revision);
      this.#held.set(runId, revision);
      return true;
    } catch (error) {
      if (wrongRevision(error)) return false;
      // Not answered (a cluster electing the bucket's leader, say): if nobody took the run, its
      // lease is told expired again a term from now, rather than left to nobody.
      if (isTransportFailure(error) && this.#seen.get(runId) === seen) {
        seen.told = false;
        seen.at = performance.now();
      }
      throw error;
    }
  }

  /**
   * Takes the lease of `runId` now, unless a live owner holds it: created when the run has none
   * (it was released, or lost), taken with a compare-and-set when its holder has not renewed it
   * within the last lease term. Returns the owner afterwards, and whether this coordinator took it.
   */
  async takeOverNow(runId: string): Promise<{ owner: string; taken: boolean }> {
    if (this.#held.has(runId)) return { owner: this.owner, taken: false };
    const entry = await this.kv.get(runId);
    if (entry === null || entry.operation !== 'PUT') {
      return (await this.claim(runId))
        ? { owner: this.owner, taken: true }
        : { owner: this.ownerOf(runId) ?? 'another coordinator', taken: false };
    }
    const seen = this.#seen.get(runId);
    const { owner } = leaseIn(entry);
    // The watch delivers every write: one it has not shown yet, or one shown less than a lease term
    // ago, is a live owner's renewal.
    const stale =
      seen !== undefined && seen.revision === entry.revision && performance.now() - seen.at >= this.leaseMs;
    if (!stale) return { owner, taken: false };
    try {
      this.#held.set(runId, await this.kv.update(runId, this.#value, entry.revision));
      return { owner: this.owner, taken: true };
    } catch (error) {
      if (wrongRevision(error)) return { owner: this.ownerOf(runId) ?? owner, taken: false };
      throw error;
    }
  }

  /** Gives up the lease of a run that ended (or that this coordinator lets go). */
  async release(runId: string): Promise<void> {
    const revision = this.#held.get(runId);
    this.#held.delete(runId);
    if (revision === undefined) return;
    await this.kv.delete(runId, { previousSeq: revision }).catch(() => undefined); // taken over meanwhile
  }

  /**
   * Stops renewing the lease of `runId` without deleting it: it expires as a dead owner's would,
   * and `onExpired` is told (this coordinator's too) once a lease term has passed.
   */
  letExpire(runId: string): void {
    this.#held.delete(runId);
  }

  /** Stops renewing and watching; the leases still held expire for others to take. */
  stop(): void {
    this.#stopped = true;
    clearInterval(this.#timer);
    this.watch.stop();
  }

  async #follow(): Promise<void> {
    try {
      for await (const entry of this.watch) {
        if (entry.operation !== 'PUT') {
          this.#seen.delete(entry.key);
          continue;
        }
        const { owner, incarnation } = leaseIn(entry);
        // A value without an incarnation is no coordinator's lease but a stray write: the holder
        // keeps the run and overwrites it at its next renewal.
        const stray = incarnation === '' && this.#held.has(entry.key);
        if (stray) this.#held.set(entry.key, entry.revision);
        const mine = stray || incarnation === this.#incarnation;
        this.#seen.set(entry.key, {
          owner,
          mine,
          revision: entry.revision,
          at: performance.now(),
          told: false,
        });
        if (!mine && this.#held.has(entry.key)) {
          this.#held.delete(entry.key);
          this.options.onLost(entry.key, owner);
        }
      }
    } catch (error) {
      if (!this.#stopped) this.options.onError?.(error);
    }
  }

  /** After a reconnect nobody could renew meanwhile: every lease gets a full term again. */
  async #graceAfterReconnect(): Promise<void> {
    for await (const status of this.nc.status()) {
      if (this.#stopped) return;
      if (status.type === 'reconnect') for (const seen of this.#seen.values()) seen.at = performance.now();
    }
  }

  #tick(): void {
    for (const [runId, revision] of this.#held) this.#renew(runId, revision);
    const now = performance.now();
    for (const [runId, seen] of this.#seen) {
      // A lease in this coordinator's name that it does not hold is another process's of the same
      // worker id (an earlier one, say): expired like any other.
      if (seen.told || this.#held.has(runId)) continue;
      if (now - seen.at < this.leaseMs) continue;
      seen.told = true;
      this.options.onExpired(runId, seen.owner);
    }
  }

  #renew(runId: string, revision: number): void {
    this.kv.update(runId, this.#value, revision).then(
      (next) => {
        this.#renewalsFailing = false;
        if (this.#held.get(runId) === revision) this.#held.set(runId, next);
      },
      (error: unknown) => {
        if (!this.#held.has(runId)) return;
        const seen = this.#seen.get(runId);
        if (wrongRevision(error) && seen?.mine === true && seen.revision > revision) {
          // A renewal whose reply was lost (a server restart) still wrote the lease: the watch saw it.
          this.#held.set(runId, seen.revision);
        } else if (wrongRevision(error)) {
          // Another coordinator wrote the lease: the run is theirs now, told at once. The watch
          // may not have shown their write yet, and a lease last seen as this one's names nobody.
          this.#held.delete(runId);
          this.options.onLost(runId, seen !== undefined && !seen.mine ? seen.owner : 'another coordinator');
        } else if (!isTransportFailure(error) && !isNoResponders(error)) this.options.onError?.(error);
        else if (!this.#renewalsFailing) {
          // A cluster electing the bucket's leader answers no renewal for seconds: said once, and
          // renewed at the next tick; a lease expires only after two ticks unrenewed.
          this.#renewalsFailing = true;
          this.options.onError?.(
            new BusError(`leases cannot be renewed for now, renewing again (${errorText(error)})`, {
              cause: error,
            }),
          );
        }
      },
    );
  }
}
