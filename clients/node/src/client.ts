// The client: lock kinds, acquiring (server-side waits in slices on pooled connections),
// holds with their watchdog and lost signal, and withLock scopes for re-entry.
import { AsyncLocalStorage } from "node:async_hooks";
import { randomUUID } from "node:crypto";
import { adapt, type Adapter, type Arg, type Library } from "./adapters.js";
import {
  AcquireTimeout,
  DlockError,
  LockLost,
  mapError,
  NotDurable,
  NotHeld,
  UnexpectedReply,
  type LostReason,
} from "./errors.js";
import { WaitPool, type Borrowed } from "./pool.js";
import { toInt, toRecord, toToken } from "./resp.js";

// Node 20.0–20.3 have no Symbol.asyncDispose; later versions define this same symbol.
(Symbol as { asyncDispose?: symbol }).asyncDispose ??= Symbol.for("nodejs.asyncDispose");

/** The kind of a lock as this client takes it. */
export type Kind = "mutex" | "fair" | "read" | "write" | "semaphore";

/** What `release()` found on the server. */
export type ReleaseOutcome =
  /** The hold is gone; this owner holds the lock no more. */
  | "released"
  /** Re-entered inside a `withLock` scope: an outer hold of the same owner remains. */
  | "still-held"
  /** The hold had already ended (lease ran out, force-released): someone else may have had the lock. */
  | "lost";

export interface ClientOptions {
  /** Lease (ms) of a hold taken without `lease`; the watchdog renews it. Default 30000. */
  watchdogLease?: number;
  /** How often the watchdog renews (ms). Default: a third of `watchdogLease`. */
  renewInterval?: number;
  /** The longest single server-side wait (ms); longer waits are cut in slices. Default 5000. */
  waitSlice?: number;
  /** Dedicated connections per server for server-side waits. Default 16; more waiters queue. */
  maxWaitConnections?: number;
  /** A prefix of owner ids (default: a random UUID). */
  ownerPrefix?: string;
  /** Called for every hold of this client that is found lost. */
  onLost?: (key: string, reason: LostReason) => void;
}

export interface AcquireOptions {
  /** How long to wait for the grant (ms). Undefined: as long as it takes; 0: one try. */
  timeout?: number;
  /** Explicit lease (ms), no watchdog: the hold ends (and `signal` aborts) when it runs out. Default: watchdog. */
  lease?: number;
  /** Aborts the wait; nothing is left on the server. */
  signal?: AbortSignal;
  /** The hold ends when the connection that sent the grant closes (`BIND`). */
  bind?: boolean;
  /** `LOCKDELAY ms`: a hold that ends by its lease keeps excluding others this long. */
  lockDelay?: number;
  /** Wait (`WAIT n ms`) until this many replicas have the grant; else release and throw NotDurable. */
  replicas?: number;
  /** How long to wait for the replicas (ms). Default 1000 (below the client's command timeout). */
  replicasTimeout?: number;
  /** Semaphores: permits to take (default: the semaphore's `permits`, 1). */
  permits?: number;
  /**
   * The owner id the server knows this hold by. Default: a new one per acquire. Give a
   * fixed one (redis-semaphore's `identifier`) when another process, or a later run of
   * this one, must take over or release the hold: `lock.attach(owner)`. Two acquires with
   * the same owner share one hold on the server (it counts them).
   */
  owner?: string;
}

/** Options of `lock.attach(owner, options)`. */
export interface AttachOptions {
  /** Explicit lease (ms) from now, no watchdog. Default: the watchdog lease, renewed. */
  lease?: number;
}

/** The longest a give-up waits for its DLOCK.CANCEL reply (ms); the queue's timeout covers the rest. */
const CANCEL_WAIT = 1000;

type Scope = Map<string, HoldState>;
const scopes = new AsyncLocalStorage<Scope>();

const now = (): number => performance.now();
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, Math.max(0, ms)));

function drift(lease: number): number {
  return lease / 100 + 2;
}
function lostMargin(lease: number): number {
  return Math.min(drift(lease), lease / 2);
}
/** Refuses a time that is not a finite number of ms >= `min` (a lease: >= 1, never 0). @internal */
export function checkMs(v: number | undefined, what: string, min = 0): void {
  if (v !== undefined && (!Number.isFinite(v) || v < min)) {
    throw new RangeError(`${what} must be a number of milliseconds >= ${min}, got ${String(v)}`);
  }
}

function checkOwner(owner: string | undefined): void {
  if (owner !== undefined && (typeof owner !== "string" || owner.length === 0)) {
    throw new TypeError(`owner must be a non-empty string, got ${JSON.stringify(owner)}`);
  }
}

