// The client: lock kinds, acquiring (server-side waits in slices on connections of this
// package's own), holds with their lease clock, watchdog, notices and loss signal, and
// withLock scopes for re-entry. The rules are in core/ (no I/O); this file drives them:
// it sends what they ask, arms the timers they name, and feeds the answers back.
import { AsyncLocalStorage } from "node:async_hooks";
import { randomUUID } from "node:crypto";
import { adapt, type Adapter, type Dedicated, type Library } from "./adapters.js";
import { isNoAnswer, mapError } from "./core/classify.js";
import {
  acquireArgs,
  acquireCommand,
  cancelArgs,
  checkArgs,
  releaseArgs,
  renewArgs,
  type Arg,
  type Kind,
} from "./core/commands.js";
import { defaultRenewInterval, HoldLife, needsReanchor, type LostReason, type Verdict } from "./core/lease.js";
import {
  ACQUIRE_OPTIONS,
  ATTACH_OPTIONS,
  checkKey,
  checkOptions,
  checkRenewInterval,
  CLIENT_OPTIONS,
  finiteOrUndefined,
  int,
  LATCH_WAIT_OPTIONS,
} from "./core/options.js";
import { toInt, toRecord, toToken } from "./core/replies.js";
import { Release, type ReleaseOutcome } from "./core/unlock.js";
import { DEFAULT_SLICE, requestTimeout, WaitPlan } from "./core/wait.js";
import {
  AcquireTimeout,
  ConnectionError,
  InvalidArgument,
  LockLost,
  ModuleNotLoaded,
  NotDurable,
  NotHeld,
  WrongKind,
} from "./errors.js";
import { Notices, type Watched } from "./notices.js";
import { callOn, Connections, type Borrowed } from "./pool.js";

export type { Kind, ReleaseOutcome };

// Node 20.0–20.3 have no Symbol.asyncDispose; later versions define this same symbol.
(Symbol as { asyncDispose?: symbol }).asyncDispose ??= Symbol.for("nodejs.asyncDispose");

export interface ClientOptions {
  /** Lease (ms) of a hold taken without `lease`; the watchdog renews it. Default 30000. */
  watchdogLease?: number;
  /** How often the watchdog renews (ms), shorter than `watchdogLease`. Default: a third of `watchdogLease`. */
  renewInterval?: number;
  /**
   * The longest single server-side wait (ms); longer waits are cut in slices, each also
   * shorter than the transport's own reply timeout. Default 4000.
   */
  waitSlice?: number;
  /** Waiting connections per server. Default 16; more waiters queue. */
  maxWaitConnections?: number;
  /** A prefix of owner ids (default: a random UUID). */
  ownerPrefix?: string;
  /** Called for every hold of this client that is found lost. */
  onLost?: (key: string, reason: LostReason) => void;
}

