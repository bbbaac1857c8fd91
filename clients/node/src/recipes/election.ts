// Election: leader election on one fair lock (etcd's concurrency.Election, Curator's
// LeaderLatch). Campaigns wait on the server in FIFO order; a term is a watchdog-renewed
// hold with its lost signal; the leader proclaims a value with DLOCK.FENCED under the
// term's token; observers follow the lock's notifications. Same semantics as the Python
// and Rust recipes (docs/recipes.md).
import type { Dlock, Hold, ReleaseOutcome } from "../client.js";
import type { Arg } from "../adapters.js";
import { isNoAnswer } from "../core/classify.js";
import { defaultRenewInterval, needsReanchor } from "../core/lease.js";
import {
  CAMPAIGN_OPTIONS,
  checkKey,
  checkOptions,
  checkRenewInterval,
  ELECTION_OPTIONS,
  finiteOrUndefined,
  OBSERVE_OPTIONS,
} from "../core/options.js";
import { toInt, toRecord, toToken } from "../core/replies.js";
import { AcquireTimeout, Fenced, InvalidArgument, NotHeld } from "../errors.js";
import { channelFor, hashPart, toBytes } from "../slot.js";
import { Subscriber } from "./subscriber.js";

const now = (): number => performance.now();

export interface ElectionOptions {
  /** The owner id this process campaigns as — what `leader()` shows. Default: a new owner id of the client. */
  owner?: string;
  /** The term's lease (ms), renewed by the watchdog. Default: the client's `watchdogLease`. */
  lease?: number;
  /** How often the term is renewed (ms). Default: a third of `lease`. */
  renewInterval?: number;
  /** Default of `campaign({ bind })`. */
  bind?: boolean;
  /** Default of `campaign({ lockDelay })`. */
  lockDelay?: number;
}

export interface CampaignOptions {
  /** How long to wait (ms); `AcquireTimeout` when it passes. Undefined: as long as it takes. */
  timeout?: number;
  /** Aborts the wait (nothing is left waiting on the server). */
  signal?: AbortSignal;
  /**
   * `BIND`: the term is bound to the connection that was granted it, which is kept out of
   * the pool for the term, so a process that dies loses leadership at once
   * (`disconnected`) instead of after the lease.
   */
  bind?: boolean;
  /** `LOCKDELAY ms`: after a term that ends other than by resigning, nobody leads for this long. */
  lockDelay?: number;
}

/** Who leads a term: its owner id, the term's fencing token, and what it proclaimed in this term. */
export interface Leader {
  owner: string;
  token: bigint;
  /** The value proclaimed during this term (null: nothing yet). */
  value: string | null;
}

/**
 * The key that holds the proclaimed value of election `name`, in the lock key's hash slot:
 * `{name}:proclaimed`, or `name:proclaimed` when `name` has a hash tag.
 */
export function valueKey(name: string): string {
  const b = toBytes(name);
  return hashPart(b) !== b ? `${name}:proclaimed` : `{${name}}:proclaimed`;
}

function sameLeader(a: Leader | null, b: Leader | null): boolean {
  if (a === null || b === null) return a === b;
  return a.owner === b.owner && a.token === b.token && a.value === b.value;
}

function text(v: unknown): string | null {
  if (v === null || v === undefined) return null;
  return Buffer.isBuffer(v) ? v.toString("utf8") : String(v);
}

/**
 * A won campaign: leadership until `resign()` or until it is lost. `token` is greater than
 * every earlier term's; `signal` aborts (a `LockLost`) the moment leadership is known to be
 * over — its lease clock ran out (no renewal got through, also after an event-loop stall),
 * a renewal answered 0, or a notice on the lock's channel after which `DLOCK.CHECK` says
 * the token is no longer live (force-release, a BIND connection closed): the client's
 * prompt notice, as for every hold.
 */
export class Term implements AsyncDisposable {
  private outcome: Promise<ReleaseOutcome> | undefined;

  /** @internal */
  constructor(
    readonly election: Election,
    /** The hold of the term (the watchdog renews it). */
    readonly hold: Hold,
  ) {}