function timer(ms: number, fn: () => void): ReturnType<typeof setTimeout> {
  const t = setTimeout(fn, Math.max(0, ms));
  t.unref?.();
  return t;
}

/** One owner's hold of one lock (all its re-entrant grants inside a withLock scope). */
class HoldState {
  depth = 0;
  readonly ctrl = new AbortController();
  ended = false;
  lease: number | undefined; // explicit lease (ms), undefined under the watchdog
  confirmed = 0; // when the last grant/renewal was sent (performance.now())
  private t: ReturnType<typeof setTimeout> | undefined;
  private inflight = false;

  constructor(
    readonly client: Dlock,
    readonly kind: Kind,
    readonly key: string,
    readonly owner: string,
    readonly token: bigint,
  ) {}

  get lost(): boolean {
    if (!this.ctrl.signal.aborted && !this.ended) {
      const at = this.lostAt();
      if (now() >= at) this.markLost(this.lease === undefined ? "unreachable" : "lease-ended");
    }
    return this.ctrl.signal.aborted;
  }

  lostAt(): number {
    const l = this.lease ?? this.client.watchdogLease;
    return this.confirmed + l - lostMargin(l);
  }

  markLost(reason: LostReason): void {
    if (this.ctrl.signal.aborted) return;
    this.stop();
    this.ctrl.abort(new LockLost(this.key, reason));
    try {
      this.client.onLost?.(this.key, reason);
    } catch {
      // a callback must not break the watchdog
    }
  }

  stop(): void {
    if (this.t !== undefined) clearTimeout(this.t);
    this.t = undefined;
  }

  /** Starts the watchdog (no explicit lease) or the lease-end timer. */
  arm(start: number, lease: number | undefined): void {
    this.stop();
    this.lease = lease;
    this.confirmed = start;
    if (lease !== undefined) {
      this.t = timer(this.lostAt() - now(), () => {
        if (!this.ended) this.markLost("lease-ended");
      });
    } else {
      this.schedule(start + this.client.renewInterval);
    }
  }

  private schedule(at: number): void {
    this.stop();
    if (this.ended || this.ctrl.signal.aborted) return;
    const when = Math.min(at, this.lostAt());
    this.t = timer(when - now(), () => void this.tick());
  }

  private async tick(): Promise<void> {
    if (this.ended || this.ctrl.signal.aborted) return;
    const t0 = now();
    if (t0 >= this.lostAt()) return this.markLost("unreachable");
    if (this.inflight) return this.schedule(this.lostAt());
    this.inflight = true;
    const c = this.client;
    const wl = c.watchdogLease;
    // The renewal is abandoned at the end of the lease, whatever the client's own timeouts.
    const limit = Math.max(Math.min(this.lostAt() - t0, Math.max(c.renewInterval, 200)), 1);
    let next: number;
    try {
      const reply = await Promise.race([
        c.adapter.call(this.key, ["DLOCK.RENEW", this.key, this.owner, "PX", Math.ceil(wl)]),
        sleep(limit).then(() => Promise.reject(new Error("renewal timed out"))),
      ]);
      const v = toInt(reply, "DLOCK.RENEW");
      if (this.ended) return;
      if (v === 0) return this.markLost("not-held");
      this.confirmed = t0;
      next = t0 + c.renewInterval;
    } catch {
      next = now() + Math.min(Math.max(wl / 10, 20), c.renewInterval);
    } finally {
      this.inflight = false;
    }
    this.schedule(next);
  }
}

/**
 * A hold of a lock: its fencing `token`, a `signal` that aborts when the hold is lost,
 * `release()`, and `await using` (releases at the end of the scope).
 */
export class Hold implements AsyncDisposable {
  private outcome: Promise<ReleaseOutcome> | undefined;
  private released = false;

  /** @internal */
  constructor(
    private readonly state: HoldState,
    /** Semaphores: the permits this hold took (1 for locks). */
    readonly permits: number,
  ) {}

  /** The lock's key. */
  get key(): string {
    return this.state.key;
  }
  /** The owner id the server knows this hold by. */
  get owner(): string {
    return this.state.owner;
  }
  get kind(): Kind {
    return this.state.kind;
  }
  /** The fencing token: greater than every token issued before for this key. */
  get token(): bigint {
    return this.state.token;
  }
  /** Aborted (with a `LockLost` reason) when the hold is lost. Pass it to the work the lock protects. */
  get signal(): AbortSignal {
    return this.state.ctrl.signal;
  }
  /** Whether the hold is known to be lost (also checks an explicit lease's end now). */
  get lost(): boolean {
    return this.state.lost;
  }
  /**
   * True while this hold is held as far as this client knows: not released (a `release()`
   * that got its answer) and not lost (also checks an explicit lease's end now). Asks
   * nothing of the server: `check()` does.
   */
  get isAcquired(): boolean {
    return !this.released && !this.state.lost;
  }

