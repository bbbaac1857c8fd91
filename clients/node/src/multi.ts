// MultiLock (several locks, all or none, in a fixed order) and RedLock (one lock on a
// majority of independent servers), as in the Python package. The RedLock arithmetic is
// in core/redlock.ts, its lease clock core/lease.ts's.
import { randomUUID } from "node:crypto";
import { Dlock, type AcquireOptions, type Hold, type Lock, type ReleaseOutcome } from "./client.js";
import { HoldLife, type Verdict } from "./core/lease.js";
import {
  ACQUIRE_OPTIONS,
  checkKey,
  checkOptions,
  checkRenewInterval,
  finiteOrUndefined,
  REDLOCK_ACQUIRE_OPTIONS,
  REDLOCK_OPTIONS,
} from "./core/options.js";
import { quorum, releaseRound, renewRound, stillValid, type Answer } from "./core/redlock.js";
import { toInt, toToken } from "./core/replies.js";
import { AcquireTimeout, InvalidArgument, LockLost, ModuleNotLoaded, NotHeld } from "./errors.js";

const now = (): number => performance.now();
const sleep = (ms: number): Promise<void> =>
  new Promise((r) => {
    const t = setTimeout(r, Math.max(0, ms));
    t.unref?.();
  });

/** The holds of a MultiLock: all of them, released together. */
export class MultiHold implements AsyncDisposable {
  private readonly ctrl = new AbortController();
  private outcome: Promise<ReleaseOutcome[]> | undefined;

  /** @internal */
  constructor(
    /** The holds, in the order they were taken. */
    readonly holds: Hold[],
  ) {
    for (const h of holds) {
      const lost = (): void => {
        if (!this.ctrl.signal.aborted) this.ctrl.abort(h.signal.reason);
      };
      if (h.signal.aborted) lost();
      else h.signal.addEventListener("abort", lost, { once: true });
    }
  }

  /** The fencing tokens, in the order the locks were taken. */
  get tokens(): bigint[] {
    return this.holds.map((h) => h.token);
  }
  /** Aborted when any of the holds is lost. */
  get signal(): AbortSignal {
    return this.ctrl.signal;
  }
  /** True while every hold is held as far as this client knows. */
  get isAcquired(): boolean {
    return this.holds.every((h) => h.isAcquired);
  }

  /** Releases every hold (in reverse order): each one's outcome, in `holds` order. Never throws. */
  release(): Promise<ReleaseOutcome[]> {
    this.outcome ??= (async () => {
      const out: ReleaseOutcome[] = new Array<ReleaseOutcome>(this.holds.length);
      for (let i = this.holds.length - 1; i >= 0; i--) out[i] = await (this.holds[i] as Hold).release();
      return out;
    })();
    return this.outcome;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.release();
  }
}

/**
 * Several locks taken as one: all or none. They are taken one by one in a fixed order
 * (server, key, kind) whatever order they were given in, so two MultiLocks over the
 * same locks cannot deadlock; when one is not granted within what is left of the
 * timeout, those already taken are released.
 */
export class MultiLock {
  readonly locks: Lock[];

  constructor(locks: Iterable<Lock>) {
    const list = [...locks];
    if (list.length === 0) throw new InvalidArgument("a MultiLock needs at least one lock", { argument: "locks" });
    const sortKey = (l: Lock): [string, string, string] => [l.client.adapter.address(), l.name, l.kind];
    list.sort((a, b) => {
      const x = sortKey(a);
      const y = sortKey(b);
      for (let i = 0; i < 3; i++) {
        const c = Buffer.compare(Buffer.from(x[i] as string), Buffer.from(y[i] as string));
        if (c !== 0) return c;
      }
      return 0;
    });
    this.locks = list;
  }

  /** The keys, in the order they are taken. */
  get names(): string[] {
    return this.locks.map((l) => l.name);
  }

  /** Takes every lock; throws `AcquireTimeout` (having released those taken) when `timeout` passes. */
  async acquire(options: AcquireOptions = {}): Promise<MultiHold> {
    checkOptions("MultiLock.acquire()", options, ACQUIRE_OPTIONS);
    const h = await this.take(options);
    if (h === null) throw new AcquireTimeout(`not all of ${JSON.stringify(this.names)} were granted within ${options.timeout} ms`);
    return h;
  }

  /** One try of each (or within `timeout`): the holds, or null (nothing kept). */
  async tryAcquire(options: AcquireOptions = {}): Promise<MultiHold | null> {
    checkOptions("MultiLock.tryAcquire()", options, ACQUIRE_OPTIONS);
    return this.take({ timeout: 0, ...options });
  }