  /** The term's fencing token. */
  get token(): bigint {
    return this.hold.token;
  }
  get owner(): string {
    return this.hold.owner;
  }
  /** Aborted (with a `LockLost` reason) when leadership is lost. */
  get signal(): AbortSignal {
    return this.hold.signal;
  }
  /** Whether leadership is known to be over (the lease clock read now). */
  get lost(): boolean {
    return this.hold.lost;
  }
  /** Whether `resign()` was called. */
  get resigned(): boolean {
    return this.outcome !== undefined;
  }

  /**
   * Publishes `value` (e.g. this leader's address) for `leader()` and observers. Written with
   * `DLOCK.FENCED` under the term's token (`HSET valueKey token owner value`), so only the
   * current term's leader can write it; throws `Fenced` (and aborts `signal`) when the term is over.
   */
  async proclaim(value: string | Buffer | number): Promise<void> {
    const e = this.election;
    await this.fenced("HSET", e.valueKey, "token", this.token, "owner", this.owner, "value", value);
    await e._publish("proclaimed");
  }

  /** `DLOCK.FENCED name token ...command`: runs only while this term lasts; throws `Fenced` (and aborts `signal`) otherwise. */
  async fenced(...command: Arg[]): Promise<unknown> {
    try {
      return await this.hold.fenced(...command);
    } catch (err) {
      if (err instanceof Fenced) this.hold._state.gone();
      throw err;
    }
  }

  /**
   * Ends the term: deletes the proclaimed value (fenced) and releases the lock, which hands it
   * to the next campaigner in line. `'released'`, `'lost'` when the term had already ended,
   * or `'unknown'` (no answer: the lease ends it). Never throws; calling it again answers the same.
   */
  resign(): Promise<ReleaseOutcome> {
    this.outcome ??= this.doResign();
    return this.outcome;
  }

  private async doResign(): Promise<ReleaseOutcome> {
    const e = this.election;
    try {
      await e.client.fenced(e.name, this.token, "DEL", e.valueKey);
    } catch {
      // not ours any more (or unreachable): the release below tells
    }
    // Never throws; a bound term's connection is closed with it.
    const outcome = await this.hold.release();
    if (e.term === this) e.term = null;
    return outcome;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.resign();
  }
}

/**
 * Leader election on the fair lock at `name` (etcd's `concurrency.Election`, Curator's
 * `LeaderLatch`), on an ioredis `Redis` or a node-redis client (not a cluster yet).
 */
export class Election {
  readonly owner: string;
  readonly lease: number;
  readonly renewInterval: number;
  readonly bind: boolean;
  readonly lockDelay: number | undefined;
  /** The key of the proclaimed value. */
  readonly valueKey: string;
  /** The lock's notification channel. */
  readonly channel: string;
  /** The current term of this object (null: not leading). */
  term: Term | null = null;
  /** @internal */
  readonly _subscriber: Subscriber;

  constructor(
    readonly client: Dlock,
    readonly name: string,
    options: ElectionOptions = {},
  ) {
    checkKey("new Election()", name, "name");
    checkOptions("new Election()", options, ELECTION_OPTIONS);
    if (client.library.cluster) {
      throw new InvalidArgument("new Election(): needs a standalone client (a cluster client: not yet)", { argument: "client" });
    }
    this.owner = options.owner ?? `${client.newOwner()}:election`;
    this.lease = options.lease ?? client.watchdogLease;
    this.renewInterval =
      options.renewInterval ?? (options.lease === undefined ? client.renewInterval : defaultRenewInterval(this.lease));
    checkRenewInterval("new Election()", this.renewInterval, this.lease, "lease");
    this.bind = options.bind ?? false;
    this.lockDelay = options.lockDelay;
    this.valueKey = valueKey(name);
    this.channel = channelFor(name);
    this._subscriber = new Subscriber(client.redis, this.channel);
  }