  /** @internal */
  get _state(): HoldState {
    return this.state;
  }

  /**
   * Restarts the lease (`DLOCK.RENEW`): `lease` ms, default the hold's explicit lease or
   * the watchdog lease. False (and the signal aborted) when the hold was gone.
   */
  async renew(lease?: number): Promise<boolean> {
    checkMs(lease, "lease", 1);
    const s = this.state;
    const l = lease ?? s.lease ?? s.client.watchdogLease;
    const sent = now();
    const v = toInt(
      await s.client._call(s.key, ["DLOCK.RENEW", s.key, s.owner, "PX", Math.ceil(l)]),
      "DLOCK.RENEW",
    );
    if (v === 1) {
      if (s.lease !== undefined) s.arm(sent, l);
      else if (l >= s.client.watchdogLease) s.confirmed = Math.max(s.confirmed, sent);
      return true;
    }
    s.markLost("not-held");
    return false;
  }

  /**
   * Lets go of this hold. Never throws for a lost lock: answers `'lost'` instead. Calling
   * it again (or leaving an `await using` scope after it) answers the same.
   */
  release(): Promise<ReleaseOutcome> {
    this.outcome ??= this.doRelease();
    return this.outcome;
  }

  private async doRelease(): Promise<ReleaseOutcome> {
    const s = this.state;
    const c = s.client;
    s.depth -= this.permits;
    const last = s.depth <= 0;
    const wasLost = s.lost;
    if (last) {
      s.ended = true; // no renewal may race the last release
      s.stop();
    }
    const args: Arg[] = ["DLOCK.RELEASE", s.key, s.owner];
    if (s.kind === "read") args.push("READ");
    else if (s.kind === "write") args.push("WRITE");
    else if (s.kind === "semaphore" && this.permits !== 1) args.push("PERMITS", this.permits);
    let outcome: ReleaseOutcome;
    try {
      const v = toInt(await c._call(s.key, args), "DLOCK.RELEASE");
      if (v !== 0 && v !== 1) throw new UnexpectedReply(`DLOCK.RELEASE answered ${v}, expected 1 or 0`);
      outcome = wasLost ? "lost" : v === 1 ? "released" : "still-held";
    } catch (e) {
      if (!(e instanceof NotHeld)) {
        // Not answered (connection error): the hold stays counted; release() may be
        // called again. The watchdog stays stopped: the lease ends the hold otherwise.
        s.depth += this.permits;
        this.outcome = undefined;
        throw e;
      }
      s.ended = false;
      s.markLost("not-held");
      s.ended = true;
      outcome = "lost";
    }
    c._forget(s, last);
    this.released = true;
    return outcome;
  }

  /** `DLOCK.CHECK`: whether the token is still that of a live hold. */
  async check(): Promise<boolean> {
    return this.state.client.check(this.state.key, this.state.token);
  }

  /**
   * `DLOCK.FENCED key token ...command`: runs `command` only while this hold is live,
   * atomically; throws `Fenced` otherwise. The command's own errors stay its own.
   */
  fenced(...command: Arg[]): Promise<unknown> {
    return this.state.client.fenced(this.state.key, this.state.token, ...command);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.release();
  }
}

interface Grant {
  token: bigint;
  start: number;
}

/** What the lock kinds share: acquire, tryAcquire, withLock. */
export class Lock {
  /**
   * Fair locks: owners of this object's acquires that were not granted. The server keeps
   * their queue places for `dlock.fair-queue-timeout-ms`; the next acquire resumes one.
   * @internal
   */
  readonly _spareOwners: string[] = [];

  /** @internal */
  constructor(
    readonly client: Dlock,
    readonly name: string,
    readonly kind: Kind,
    readonly defaults: AcquireOptions = {},
    /** Semaphores: the limit. */
    readonly limit?: number,
  ) {}

  /**
   * Waits (on the server, FIFO) until granted. Throws `AcquireTimeout` when `timeout`
   * passes first, and the signal's reason when `signal` aborts the wait.
   */
  async acquire(options: AcquireOptions = {}): Promise<Hold> {
    const h = await this.client._acquire(this, { ...this.defaults, ...options });
    if (h === null) {
      throw new AcquireTimeout(
        `${this.kind} ${JSON.stringify(this.name)} was not granted within ${options.timeout ?? this.defaults.timeout} ms`,
      );
    }
    return h;
  }