  private async take(options: AcquireOptions): Promise<MultiHold | null> {
    const timeout = finiteOrUndefined(options.timeout);
    const deadline = timeout === undefined ? undefined : now() + timeout;
    const taken: Hold[] = [];
    const rollback = async (): Promise<void> => {
      for (const h of taken.reverse()) await h.release();
    };
    try {
      for (const l of this.locks) {
        const left = deadline === undefined ? undefined : Math.max(0, deadline - now());
        const h = await l.tryAcquire({ ...options, timeout: left });
        if (h === null) {
          await rollback();
          return null;
        }
        taken.push(h);
      }
    } catch (e) {
      await rollback();
      throw e;
    }
    return new MultiHold(taken);
  }
}

export interface RedLockOptions {
  /** How long one node may take to answer (ms). Default 100. */
  nodeTimeout?: number;
  /** The most a failed attempt pauses before the next (random, ms). Default 200. */
  retryDelay?: number;
  /** Lease (ms) of a hold taken without `lease`, renewed on every node. Default 30000. */
  watchdogLease?: number;
  /** How often the watchdog renews (ms), shorter than `watchdogLease`. Default a third of `watchdogLease`. */
  renewInterval?: number;
}

function answerOf(a: unknown, what: string): Answer {
  if (a instanceof NotHeld) return "gone";
  if (a instanceof Error) return "none";
  try {
    return toInt(a, what) ?? "none";
  } catch {
    return "none";
  }
}

/** A RedLock hold: valid while a majority of the nodes hold it. */
export class RedHold implements AsyncDisposable {
  private readonly ctrl = new AbortController();
  private outcome: Promise<ReleaseOutcome> | undefined;
  private readonly life: HoldLife;
  private renewTimer: ReturnType<typeof setTimeout> | undefined;
  private lostTimer: ReturnType<typeof setTimeout> | undefined;

  /** @internal */
  constructor(
    private readonly rl: RedLock,
    readonly owner: string,
    /** Each node's fencing token, in node order (null where not granted); tokens of different nodes are unrelated. */
    readonly tokens: Array<bigint | null>,
    start: number,
    private readonly lease: number,
    watchdog: boolean,
  ) {
    this.life = new HoldLife(lease, watchdog ? rl.renewInterval : undefined, start);
    this.armLost();
    this.armRenew();
  }

  /** Aborted when the lock is lost (no quorum, lease ended, unreachable). */
  get signal(): AbortSignal {
    return this.ctrl.signal;
  }

  /** Milliseconds the lock is certainly still held (0 when lost). */
  validity(): number {
    this.apply(this.life.tick(now()));
    if (!this.life.held) return 0;
    return Math.max(0, this.life.validUntil - now());
  }

  private apply(v: Verdict): void {
    if (v.kind !== "lost" || this.ctrl.signal.aborted) return;
    this.stop();
    this.ctrl.abort(new LockLost(this.rl.name, v.reason));
  }

  private stop(): void {
    if (this.renewTimer !== undefined) clearTimeout(this.renewTimer);
    if (this.lostTimer !== undefined) clearTimeout(this.lostTimer);
    this.renewTimer = undefined;
    this.lostTimer = undefined;
  }

  private armLost(): void {
    if (this.lostTimer !== undefined) clearTimeout(this.lostTimer);
    if (!this.life.held) return;
    this.lostTimer = setTimeout(() => {
      this.lostTimer = undefined;
      this.apply(this.life.tick(now()));
      if (this.life.held) this.armLost();
    }, Math.max(0, this.life.validUntil - now()));
    this.lostTimer.unref?.();
  }

  private armRenew(at = this.life.renewAt): void {
    if (this.renewTimer !== undefined) clearTimeout(this.renewTimer);
    this.renewTimer = undefined;
    if (!this.life.held || at === Infinity) return;
    this.renewTimer = setTimeout(() => void this.tick(), Math.max(0, at - now()));
    this.renewTimer.unref?.();
  }

  private async tick(): Promise<void> {
    const t0 = now();
    const deadline = this.life.startRenewal(t0);
    if (deadline === undefined) return this.armRenew();
    const rl = this.rl;
    const answers = await rl._onAll(["DLOCK.RENEW", rl.name, this.owner, "PX", Math.ceil(this.lease)], Math.max(deadline - t0, 1), true);
    const round = renewRound(answers.map((a) => answerOf(a, "DLOCK.RENEW")), rl.nodes.length);
    if (round === "renewed") {
      this.apply(this.life.renewed(t0, 1, now()));
      this.armLost();
      return this.armRenew();
    }
    if (round === "lost") {
      this.life.renewFailed(now());
      return this.apply(this.life.fail("no-quorum"));
    }
    this.armRenew(this.life.renewFailed(now()));
  }