export interface AcquireOptions {
  /** How long to wait for the grant (ms). Undefined (or Infinity): as long as it takes; 0: one try. */
  timeout?: number;
  /** Explicit lease (ms), no watchdog: the hold ends (and `signal` aborts) when it runs out. Default: watchdog. */
  lease?: number;
  /** Aborts the wait; nothing is left on the server. */
  signal?: AbortSignal;
  /** The hold ends when the connection that was granted it closes (`BIND`); that connection is kept for the hold. */
  bind?: boolean;
  /** `LOCKDELAY ms`: a hold that ends by its lease keeps excluding others this long. */
  lockDelay?: number;
  /** Wait (`WAIT n ms`) until this many replicas have the grant; else release and throw NotDurable. */
  replicas?: number;
  /** How long to wait for the replicas (ms). Default 1000 (below the client's command timeout). */
  replicasTimeout?: number;
  /** Semaphores: permits to take (default 1). */
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

type Scope = Map<string, HoldState>;
const scopes = new AsyncLocalStorage<Scope>();

const now = (): number => performance.now();

/** A timer that keeps no process alive. */
function timer(ms: number, fn: () => void): ReturnType<typeof setTimeout> {
  const t = setTimeout(fn, Math.max(0, ms));
  t.unref?.();
  return t;
}

/** Resolves after `ms`, or rejects with the signal's reason when it aborts first. */
function pause(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = (): void => {
      clearTimeout(t);
      reject(signal?.reason);
    };
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, Math.max(0, ms));
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** Sends `args` somewhere (a connection of this package's own), answering the reply. */
type Runner = (args: Arg[]) => Promise<unknown>;

/**
 * One owner's hold of one lock (all its re-entrant grants inside a withLock scope): the
 * core's `HoldLife`, with the timers it names, its renewals, its checks after a notice,
 * and its BIND connection.
 */
export class HoldState implements Watched {
  depth = 0;
  readonly ctrl = new AbortController();
  readonly life: HoldLife;
  private lostTimer: ReturnType<typeof setTimeout> | undefined;
  private renewTimer: ReturnType<typeof setTimeout> | undefined;
  private checking = false;
  private recheck = false;
  private watched = false;
  /** A BIND hold's own connection (kept out of the pool for the hold). */
  private bound: Dedicated | undefined;

  constructor(
    readonly client: Dlock,
    readonly kind: Kind,
    readonly key: string,
    readonly owner: string,
    readonly token: bigint,
    /** The lease (ms) each grant or renewal gives. */
    readonly lease: number,
    /** The watchdog's renew interval (ms); undefined: an explicit lease, never renewed. */
    renewInterval: number | undefined,
    /** When the granting command was sent. */
    sent: number,
  ) {
    this.life = new HoldLife(lease, renewInterval, sent);
  }

  /** Starts the timers and the notices; `bound` is a BIND hold's own connection. */
  start(bound?: Dedicated): void {
    if (this.client._closed) {
      bound?.destroy();
      return this.apply(this.life.fail(this.life.watchdog ? "unreachable" : "expired"));
    }
    this.bound = bound;
    bound?.setRef(false);
    bound?.onClose(() => {
      if (this.bound === bound) this.apply(this.life.bindClosed());
    });
    this.armLost();
    this.armRenew();
    this.watched = true;
    void this.client._notices.watch(this);
  }

  /**
   * Whether the hold is lost (the clock read now: a lease that ran out counts at once; so
   * does a hold the server called gone, whose signal waits a moment for the reason).
   */
  get lost(): boolean {
    this.apply(this.life.tick(now()));
    return this.ctrl.signal.aborted || this.life.gone;
  }

  /** Acts on what the core decided. */
  apply(v: Verdict): void {
    switch (v.kind) {
      case "lost":
        return this.fire(v.reason);
      case "check":
        return void this.check();
      case "wait":
        return this.armLost(v.until);
      case "none":
        return;
    }
  }

  /** The loss signal: fires once, stops the timers, and tells `onLost`. */
  private fire(reason: LostReason): void {
    if (this.ctrl.signal.aborted) return;
    this.stop();
    // A lost BIND hold's connection is closed: the server ends the hold at once if it had not.
    this.closeBound();
    this.ctrl.abort(new LockLost(this.key, reason));
    try {
      this.client.onLost?.(this.key, reason);
    } catch {
      // a callback must not break the client
    }
  }

  /** Stops the timers and the notices (the hold is lost or released). */
  stop(): void {
    if (this.lostTimer !== undefined) clearTimeout(this.lostTimer);
    if (this.renewTimer !== undefined) clearTimeout(this.renewTimer);
    this.lostTimer = undefined;
    this.renewTimer = undefined;
    if (this.watched) {
      this.watched = false;
      this.client._notices.unwatch(this);
    }
  }

  closeBound(): void {
    const b = this.bound;
    this.bound = undefined;
    b?.destroy();
  }

  /** The lease clock's own timer (no call in flight can delay it), or a gone hold's wait for a reason. */
  private armLost(at = this.life.validUntil): void {
    if (this.lostTimer !== undefined) clearTimeout(this.lostTimer);
    this.lostTimer = undefined;
    if (!this.life.held && !this.life.gone) return;
    this.lostTimer = timer(at - now(), () => {
      this.lostTimer = undefined;
      this.apply(this.life.tick(now()));
      // Acknowledged renewals moved the clock on (or the timer fired a little early).
      if (this.life.held) this.armLost();
      else if (this.life.gone) this.armLost(now() + 1);
    });
  }

  private armRenew(at = this.life.renewAt): void {
    if (this.renewTimer !== undefined) clearTimeout(this.renewTimer);
    this.renewTimer = undefined;
    if (!this.life.held || at === Infinity) return;
    this.renewTimer = timer(at - now(), () => {
      this.renewTimer = undefined;
      void this.renew();
    });
  }

  /** One renewal: bounded by the lease clock, on the client's control connection. */
  private async renew(): Promise<void> {
    const sent = now();
    const deadline = this.life.startRenewal(sent);
    if (deadline === undefined) return this.armRenew();
    const c = this.client;
    try {
      const reply = await c._conns.request(this.key, renewArgs(this.key, this.owner, this.lease), {
        within: Math.max(1, deadline - sent),
        background: true,
      });
      this.apply(this.life.renewed(sent, toInt(reply, "DLOCK.RENEW") ?? 0, now()));
      if (!this.life.held) return;
      this.armLost(); // the clock moved (later, or earlier after a longer explicit renewal)
      this.armRenew();
    } catch (e) {
      if (e instanceof NotHeld || e instanceof WrongKind) {
        this.life.renewFailed(now());
        this.apply(this.life.serverGone(now()));
        return;
      }
      this.armRenew(this.life.renewFailed(now()));
    }
  }

  /** A message on the lock's channel (or a subscription that became active): check at once. */
  notice(message: string): void {
    this.apply(this.life.notice(message));
  }

  private async check(): Promise<void> {
    if (this.checking) {
      this.recheck = true;
      return;
    }
    this.checking = true;
    try {
      do {
        this.recheck = false;
        if (!this.life.held) return;
        try {
          const reply = await this.client._conns.request(this.key, checkArgs(this.key, this.token), {
            within: this.client._requestTimeout,
            background: true,
          });
          this.apply(this.life.checked(toInt(reply, "DLOCK.CHECK") === 1, now()));
        } catch {
          // not reachable: the lease clock decides
        }
      } while (this.recheck);
    } finally {
      this.checking = false;
    }
  }

  /** An explicit renewal (`hold.renew(lease)`) sent at `sent` that the server acknowledged. */
  renewedBy(sent: number, lease: number): void {
    this.apply(this.life.acknowledged(sent, now(), lease));
    if (!this.life.held) return;
    this.armLost();
    this.armRenew();
  }

  /** The server said the hold is gone. */
  gone(): void {
    this.apply(this.life.serverGone(now()));
  }

  /** The last release: never renewed again, whatever its reply. */
  end(): void {
    this.life.end();
    this.stop();
  }
}

/**
 * A hold of a lock: its fencing `token`, a `signal` that aborts when the hold is lost,
 * `release()`, and `await using` (releases at the end of the scope).
 */
export class Hold implements AsyncDisposable {
  private outcome: Promise<ReleaseOutcome> | undefined;
  private released = false;
  private error: unknown;

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
  /** Whether the hold is known to be lost (the lease clock read now). */
  get lost(): boolean {
    return this.state.lost;
  }
  /**
   * True while this hold is held as far as this client knows: not released (a `release()`
   * that got its answer) and not lost (the lease clock read now). Asks nothing of the
   * server: `check()` does.
   */
  get isAcquired(): boolean {
    return !this.released && !this.state.lost;
  }
  /** Milliseconds the hold is certainly still valid on this client's lease clock (0 once lost or released). */
  validity(): number {
    return this.isAcquired ? Math.max(0, this.state.life.validUntil - now()) : 0;
  }
  /** Why `release()` answered `'unknown'` (the last connection error); undefined otherwise. */
  get releaseError(): unknown {
    return this.error;
  }

  /** @internal */
  get _state(): HoldState {
    return this.state;
  }

  /**
   * Restarts the lease (`DLOCK.RENEW`): `lease` ms, default the hold's lease. False (and
   * the signal aborted) when the hold was gone.
   */
  async renew(lease?: number): Promise<boolean> {
    checkOptions("hold.renew()", { lease }, ATTACH_OPTIONS);
    const s = this.state;
    const l = Math.ceil(lease ?? s.lease);
    const sent = now();
    const c = s.client;
    const v = toInt(await c._request(s.key, renewArgs(s.key, s.owner, l)), "DLOCK.RENEW");
    if (v === 1) {
      s.renewedBy(sent, l);
      return true;
    }
    s.gone();
    return false;
  }

  /**
   * Lets go of this hold: `'released'`, `'still-held'` (re-entered: an outer hold of the
   * same owner remains), `'lost'` (it had ended before), or `'unknown'` (no answer, also
   * on a fresh connection: `releaseError` says why; the hold ends at its lease). Never
   * throws, and the watchdog never renews the hold again after the last release. Calling
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
    if (last) s.end(); // no renewal after this, whatever the reply
    const args = releaseArgs(s.kind, s.key, s.owner, this.permits);
    const m = new Release(wasLost);
    let step = m.start();
    while (step.kind === "send") {
      try {
        const reply = step.fresh
          ? await c._conns.fresh(s.key, args, c._requestTimeout)
          : await c._conns.request(s.key, args, { within: c._requestTimeout });
        step = m.answered(toInt(reply, "DLOCK.RELEASE"));
      } catch (e) {
        step = m.failed(e instanceof NotHeld ? "not-held" : isNoAnswer(e) ? "connection" : "reply", e);
      }
    }
    const outcome = step.outcome;
    if (outcome === "lost") s.apply(s.life.releaseGone());
    if (outcome === "unknown") this.error = step.error;
    if (!last && outcome !== "still-held" && outcome !== "unknown") s.end(); // the server has no count left
    if (s.life.ended || s.life.lost) {
      // A BIND hold's connection: closed now (which also ends the hold if the release did not).
      s.closeBound();
      c._forget(s);
    }
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

/** What a wait got: the grant (or null when not granted in time), and the last connection error. */
interface Waited<T> {
  value: T | null;
  cause?: unknown;
  /** Whether a call got no answer (the server may have run it): a give-up also releases. */
  uncertain: boolean;
}

/** How `_wait` runs one wait (acquires, campaigns, latches). @internal */
export interface WaitSpec<T> {
  key: string;
  timeout: number | undefined;
  signal?: AbortSignal;
  /** One attempt: sends with `run` (a server-side wait of `wms` ms), the result or null. */
  attempt(run: Runner, wms: number): Promise<T | null>;
  /** The first try (`WAIT 0`) on the control connection; false: everything on a waiting connection (BIND, replicas). */
  firstOnControl: boolean;
  /** Undoes a grant that raced an abort, on the connection it came on. */
  undo?(value: T, run: Runner): Promise<void>;
  /** Takes the waiting connection that was granted (a BIND hold's) instead of giving it back. */
  keep?: boolean;
}

/** What the lock kinds share: acquire, tryAcquire, withLock. */
export class Lock {
  /**
   * Fair locks: owners of this object's acquires that were not granted, on a module
   * without `DLOCK.CANCEL`. The server keeps their queue places for
   * `dlock.fair-queue-timeout-ms`; the next acquire resumes one.
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
  ) {
    checkKey(`dlock.${kind === "mutex" ? "lock" : kind === "fair" ? "fairLock" : kind === "semaphore" ? "semaphore" : "rwLock"}()`, name);
    checkOptions("lock defaults", defaults, ACQUIRE_OPTIONS);
  }

  /**
   * Waits (on the server, FIFO) until granted. Throws `AcquireTimeout` when `timeout`
   * passes first, and the signal's reason when `signal` aborts the wait.
   */
  async acquire(options: AcquireOptions = {}): Promise<Hold> {
    checkOptions("acquire()", options, ACQUIRE_OPTIONS);
    const o = { ...this.defaults, ...options };
    const got = await this.client._acquire(this, o);
    if (got.value === null) {
      throw new AcquireTimeout(
        `${this.kind} ${JSON.stringify(this.name)} was not granted within ${o.timeout} ms` +
          (got.cause === undefined ? "" : ` (last connection error: ${got.cause instanceof Error ? got.cause.message : String(got.cause)})`),
        got.cause === undefined ? undefined : { cause: got.cause },
      );
    }
    return got.value;
  }

  /**
   * Takes over the hold that `owner` has on this lock — taken by another process, or by
   * an earlier run of this one, with `acquire({ owner })` — so that this process can
   * renew it, `release()` it, or fence with its token (redis-semaphore's
   * `acquiredExternally`). Restarts its lease (`DLOCK.RENEW`, the watchdog's by default).
   * Null when `owner` holds nothing here.
   */
  async attach(owner: string, options: AttachOptions = {}): Promise<Hold | null> {
    checkKey("attach()", owner, "owner");
    checkOptions("attach()", options, ATTACH_OPTIONS);
    return this.client._attach(this, owner, options);
  }

  /** One try (or a wait of at most `timeout` ms): the hold, or null when not granted. */
  async tryAcquire(options: AcquireOptions = {}): Promise<Hold | null> {
    checkOptions("tryAcquire()", options, ACQUIRE_OPTIONS);
    const got = await this.client._acquire(this, { timeout: 0, ...this.defaults, ...options });
    return got.value;
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
    if (typeof fn !== "function") {
      throw new InvalidArgument("withLock(options, fn): fn must be a function", { argument: "fn" });
    }
    checkOptions("withLock()", options, ACQUIRE_OPTIONS);
    const hold = await this.acquire(options);
    const scope: Scope = new Map(scopes.getStore() ?? []);
    scope.set(scopeKey(this.kind, this.name), hold._state);
    let result: T;
    try {
      result = await scopes.run(scope, () => fn(hold.signal, hold));
    } catch (e) {
      await hold.release();
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
  ) {
    checkKey("dlock.rwLock()", name);
    checkOptions("rwLock defaults", defaults, ACQUIRE_OPTIONS);
  }
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
  ) {
    checkKey("dlock.latch()", name);
  }
  /** Creates the latch with `count` when none exists: true; false when one exists. */
  async trySetCount(count: number): Promise<boolean> {
    checkOptions("latch.trySetCount()", { count }, { count: int(1, 2 ** 32) });
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
    checkOptions("latch.wait()", options, LATCH_WAIT_OPTIONS);
    const got = await this.client._wait<true>({
      key: this.name,
      timeout: finiteOrUndefined(options.timeout),
      signal: options.signal,
      firstOnControl: true,
      attempt: async (run, wms) => {
        const v = toInt(await run(["DLOCK.AWAIT", this.name, "WAIT", wms]), "DLOCK.AWAIT");
        return v === 1 ? true : null;
      },
    });
    return got.value === true;
  }
}

function scopeKey(kind: Kind, name: string): string {
  return `${kind}\u0000${name}`;
}

/**
 * dlock on one ioredis, node-redis or GLIDE client (plain, cluster, sentinel). Factories
 * make locks; no I/O until they are acquired.
 */
export class Dlock {
  /** @internal */
  readonly adapter: Adapter;
  readonly watchdogLease: number;
  readonly renewInterval: number;
  readonly waitSlice: number;
  readonly ownerPrefix: string;
  readonly onLost: ((key: string, reason: LostReason) => void) | undefined;
  /** @internal */
  readonly _conns: Connections;
  /** @internal */
  readonly _notices: Notices;
  /** How long a call that does not wait on the server may take (ms). @internal */
  readonly _requestTimeout: number;
  private readonly transportTimeout: number | undefined;
  private seq = 0;
  /** @internal */
  _closed = false;
  private readonly holds = new Set<HoldState>();

  constructor(
    readonly redis: unknown,
    options: ClientOptions = {},
  ) {
    checkOptions("new Dlock()", options, CLIENT_OPTIONS);
    this.watchdogLease = options.watchdogLease ?? 30000;
    this.renewInterval = options.renewInterval ?? defaultRenewInterval(this.watchdogLease);
    checkRenewInterval("new Dlock()", this.renewInterval, this.watchdogLease);
    this.adapter = adapt(redis);
    this.waitSlice = options.waitSlice ?? DEFAULT_SLICE;
    this.ownerPrefix = options.ownerPrefix ?? randomUUID();
    this.onLost = options.onLost;
    this.transportTimeout = this.adapter.transportTimeout();
    this._requestTimeout = requestTimeout(this.transportTimeout);
    const max = options.maxWaitConnections ?? 16;
    this._conns = new Connections(this.adapter, max, Math.min(max, 4), this._requestTimeout);
    this._notices = new Notices(this.adapter, this._requestTimeout);
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
    checkKey("dlock.semaphore()", name);
    checkOptions("dlock.semaphore()", { limit }, { limit: int(1, 2 ** 32) });
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
  async withLock<T>(
    name: string,
    a: AcquireOptions | ((signal: AbortSignal, hold: Hold) => Promise<T> | T),
    b?: (signal: AbortSignal, hold: Hold) => Promise<T> | T,
  ): Promise<T> {
    if (typeof a === "function") return this.lock(name).withLock({}, a);
    if (typeof b !== "function") {
      throw new InvalidArgument("withLock(name, options, fn): fn must be a function", { argument: "fn" });
    }
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

  /** Sends `args` on this package's control connection to `key`'s server, bounded. @internal */
  _request(key: string, args: Arg[], background = false): Promise<unknown> {
    return this._conns.request(key, args, { within: this._requestTimeout, background });
  }

  /** Any command (routed by `key` in a cluster), error replies mapped to this package's errors. */
  execute(key: string | undefined, ...args: Arg[]): Promise<unknown> {
    return this._call(key, args);
  }

  /** `DLOCK.INFO` as an object (null: no lock); RESP2 and RESP3 give the same. */
  async info(key: string): Promise<Record<string, unknown> | null> {
    checkKey("info()", key);
    const v = await this._call(key, ["DLOCK.INFO", key]);
    return v === null || v === undefined ? null : toRecord(v);
  }

  /** `DLOCK.FORCERELEASE`: removes the lock whatever its holders. */
  async forceRelease(key: string): Promise<boolean> {
    checkKey("forceRelease()", key);
    return toInt(await this._call(key, ["DLOCK.FORCERELEASE", key]), "DLOCK.FORCERELEASE") === 1;
  }

  /** `DLOCK.CHECK`: whether `token` is that of a live hold of `key`. */
  async check(key: string, token: bigint | number): Promise<boolean> {
    checkKey("check()", key);
    return toInt(await this._call(key, ["DLOCK.CHECK", key, BigInt(token)]), "DLOCK.CHECK") === 1;
  }

  /** `DLOCK.FENCED key token ...command`; throws `Fenced` when the token is not live. */
  fenced(key: string, token: bigint | number, ...command: Arg[]): Promise<unknown> {
    if (command.length === 0) {
      return Promise.reject(new InvalidArgument("fenced() needs a command to run", { argument: "command" }));
    }
    return this._call(key, ["DLOCK.FENCED", key, BigInt(token), ...command], false);
  }

  /** A new owner id: one per acquire (async tasks never share one). */
  newOwner(): string {
    this.seq += 1;
    return `${this.ownerPrefix}:${this.seq}`;
  }

  /**
   * Closes this package's own connections (waiting, control and subscriber connections —
   * not the client you passed in) and stops every timer; the holds still held report
   * lost (nobody renews them now: their leases end on the server). Idempotent.
   */
  close(): void {
    if (this._closed) return;
    this._closed = true;
    for (const h of [...this.holds]) {
      h.apply(h.life.fail(h.life.watchdog ? "unreachable" : "expired"));
      h.stop();
    }
    this.holds.clear();
    this._notices.close();
    this._conns.close();
  }

  // -- acquiring ------------------------------------------------------------------

  /** The timing of a wait of `timeout` ms starting now. @internal */
  _plan(timeout: number | undefined): WaitPlan {
    return new WaitPlan(now(), timeout, this.transportTimeout, this.waitSlice);
  }

  /**
   * One wait: a first try on the control connection, then server-side waits in slices on a
   * waiting connection, until granted, the deadline passes, or `signal` aborts (throws its
   * reason). Connection errors are retried within the deadline (a single try reports
   * them as `ConnectionError`); error replies are thrown. @internal
   */
  async _wait<T>(spec: WaitSpec<T>): Promise<Waited<T> & { conn?: Dedicated }> {
    const { key, signal } = spec;
    signal?.throwIfAborted();
    const plan = this._plan(spec.timeout);
    let cause: unknown;
    let uncertain = false;
    const noAnswer = (e: unknown): boolean => {
      if (!isNoAnswer(e)) return false;
      cause = e;
      uncertain = true;
      return true;
    };
    if (spec.firstOnControl) {
      const control: Runner = (args) => this._conns.request(key, args, { within: plan.replyWithin(0, now()) });
      try {
        const got = await spec.attempt(control, 0);
        if (got !== null) return { value: got, uncertain: false };
        plan.answered();
      } catch (e) {
        if (!noAnswer(e) || plan.oneTry) throw e;
      }
      if (plan.oneTry) return { value: null, uncertain };
    }
    for (;;) {
      signal?.throwIfAborted();
      if (this._closed) throw new ConnectionError("dlock-redis: the client is closed (close() was called)");
      if (plan.over(now()) && (spec.firstOnControl || !plan.oneTry)) return { value: null, cause, uncertain };
      let b: Borrowed;
      try {
        b = await this._conns.borrow(key, plan.connectWithin(now()), signal);
      } catch (e) {
        if (signal?.aborted) throw signal.reason;
        if (!noAnswer(e)) throw e;
        const p = plan.retryAfter(now());
        if (p === undefined) {
          if (plan.oneTry) throw e;
          return { value: null, cause, uncertain };
        }
        await pause(p, signal);
        continue;
      }
      let ok = true;
      try {
        const conn = b.conn;
        for (;;) {
          signal?.throwIfAborted();
          const t = now();
          const wms = plan.nextWait(t);
          const within = plan.replyWithin(wms, t);
          const run: Runner = async (args) => {
            try {
              return await callOn(conn, b.node, args, within);
            } catch (e) {
              if (isNoAnswer(e)) ok = false;
              throw e;
            }
          };
          const got =
            signal === undefined
              ? await spec.attempt(run, wms)
              : await this.abortable(key, conn, spec.attempt(run, wms), signal, run, spec.undo, () => {
                  ok = false;
                });
          plan.answered();
          if (got !== null) {
            if (spec.keep && ok) {
              const kept = b.keep();
              return { value: got, uncertain: false, conn: kept };
            }
            return { value: got, uncertain: false };
          }
          if (plan.oneTry || plan.over(now())) return { value: null, cause, uncertain };
        }
      } catch (e) {
        if (signal?.aborted || !noAnswer(e)) throw e;
        // The waiting connection failed: another one, within the deadline.
        if (plan.oneTry) throw e;
        const p = plan.retryAfter(now());
        if (p === undefined) return { value: null, cause, uncertain };
        await pause(p, signal);
      } finally {
        b.done(ok);
      }
    }
  }

  /** Races a blocked attempt with `signal`; on abort, unblocks it and undoes a grant that raced. */
  private abortable<T>(
    key: string,
    conn: Dedicated,
    p: Promise<T | null>,
    signal: AbortSignal,
    run: Runner,
    undo: ((value: T, run: Runner) => Promise<void>) | undefined,
    broken: () => void,
  ): Promise<T | null> {
    return new Promise<T | null>((resolve, reject) => {
      let settled = false;
      const onAbort = async (): Promise<void> => {
        // CLIENT UNBLOCK answers the blocked command with nil (as on timeout), so the
        // server keeps nothing of the wait; a grant that came first is undone.
        const done = p.then(
          (v) => ({ v, e: undefined as unknown }),
          (e: unknown) => ({ v: null, e }),
        );
        let out: { v: T | null; e: unknown } | undefined;
        for (let i = 0; i < 200 && out === undefined; i++) {
          try {
            await this._request(key, ["CLIENT", "UNBLOCK", conn.clientId]);
          } catch {
            break; // not allowed (ACL) or not reachable: close the connection instead
          }
          out = await Promise.race([done, pause(25).then(() => undefined)]);
        }
        if (out === undefined) {
          broken();
          conn.destroy();
          out = await Promise.race([done, pause(0).then(() => undefined)]);
        }
        if (out !== undefined && out.v !== null && undo !== undefined) {
          try {
            await undo(out.v, run);
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

  /**
   * Gives up the owner's queue places (`DLOCK.CANCEL`), and a grant whose answer never
   * came (`DLOCK.RELEASE`, for an owner nobody else uses) — in the background, bounded,
   * never delaying the caller. A module without CANCEL keeps a fair place for
   * `dlock.fair-queue-timeout-ms`: that owner goes back to `spare`. @internal
   */
  _giveUp(key: string, owner: string, o: { cancel: boolean; release?: Arg[]; spare?: string[] }): void {
    if (this._closed) return;
    if (o.release !== undefined) void this._request(key, o.release, true).catch(() => undefined);
    if (!o.cancel) return;
    this._request(key, cancelArgs(key, owner), true).catch((e: unknown) => {
      if (e instanceof ModuleNotLoaded) o.spare?.push(owner);
    });
  }

  /**
   * Subscribes `key`'s channel while an acquire runs, so that the hold it grants is watched
   * from its grant on: `settled()` waits (at most a little) for the subscription, then lets
   * the hold's own watch take over. @internal
   */
  _prewatch(key: string): { settled(): Promise<void> } {
    const placeholder: Watched = { key, notice: () => {} };
    const ready = this._notices.watch(placeholder);
    let done = false;
    return {
      settled: async () => {
        if (done) return;
        done = true;
        let t: ReturnType<typeof setTimeout> | undefined;
        try {
          await Promise.race([ready, new Promise<void>((resolve) => (t = timer(Math.min(1000, this._requestTimeout), resolve)))]);
        } finally {
          clearTimeout(t);
          this._notices.unwatch(placeholder);
        }
      },
    };
  }

  /** @internal */
  async _acquire(lock: Lock, o: AcquireOptions): Promise<Waited<Hold>> {
    const permits = lock.kind === "semaphore" ? (o.permits ?? 1) : 1;
    const timeout = finiteOrUndefined(o.timeout);
    const key = lock.name;
    // A fixed owner is the caller's: no scope re-entry, no resumed place of another owner.
    const outer = o.owner === undefined ? scopes.getStore()?.get(scopeKey(lock.kind, key)) : undefined;
    const reentry = outer !== undefined && outer.life.held && !outer.lost;
    const spare = lock.kind === "fair" && !reentry && o.owner === undefined ? lock._spareOwners.pop() : undefined;
    const owner = o.owner ?? (reentry ? outer.owner : (spare ?? this.newOwner()));
    const fresh = o.owner === undefined && !reentry;
    const leaseMs = Math.ceil(o.lease ?? this.watchdogLease);
    const replicas = o.replicas ?? 0;
    const args = (wms: number): Arg[] =>
      acquireArgs({
        kind: lock.kind,
        key,
        owner,
        lease: leaseMs,
        wait: wms,
        limit: lock.limit,
        permits,
        bind: o.bind,
        lockDelay: o.lockDelay,
      });
    const release = releaseArgs(lock.kind, key, owner, permits);
    const grant = async (run: Runner, wms: number): Promise<Grant | null> => {
      const sent = now();
      const token = toToken(await run(args(wms)), acquireCommand(lock.kind));
      if (token === null) return null;
      if (replicas > 0) {
        const wait = Math.ceil(o.replicasTimeout ?? Math.min(1000, Math.max(this._plan(undefined).slice, 100)));
        let acked = 0;
        try {
          acked = toInt(await run(["WAIT", replicas, wait]), "WAIT") ?? 0;
        } finally {
          if (acked < replicas) await run(release).catch(() => undefined);
        }
        if (acked < replicas) throw new NotDurable(key, acked, replicas);
      }
      // A grant after a long wait: re-anchor the lease clock with a RENEW.
      const t = now();
      if (!needsReanchor(sent, t, leaseMs)) return { token, start: sent };
      const v = toInt(await run(renewArgs(key, owner, leaseMs)), "DLOCK.RENEW");
      return v === 1 ? { token, start: t } : null;
    };
    // Giving up (timeout, abort, error): DLOCK.CANCEL gives up the owner's queue places at
    // once, so no later owner waits behind one that left — not needed after a single try
    // of a lock without a fair queue that got its answer (nothing was queued).
    const giveUp = (uncertain: boolean): void => {
      if (reentry) return;
      const waited = timeout !== 0 || replicas > 0 || o.signal !== undefined;
      this._giveUp(key, owner, {
        cancel: lock.kind === "fair" || waited || uncertain,
        release: uncertain && fresh ? release : undefined,
        spare: lock.kind === "fair" && o.owner === undefined ? lock._spareOwners : undefined,
      });
    };
    // A BIND hold is granted on a waiting connection that is kept for it; with `replicas`,
    // the grant and its WAIT share a connection: then everything runs on the pool.
    const onPool = o.bind === true || replicas > 0;
    const watch = reentry ? undefined : this._prewatch(key);
    let got: Waited<Grant> & { conn?: Dedicated };
    try {
      got = await this._wait<Grant>({
        key,
        timeout,
        signal: o.signal,
        attempt: grant,
        firstOnControl: !onPool,
        undo: async (_g, run) => {
          await run(release);
        },
        keep: o.bind === true,
      });
    } catch (e) {
      void watch?.settled();
      giveUp(o.signal?.aborted === true || isNoAnswer(e));
      throw e;
    }
    if (got.value === null) {
      void watch?.settled();
      giveUp(got.uncertain);
      return { value: null, cause: got.cause, uncertain: got.uncertain };
    }
    if (o.signal?.aborted) {
      // Granted as the abort came: not a hold.
      void watch?.settled();
      got.conn?.destroy();
      if (!reentry) this._giveUp(key, owner, { cancel: false, release });
      throw o.signal.reason;
    }
    let state: HoldState;
    if (reentry && outer.token === got.value.token) {
      state = outer;
    } else {
      const interval = o.lease === undefined ? this.renewInterval : undefined;
      state = new HoldState(this, lock.kind, key, owner, got.value.token, leaseMs, interval, got.value.start);
      this.holds.add(state);
      state.start(got.conn);
    }
    state.depth += permits;
    // Watched from its grant on: a server-side end right after it comes with its reason.
    await watch?.settled();
    return { value: new Hold(state, permits), uncertain: false };
  }

  /** @internal */
  async _attach(lock: Lock, owner: string, o: AttachOptions): Promise<Hold | null> {
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
    const v = toInt(await this._request(key, renewArgs(key, owner, lease)), "DLOCK.RENEW");
    if (v !== 1) return null;
    const count = Number(mine["count"] ?? 1);
    const permits = lock.kind === "semaphore" ? Number(mine["permits"] ?? count) : 1;
    const interval = o.lease === undefined ? this.renewInterval : undefined;
    const state = new HoldState(this, lock.kind, key, owner, token, lease, interval, sent);
    this.holds.add(state);
    state.start();
    state.depth = permits;
    return new Hold(state, permits);
  }

  /**
   * A hold for a grant sent outside `acquire` (the recipes): `start` is when the granting
   * command was sent; `lease` its lease; `renewInterval` the watchdog's (undefined: an
   * explicit lease, never renewed); `bound` a BIND hold's connection (kept for the hold).
   * @internal
   */
  _adopt(
    kind: Kind,
    key: string,
    owner: string,
    token: bigint,
    start: number,
    o: { lease: number; renewInterval: number | undefined; bound?: Dedicated },
  ): Hold {
    const state = new HoldState(this, kind, key, owner, token, Math.ceil(o.lease), o.renewInterval, start);
    this.holds.add(state);
    state.start(o.bound);
    state.depth = 1;
    return new Hold(state, 1);
  }

  /** @internal */
  _forget(s: HoldState): void {
    this.holds.delete(s);
  }
}