  /**
   * Takes over the hold that `owner` has on this lock — taken by another process, or by
   * an earlier run of this one, with `acquire({ owner })` — so that this process can
   * renew it, `release()` it, or fence with its token (redis-semaphore's
   * `acquiredExternally`). Restarts its lease (`DLOCK.RENEW`, the watchdog's by default).
   * Null when `owner` holds nothing here.
   */
  async attach(owner: string, options: AttachOptions = {}): Promise<Hold | null> {
    checkOwner(owner);
    if (owner === undefined) throw new TypeError("attach(owner): owner is missing");
    return this.client._attach(this, owner, options);
  }

  /** One try (or a wait of at most `timeout` ms): the hold, or null when not granted. */
  async tryAcquire(options: AcquireOptions = {}): Promise<Hold | null> {
    return this.client._acquire(this, { timeout: 0, ...this.defaults, ...options });
  }

  /**
   * Runs `fn(signal, hold)` holding the lock, then releases it (also when `fn` throws).
   * Inside `fn`, acquiring the same lock again re-enters it (same owner and token).
   * Throws `LockLost` when the hold was lost while `fn` ran (after `fn` returned).
   */
  async withLock<T>(fn: (signal: AbortSignal, hold: Hold) => Promise<T> | T): Promise<T>;
  async withLock<T>(
    options: AcquireOptions,
    fn: (signal: AbortSignal, hold: Hold) => Promise<T> | T,
  ): Promise<T>;
  async withLock<T>(
    a: AcquireOptions | ((signal: AbortSignal, hold: Hold) => Promise<T> | T),
    b?: (signal: AbortSignal, hold: Hold) => Promise<T> | T,
  ): Promise<T> {
    const [options, fn] = typeof a === "function" ? [{}, a] : [a, b];
    if (fn === undefined) throw new TypeError("withLock(options, fn): fn is missing");
    const hold = await this.acquire(options);
    const scope: Scope = new Map(scopes.getStore() ?? []);
    scope.set(scopeKey(this.kind, this.name), hold._state);
    let result: T;
    try {
      result = await scopes.run(scope, () => fn(hold.signal, hold));
    } catch (e) {
      try {
        await hold.release();
      } catch {
        // fn's error is the one to report
      }
      throw e;
    }
    const outcome = await hold.release();
    if (outcome === "lost") {
      throw hold.signal.reason instanceof LockLost ? hold.signal.reason : new LockLost(this.name, "not-held");
    }
    return result;
  }
}

/** A read-write lock: `read()` and `write()` are its two sides. */
export class RWLock {
  /** @internal */
  constructor(
    readonly client: Dlock,
    readonly name: string,
    private readonly defaults: AcquireOptions = {},
  ) {}
  read(): Lock {
    return new Lock(this.client, this.name, "read", this.defaults);
  }
  write(): Lock {
    return new Lock(this.client, this.name, "write", this.defaults);
  }
}

/** A countdown latch (`DLOCK.LATCHSET / COUNTDOWN / AWAIT`). */
export class Latch {
  /** @internal */
  constructor(
    readonly client: Dlock,
    readonly name: string,
  ) {}
  /** Creates the latch with `count` when none exists: true; false when one exists. */
  async trySetCount(count: number): Promise<boolean> {
    return toInt(await this.client._call(this.name, ["DLOCK.LATCHSET", this.name, count]), "DLOCK.LATCHSET") === 1;
  }
  /** Lowers the count by one: the new count (0: open, or no latch). */
  async countDown(): Promise<number> {
    return toInt(await this.client._call(this.name, ["DLOCK.COUNTDOWN", this.name]), "DLOCK.COUNTDOWN") ?? 0;
  }
  /** The current count (0: open). */
  async count(): Promise<number> {
    const info = await this.client.info(this.name);
    return info === null ? 0 : Number(info["count"] ?? 0);
  }
  /** Waits until the latch opens: true, or false when `timeout` ms pass first. */
  async wait(options: { timeout?: number; signal?: AbortSignal } = {}): Promise<boolean> {
    const got = await this.client._waitLoop(this.name, options.timeout, options.signal, async (run, wms) => {
      const v = toInt(await run(["DLOCK.AWAIT", this.name, "WAIT", wms]), "DLOCK.AWAIT");
      return v === 1 ? true : null;
    });
    return got === true;
  }
}

function scopeKey(kind: Kind, name: string): string {
  return `${kind}\u0000${name}`;
}

type Runner = (args: Arg[]) => Promise<unknown>;

/**
 * dlock on one ioredis or node-redis client (plain, cluster). Factories make locks; no
 * I/O until they are acquired.
 */