  /**
   * Releases on every node: `'released'` when a majority let go, `'lost'` when a majority
   * no longer held it, `'unknown'` when too few answered (the leases end it). Never throws;
   * never renewed after.
   */
  release(): Promise<ReleaseOutcome> {
    this.outcome ??= (async () => {
      this.apply(this.life.tick(now()));
      const wasLost = this.ctrl.signal.aborted;
      this.life.end();
      this.stop();
      const rl = this.rl;
      const answers = await rl._onAll(["DLOCK.RELEASE", rl.name, this.owner], Math.max(rl.nodeTimeout, 1000), false);
      const round = releaseRound(answers.map((a) => answerOf(a, "DLOCK.RELEASE")), rl.nodes.length);
      if (round === "lost" && !wasLost) {
        this.ctrl.abort(new LockLost(rl.name, "no-quorum"));
      }
      if (round === "released" && wasLost) return "lost";
      return round;
    })();
    return this.outcome;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.release();
  }
}

/**
 * One lock on N independent servers (Redlock): held when a majority granted it within
 * its validity. Each attempt asks every node in parallel (no server-side wait); a failed
 * attempt releases everywhere and retries after a random pause. Not reentrant.
 */
export class RedLock {
  readonly nodes: Dlock[];
  readonly nodeTimeout: number;
  readonly retryDelay: number;
  readonly watchdogLease: number;
  readonly renewInterval: number;
  private readonly prefix = randomUUID();
  private seq = 0;

  constructor(
    clients: Iterable<unknown>,
    readonly name: string,
    options: RedLockOptions = {},
  ) {
    checkKey("new RedLock()", name, "name");
    checkOptions("new RedLock()", options, REDLOCK_OPTIONS);
    this.nodeTimeout = options.nodeTimeout ?? 100;
    this.retryDelay = options.retryDelay ?? 200;
    this.watchdogLease = options.watchdogLease ?? 30000;
    this.renewInterval = options.renewInterval ?? this.watchdogLease / 3;
    checkRenewInterval("new RedLock()", this.renewInterval, this.watchdogLease);
    this.nodes = [...clients].map((c) => (c instanceof Dlock ? c : new Dlock(c)));
    if (this.nodes.length === 0) throw new InvalidArgument("a RedLock needs at least one server", { argument: "clients" });
  }

  get quorum(): number {
    return quorum(this.nodes.length);
  }

  /** @internal Each node's reply, or the error (a `ConnectionError` after `timeout` ms), on each node's own connection. */
  async _onAll(args: Array<string | number>, timeout: number, background: boolean): Promise<unknown[]> {
    return Promise.all(
      this.nodes.map((n) =>
        n._conns.request(this.name, args, { within: timeout, background }).catch((e: unknown) => (e instanceof Error ? e : new Error(String(e)))),
      ),
    );
  }

  /** Takes the lock on a majority; throws `AcquireTimeout` when `timeout` (ms) passes first. */
  async acquire(options: { timeout?: number; lease?: number; signal?: AbortSignal } = {}): Promise<RedHold> {
    checkOptions("RedLock.acquire()", options, REDLOCK_ACQUIRE_OPTIONS);
    const h = await this.take(options);
    if (h === null) throw new AcquireTimeout(`RedLock ${JSON.stringify(this.name)} was not granted within ${options.timeout} ms`);
    return h;
  }

  /** One attempt (or attempts within `timeout`): the hold, or null. */
  async tryAcquire(options: { timeout?: number; lease?: number; signal?: AbortSignal } = {}): Promise<RedHold | null> {
    checkOptions("RedLock.tryAcquire()", options, REDLOCK_ACQUIRE_OPTIONS);
    return this.take({ timeout: 0, ...options });
  }

  private async take(o: { timeout?: number; lease?: number; signal?: AbortSignal }): Promise<RedHold | null> {
    this.seq += 1;
    const owner = `${this.prefix}:${this.seq}`;
    const lease = Math.ceil(o.lease ?? this.watchdogLease);
    const timeout = finiteOrUndefined(o.timeout);
    const deadline = timeout === undefined ? Infinity : now() + timeout;
    for (;;) {
      o.signal?.throwIfAborted();
      const start = now();
      const answers = await this._onAll(["DLOCK.ACQUIRE", this.name, owner, "PX", lease], this.nodeTimeout, false);
      const tokens = answers.map((a) => {
        try {
          return a instanceof Error ? null : toToken(a, "DLOCK.ACQUIRE");
        } catch {
          return null;
        }
      });
      const granted = tokens.filter((t) => t !== null).length;
      if (granted >= this.quorum && stillValid(start, now(), lease)) {
        return new RedHold(this, owner, tokens, start, lease, o.lease === undefined);
      }
      // A failed attempt: release everywhere (also where the answer was lost).
      await this._onAll(["DLOCK.RELEASE", this.name, owner], this.nodeTimeout, true);
      // A majority that cannot run the command (module not loaded): retrying cannot help.
      const unknown = answers.filter((a) => a instanceof ModuleNotLoaded);
      if (unknown.length >= this.quorum) throw unknown[0];
      const t = now();
      if (t >= deadline) return null;
      await sleep(Math.min(Math.random() * this.retryDelay, deadline - t));
    }
  }
}