  /**
   * Waits until this process leads — on the server, FIFO among campaigners
   * (`DLOCK.FAIRACQUIRE name owner PX lease WAIT … [BIND] [LOCKDELAY ms]`, in slices, on a
   * pooled waiting connection) — and returns the `Term`. Throws `AcquireTimeout` when
   * `timeout` passes, the signal's reason when `signal` aborts. Answers the current term when
   * this object already leads; a lost term of this object is resigned first.
   */
  async campaign(options: CampaignOptions = {}): Promise<Term> {
    checkOptions("campaign()", options, CAMPAIGN_OPTIONS);
    const cur = this.term;
    if (cur !== null && !cur.resigned) {
      if (!cur.lost) return cur;
      // A lost term is ended first (its hold may still be on the server when it was only
      // unreachable): a new term must be a new hold, with a greater token.
      await cur.resign();
    }
    const bind = options.bind ?? this.bind;
    const lockDelay = options.lockDelay ?? this.lockDelay;
    const { name, owner, client } = this;
    const lms = Math.ceil(this.lease);
    const args = (wms: number): Arg[] => {
      const a: Arg[] = ["DLOCK.FAIRACQUIRE", name, owner, "PX", lms, "WAIT", wms];
      if (bind) a.push("BIND");
      if (lockDelay) a.push("LOCKDELAY", Math.ceil(lockDelay));
      return a;
    };
    const attempt = async (run: (a: Arg[]) => Promise<unknown>, wms: number): Promise<{ token: bigint; start: number } | null> => {
      const sent = now();
      const token = toToken(await run(args(wms)), "DLOCK.FAIRACQUIRE");
      if (token === null) return null;
      const t = now();
      if (!needsReanchor(sent, t, lms)) return { token, start: sent };
      // Granted late in a long wait: restart the lease from a known instant.
      const v = toInt(await run(["DLOCK.RENEW", name, owner, "PX", lms]), "DLOCK.RENEW");
      return v === 1 ? { token, start: t } : null;
    };
    const release: Arg[] = ["DLOCK.RELEASE", name, owner];
    // A campaign that stops gives up its queue place at once (DLOCK.CANCEL), in the background.
    const giveUp = (uncertain: boolean): void =>
      client._giveUp(name, owner, { cancel: true, release: uncertain ? release : undefined });
    const watch = client._prewatch(name);
    let got;
    try {
      got = await client._wait({
        key: name,
        timeout: finiteOrUndefined(options.timeout),
        signal: options.signal,
        attempt,
        // A bound term is granted on a connection kept for it: no first try elsewhere.
        firstOnControl: !bind,
        undo: async (_g, run) => {
          await run(release);
        },
        keep: bind,
      });
    } catch (e) {
      void watch.settled();
      giveUp(options.signal?.aborted === true || isNoAnswer(e));
      throw e;
    }
    if (got.value === null) {
      void watch.settled();
      giveUp(got.uncertain);
      throw new AcquireTimeout(
        `election ${JSON.stringify(name)}: not elected within ${options.timeout} ms`,
        got.cause === undefined ? undefined : { cause: got.cause },
      );
    }
    if (options.signal?.aborted) {
      // Granted as the abort came: not a term.
      void watch.settled();
      got.conn?.destroy();
      client._giveUp(name, owner, { cancel: false, release });
      throw options.signal.reason;
    }
    const hold = client._adopt("fair", name, owner, got.value.token, got.value.start, {
      lease: lms,
      renewInterval: this.renewInterval,
      bound: got.conn,
    });
    await watch.settled();
    const term = new Term(this, hold);
    this.term = term;
    await this._publish("elected");
    return term;
  }

  /** Tells observers to look again (on the lock's own channel: any message there means "look again"). @internal */
  async _publish(what: string): Promise<void> {
    try {
      await this.client._call(this.channel, ["PUBLISH", this.channel, what]);
    } catch {
      // observers still see the lock's own notifications
    }
  }

  /** Resigns the current term of this object (null when there is none). */
  async resign(): Promise<ReleaseOutcome | null> {
    const t = this.term;
    return t === null ? null : t.resign();
  }

  /** `term.proclaim(value)` of the current term; throws `NotHeld` when this object does not lead. */
  async proclaim(value: string | Buffer | number): Promise<void> {
    const t = this.term;
    if (t === null || t.resigned) throw new NotHeld(`not the leader of ${JSON.stringify(this.name)}: campaign first`);
    await t.proclaim(value);
  }