export class Dlock {
  /** @internal */
  readonly adapter: Adapter;
  readonly watchdogLease: number;
  readonly renewInterval: number;
  readonly waitSlice: number;
  readonly ownerPrefix: string;
  readonly onLost: ((key: string, reason: LostReason) => void) | undefined;
  private readonly pool: WaitPool;
  private seq = 0;
  private readonly holds = new Set<HoldState>();

  constructor(readonly redis: unknown, options: ClientOptions = {}) {
    checkMs(options.watchdogLease, "watchdogLease", 1);
    checkMs(options.renewInterval, "renewInterval", 1);
    checkMs(options.waitSlice, "waitSlice", 0);
    this.adapter = adapt(redis);
    this.watchdogLease = options.watchdogLease ?? 30000;
    this.renewInterval = options.renewInterval ?? this.watchdogLease / 3;
    this.waitSlice = options.waitSlice ?? 5000;
    this.ownerPrefix = options.ownerPrefix ?? randomUUID();
    this.onLost = options.onLost;
    const max = Math.max(1, options.maxWaitConnections ?? 16);
    this.pool = new WaitPool(this.adapter, max, Math.min(max, 4));
  }

  /** Which library the client is from, and whether it is a cluster. */
  get library(): { name: Library; cluster: boolean } {
    return { name: this.adapter.library, cluster: this.adapter.cluster };
  }

  // -- factories ------------------------------------------------------------------

  /** The mutex at key `name` (`DLOCK.ACQUIRE`). */
  lock(name: string, defaults?: AcquireOptions): Lock {
    return new Lock(this, name, "mutex", defaults);
  }
  /** The fair (FIFO by first request) lock at `name` (`DLOCK.FAIRACQUIRE`). */
  fairLock(name: string, defaults?: AcquireOptions): Lock {
    return new Lock(this, name, "fair", defaults);
  }
  /** The read-write lock at `name` (`DLOCK.RWACQUIRE`). */
  rwLock(name: string, defaults?: AcquireOptions): RWLock {
    return new RWLock(this, name, defaults);
  }
  /** The semaphore of `limit` permits at `name` (`DLOCK.SEMACQUIRE`). */
  semaphore(name: string, limit: number, defaults?: AcquireOptions): Lock {
    if (!Number.isInteger(limit) || limit < 1) throw new RangeError("limit must be an integer >= 1");
    return new Lock(this, name, "semaphore", defaults, limit);
  }
  /** The countdown latch at `name`. */
  latch(name: string): Latch {
    return new Latch(this, name);
  }

  /** `lock(name).withLock(options, fn)`. */
  withLock<T>(name: string, fn: (signal: AbortSignal, hold: Hold) => Promise<T> | T): Promise<T>;
  withLock<T>(
    name: string,
    options: AcquireOptions,
    fn: (signal: AbortSignal, hold: Hold) => Promise<T> | T,
  ): Promise<T>;
  withLock<T>(
    name: string,
    a: AcquireOptions | ((signal: AbortSignal, hold: Hold) => Promise<T> | T),
    b?: (signal: AbortSignal, hold: Hold) => Promise<T> | T,
  ): Promise<T> {
    if (typeof a === "function") return this.lock(name).withLock({}, a);
    if (b === undefined) throw new TypeError("withLock(name, options, fn): fn is missing");
    return this.lock(name).withLock(a, b);
  }

  // -- plain commands -------------------------------------------------------------

  /** Sends `args` (a command about `key`) on the user's client; error replies mapped. @internal */
  async _call(key: string | undefined, args: Arg[], ownErrors = true): Promise<unknown> {
    try {
      return await this.adapter.call(key, args);
    } catch (e) {
      throw mapError(e, ownErrors);
    }
  }

  /** Any command (routed by `key` in a cluster), error replies mapped to this package's errors. */
  execute(key: string | undefined, ...args: Arg[]): Promise<unknown> {
    return this._call(key, args);
  }

  /** `DLOCK.INFO` as an object (null: no lock); RESP2 and RESP3 give the same. */
  async info(key: string): Promise<Record<string, unknown> | null> {
    const v = await this._call(key, ["DLOCK.INFO", key]);
    return v === null || v === undefined ? null : toRecord(v);
  }

  /** `DLOCK.FORCERELEASE`: removes the lock whatever its holders. */
  async forceRelease(key: string): Promise<boolean> {
    return toInt(await this._call(key, ["DLOCK.FORCERELEASE", key]), "DLOCK.FORCERELEASE") === 1;
  }

  /** `DLOCK.CHECK`: whether `token` is that of a live hold of `key`. */
  async check(key: string, token: bigint | number): Promise<boolean> {
    return toInt(await this._call(key, ["DLOCK.CHECK", key, BigInt(token)]), "DLOCK.CHECK") === 1;
  }

  /** `DLOCK.FENCED key token ...command`; throws `Fenced` when the token is not live. */
  fenced(key: string, token: bigint | number, ...command: Arg[]): Promise<unknown> {
    if (command.length === 0) return Promise.reject(new TypeError("fenced() needs a command to run"));
    return this._call(key, ["DLOCK.FENCED", key, BigInt(token), ...command], false);
  }

  /**
   * `DLOCK.CANCEL key owner`: gives up `owner`'s queue places (a fair-queue place, a
   * server-side wait). True when the server ran it; false when it could not (a module
   * older than CANCEL, a connection error): then the queue's timeout frees the place.
   * @internal
   */
  async _cancel(key: string, owner: string): Promise<boolean> {
    // Bounded: a give-up after a connection error must not wait for the client's retries.
    let t: ReturnType<typeof setTimeout> | undefined;
    try {
      return await Promise.race([
        this.adapter.call(key, ["DLOCK.CANCEL", key, owner]).then(() => true),
        new Promise<boolean>((resolve) => {
          t = timer(CANCEL_WAIT, () => resolve(false));
        }),
      ]);
    } catch {
      return false;
    } finally {
      if (t !== undefined) clearTimeout(t);
    }
  }

  /** A new owner id: one per acquire (async tasks never share one). */
  newOwner(): string {
    this.seq += 1;
    return `${this.ownerPrefix}:${this.seq}`;
  }

  /** Closes this client's own wait connections (not the redis client you passed in). */
  close(): void {
    this.pool.close();
    for (const h of this.holds) {
      h.ended = true;
      h.stop();
    }
    this.holds.clear();
  }

  // -- acquiring ------------------------------------------------------------------

  /** The longest server-side wait that fits in the client's command timeout. @internal */
  _slice(): number {
    const t = this.adapter.commandTimeout();
    if (t === undefined) return this.waitSlice;
    return Math.max(0, Math.min(this.waitSlice, Math.floor(t - Math.max(0.25 * t, 50))));
  }

  /**
   * Runs `attempt(run, waitMs)` until it answers (not null), `timeout` passes (null) or
   * `signal` aborts (throws its reason): `run` sends on a pooled connection of our own,
   * each server-side wait in slices below the client's timeout. @internal
   */
  async _waitLoop<T>(
    key: string,
    timeout: number | undefined,
    signal: AbortSignal | undefined,
    attempt: (run: Runner, waitMs: number) => Promise<T | null>,
    first?: () => Promise<T | null>,
    onAbortGrant?: (reply: unknown, run: Runner) => Promise<void>,
    /** Takes the waiting connection that answered (not null) instead of the pool (e.g. a BIND hold's). */
    keep?: (conn: Borrowed) => void,
  ): Promise<T | null> {
    checkMs(timeout, "timeout");
    signal?.throwIfAborted();
    const deadline = timeout === undefined ? Infinity : now() + timeout;
    if (first !== undefined) {
      const got = await first();
      if (got !== null) return got;
      if (timeout === 0) return null;
    }
    const slice = this._slice();
    let b: Borrowed | undefined;
    let ok = true;
    try {
      b = await this.pool.borrow(key, signal);
      const conn = b.conn;
      const run: Runner = async (args) => {
        try {
          return await conn.call(args);
        } catch (e) {
          const m = mapError(e);
          if (m === e && !(e instanceof DlockError) && !isReply(e)) ok = false; // connection state unknown
          throw m;
        }
      };
      for (;;) {
        signal?.throwIfAborted();
        const left = deadline - now();
        if (left <= 0 && timeout !== undefined && first !== undefined) return null;
        const wms = slice < 1 ? 0 : Math.max(0, Math.floor(Math.min(left, slice)));
        let got: T | null;
        if (signal === undefined) {
          got = await attempt(run, wms);
        } else {
          got = await this.abortable(key, conn.clientId, attempt(run, wms), signal, run, onAbortGrant, () => {
            ok = false;
          });
        }
        if (got !== null) {
          if (keep !== undefined && ok) {
            keep(b);
            b = undefined;
          }
          return got;
        }
        if (now() >= deadline) return null;
        if (slice < 1) await sleep(Math.min(50, deadline - now()));
      }
    } finally {
      b?.done(ok);
    }
  }