  /**
   * Who leads now (`DLOCK.INFO`: the holder, unless its hold is in a lock-delay) and the
   * value it proclaimed in this term — null when nobody leads. The value counts only when
   * it carries the holder's token, so a value of another term is never shown.
   */
  async leader(): Promise<Leader | null> {
    const [info, raw] = await Promise.all([
      this.client.info(this.name),
      this.client._call(this.valueKey, ["HGETALL", this.valueKey]),
    ]);
    if (info === null) return null;
    const holders = Array.isArray(info["holders"]) ? (info["holders"] as unknown[]) : [];
    const proclaimed = raw === null || raw === undefined ? {} : toRecord(raw);
    for (const h of holders) {
      if (h === null || typeof h !== "object") continue;
      const rec = h as Record<string, unknown>;
      if (rec["delayed"] !== undefined && rec["delayed"] !== null) continue;
      const tok = text(rec["token"]);
      if (tok === null || !/^\d+$/.test(tok)) continue;
      const token = BigInt(tok);
      const ptok = text(proclaimed["token"]);
      const value = ptok !== null && /^\d+$/.test(ptok) && BigInt(ptok) === token ? text(proclaimed["value"]) : null;
      return { owner: text(rec["owner"]) ?? "", token, value };
    }
    return null;
  }

  /**
   * Every change of leader (or of its proclaimed value), as an async iterator: the first item
   * is the current state, then one per change (null: nobody leads). Driven by the lock's
   * channel — each message means "look again"; no polling. `signal` (or `observer.close()`,
   * or leaving a `for await` loop) ends it. One consumer at a time. A resign deletes the value
   * before it releases, so an observer may see the leader without its value just before null.
   */
  observe(options: { signal?: AbortSignal } = {}): Observer {
    checkOptions("observe()", options, OBSERVE_OPTIONS);
    const o = new Observer(this, options.signal);
    this._observers.add(o);
    return o;
  }

  /** @internal */
  readonly _observers = new Set<Observer>();

  /**
   * Ends this object's observers and closes its subscription and its own wait connections
   * (resign first: a term is not resigned by this).
   */
  close(): void {
    for (const o of [...this._observers]) o.close();
    this._subscriber.close();
  }
}

const UNSEEN = Symbol("unseen");

/** Leader changes of one `Election` (see `Election.observe`). */
export class Observer implements AsyncIterableIterator<Leader | null> {
  private dirty = true;
  private last: Leader | null | typeof UNSEEN = UNSEEN;
  private wake: (() => void) | undefined;
  private closed = false;
  private readonly ready: Promise<void>;
  private readonly listener = (): void => {
    this.dirty = true;
    this.wake?.();
  };
  private readonly onAbort = (): void => this.close();

  /** @internal */
  constructor(
    readonly election: Election,
    private readonly signal?: AbortSignal,
  ) {
    // Subscribed first, then read: no change is missed in between.
    this.ready = election._subscriber.add(this.listener);
    this.ready.catch(() => undefined);
    signal?.addEventListener("abort", this.onAbort, { once: true });
    if (signal?.aborted) this.close();
  }

  async next(): Promise<IteratorResult<Leader | null>> {
    await this.ready;
    for (;;) {
      if (this.closed) return { done: true, value: undefined };
      if (this.dirty) {
        this.dirty = false;
        let cur: Leader | null;
        try {
          cur = await this.election.leader();
        } catch (e) {
          this.dirty = true; // the next call reads again
          throw e;
        }
        if (this.closed) return { done: true, value: undefined };
        if (this.last === UNSEEN || !sameLeader(cur, this.last)) {
          this.last = cur;
          return { done: false, value: cur };
        }
        continue;
      }
      await new Promise<void>((resolve) => {
        this.wake = resolve;
      });
      this.wake = undefined;
    }
  }

  async return(): Promise<IteratorResult<Leader | null>> {
    this.close();
    return { done: true, value: undefined };
  }

  [Symbol.asyncIterator](): this {
    return this;
  }

  /** Stops observing (a pending `next()` ends with `done`). */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.election._observers.delete(this);
    this.signal?.removeEventListener("abort", this.onAbort);
    this.election._subscriber.remove(this.listener);
    this.wake?.();
  }
}