  /** Races a blocked attempt with `signal`; on abort, unblocks it and undoes a grant that raced. */
  private abortable<T>(
    key: string,
    clientId: number,
    p: Promise<T | null>,
    signal: AbortSignal,
    run: Runner,
    onAbortGrant: ((reply: unknown, run: Runner) => Promise<void>) | undefined,
    broken: () => void,
  ): Promise<T | null> {
    return new Promise<T | null>((resolve, reject) => {
      let settled = false;
      const onAbort = async (): Promise<void> => {
        // CLIENT UNBLOCK answers the blocked command with nil (as on timeout), so the
        // server keeps nothing of the wait; a grant that came first is released.
        const done = p.then(
          (v) => ({ v, e: undefined as unknown }),
          (e: unknown) => ({ v: null, e }),
        );
        let out: { v: T | null; e: unknown } | undefined;
        for (let i = 0; i < 200 && out === undefined; i++) {
          try {
            // (routed by the key: to the server the waiting connection is on)
            await this.adapter.call(key, ["CLIENT", "UNBLOCK", clientId]);
          } catch {
            break; // not allowed (ACL) or not reachable: fall back to closing the connection
          }
          out = await Promise.race([done, sleep(25).then(() => undefined)]);
        }
        if (out === undefined) {
          broken();
          out = await Promise.race([done, sleep(0).then(() => undefined)]);
        }
        if (out !== undefined && out.v !== null && onAbortGrant !== undefined) {
          try {
            await onAbortGrant(out.v, run);
          } catch {
            // the lease ends it
          }
        }
        reject(signal.reason);
      };
      const listener = (): void => {
        if (!settled) {
          settled = true;
          void onAbort();
        }
      };
      signal.addEventListener("abort", listener, { once: true });
      p.then(
        (v) => {
          if (settled) return;
          settled = true;
          signal.removeEventListener("abort", listener);
          resolve(v);
        },
        (e) => {
          if (settled) return;
          settled = true;
          signal.removeEventListener("abort", listener);
          reject(e);
        },
      );
    });
  }

  /** @internal */
  async _acquire(lock: Lock, o: AcquireOptions): Promise<Hold | null> {
    checkMs(o.lease, "lease", 1);
    checkMs(o.lockDelay, "lockDelay");
    checkOwner(o.owner);
    const permits = lock.kind === "semaphore" ? (o.permits ?? 1) : 1;
    if (!Number.isInteger(permits) || permits < 1) throw new RangeError("permits must be an integer >= 1");
    const key = lock.name;
    // A fixed owner is the caller's: no scope re-entry, no resumed place of another owner.
    const outer = o.owner === undefined ? scopes.getStore()?.get(scopeKey(lock.kind, key)) : undefined;
    const reentry = outer !== undefined && !outer.ended && !outer.lost;
    const spare = lock.kind === "fair" && !reentry && o.owner === undefined ? lock._spareOwners.pop() : undefined;
    const owner = o.owner ?? (reentry ? outer.owner : (spare ?? this.newOwner()));
    const leaseMs = Math.ceil(o.lease ?? this.watchdogLease);
    const args = (wms: number): Arg[] => {
      const a: Arg[] = [commandOf(lock.kind), key, owner];
      if (lock.kind === "read") a.push("READ");
      else if (lock.kind === "write") a.push("WRITE");
      else if (lock.kind === "semaphore") {
        a.push("LIMIT", lock.limit ?? 1);
        if (permits !== 1) a.push("PERMITS", permits);
      }
      a.push("PX", leaseMs, "WAIT", wms);
      if (o.bind) a.push("BIND");
      if (o.lockDelay) a.push("LOCKDELAY", Math.ceil(o.lockDelay));
      return a;
    };
    const replicas = o.replicas ?? 0;
    const releaseArgs = (): Arg[] => {
      const a: Arg[] = ["DLOCK.RELEASE", key, owner];
      if (lock.kind === "read") a.push("READ");
      else if (lock.kind === "write") a.push("WRITE");
      else if (lock.kind === "semaphore" && permits !== 1) a.push("PERMITS", permits);
      return a;
    };
    const grant = async (run: Runner, wms: number): Promise<Grant | null> => {
      const sent = now();
      const token = toToken(await run(args(wms)), commandOf(lock.kind));
      if (token === null) return null;
      if (replicas > 0) {
        const wait = Math.ceil(o.replicasTimeout ?? Math.min(1000, Math.max(this._slice(), 100)));
        let acked = 0;
        try {
          acked = toInt(await run(["WAIT", replicas, wait]), "WAIT") ?? 0;
        } finally {
          if (acked < replicas) await run(releaseArgs()).catch(() => undefined);
        }
        if (acked < replicas) throw new NotDurable(key, acked, replicas);
      }
      // A grant after a long wait: re-anchor the lease clock with a RENEW.
      const t = now();
      if (t - sent <= leaseMs / 4) return { token, start: sent };
      const v = toInt(await run(["DLOCK.RENEW", key, owner, "PX", leaseMs]), "DLOCK.RENEW");
      return v === 1 ? { token, start: t } : null;
    };
    const shared: Runner = (a) => this._call(key, a);
    // A first try on the user's client (no WAIT, nothing parked); waits go to our pool.
    // With `replicas`, the grant and its WAIT must share a connection: all on the pool.
    const first = replicas > 0 ? undefined : () => grant(shared, 0);
    const undo = async (reply: unknown, run: Runner): Promise<void> => {
      if (reply !== null) await run(releaseArgs());
    };
    // Giving up (timeout, abort, error): DLOCK.CANCEL gives up the owner's queue places at
    // once, so no later owner waits behind one that left. Not needed after a single try of
    // a lock without a fair queue (nothing was queued). A module without CANCEL keeps a fair
    // place for dlock.fair-queue-timeout-ms: this Lock's next acquire resumes it.
    const giveUp = async (): Promise<void> => {
      if (reentry) return;
      const waited = o.timeout !== 0 || replicas > 0 || o.signal !== undefined;
      if (lock.kind !== "fair" && !waited) return;
      const cancelled = await this._cancel(key, owner);
      if (!cancelled && lock.kind === "fair" && o.owner === undefined) lock._spareOwners.push(owner);
    };
    let got: Grant | null;
    try {
      got = await this._waitLoop(key, o.timeout, o.signal, (run, wms) => grant(run, wms), first, undo);
    } catch (e) {
      if (o.signal?.aborted && !reentry) {
        // Normally CLIENT UNBLOCK already undid everything; where it is not allowed the
        // waiting connection was closed instead: make sure no grant outlives the abort.
        await shared(releaseArgs()).catch(() => undefined);
      }
      await giveUp();
      throw e;
    }
    if (got === null) {
      await giveUp();
      return null;
    }
    if (o.signal?.aborted) {
      await shared(releaseArgs()).catch(() => undefined);
      throw o.signal.reason;
    }
    let state: HoldState;
    if (reentry && outer.token === got.token) {
      state = outer;
    } else {
      state = new HoldState(this, lock.kind, key, owner, got.token);
      state.arm(got.start, o.lease);
      this.holds.add(state);
    }
    state.depth += permits;
    return new Hold(state, permits);
  }

  /** @internal */
  async _attach(lock: Lock, owner: string, o: AttachOptions): Promise<Hold | null> {
    checkMs(o.lease, "lease", 1);
    const key = lock.name;
    const info = await this.info(key);
    if (info === null) return null;
    const mode = lock.kind === "read" ? "read" : lock.kind === "write" ? "write" : undefined;
    const holders = Array.isArray(info["holders"]) ? (info["holders"] as Array<Record<string, unknown>>) : [];
    const mine = holders.find((h) => String(h["owner"]) === owner && (mode === undefined || h["mode"] === mode));
    if (mine === undefined) return null;
    const token = toToken(mine["token"] ?? info["token"], "DLOCK.INFO token");
    if (token === null) return null;
    const lease = Math.ceil(o.lease ?? this.watchdogLease);
    const sent = now();
    const v = toInt(await this._call(key, ["DLOCK.RENEW", key, owner, "PX", lease]), "DLOCK.RENEW");
    if (v !== 1) return null;
    const count = Number(mine["count"] ?? 1);
    const permits = lock.kind === "semaphore" ? Number(mine["permits"] ?? count) : 1;
    const state = new HoldState(this, lock.kind, key, owner, token);
    state.arm(sent, o.lease);
    this.holds.add(state);
    state.depth = permits;
    return new Hold(state, permits);
  }

  /**
   * A hold for a grant sent outside `acquire` (the recipes): `start` is when the granting
   * command was sent; `lease` an explicit lease, undefined for the watchdog. @internal
   */
  _adopt(kind: Kind, key: string, owner: string, token: bigint, start: number, lease?: number): Hold {
    const state = new HoldState(this, kind, key, owner, token);
    state.arm(start, lease);
    this.holds.add(state);
    state.depth = 1;
    return new Hold(state, 1);
  }

  /** @internal */
  _forget(s: HoldState, last: boolean): void {
    if (last) this.holds.delete(s);
  }
}

function isReply(e: unknown): boolean {
  return e instanceof Error && (e.name === "ReplyError" || e.constructor?.name === "ErrorReply");
}

function commandOf(kind: Kind): string {
  switch (kind) {
    case "mutex":
      return "DLOCK.ACQUIRE";
    case "fair":
      return "DLOCK.FAIRACQUIRE";
    case "read":
    case "write":
      return "DLOCK.RWACQUIRE";
    case "semaphore":
      return "DLOCK.SEMACQUIRE";
  }
}
