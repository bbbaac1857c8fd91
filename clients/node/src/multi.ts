// MultiLock (several locks, all or none, in a fixed order) and RedLock (one lock on a
// majority of independent servers), as in the Python package.
import { randomUUID } from "node:crypto";
import { checkMs, Dlock, type AcquireOptions, type Hold, type Lock, type ReleaseOutcome } from "./client.js";
import { AcquireTimeout, LockLost, NotHeld, UnknownCommand, type LostReason } from "./errors.js";
import { toInt, toToken } from "./resp.js";

const now = (): number => performance.now();
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, Math.max(0, ms)));
const drift = (lease: number): number => lease / 100 + 2;

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

  /** Releases every hold (in reverse order): each one's outcome, in `holds` order. */
  release(): Promise<ReleaseOutcome[]> {
    this.outcome ??= (async () => {
      const out: ReleaseOutcome[] = new Array<ReleaseOutcome>(this.holds.length);
      let first: unknown;
      for (let i = this.holds.length - 1; i >= 0; i--) {
        try {
          out[i] = await (this.holds[i] as Hold).release();
        } catch (e) {
          out[i] = "lost";
          first ??= e;
        }
      }
      if (first !== undefined) throw first;
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
    if (list.length === 0) throw new RangeError("a MultiLock needs at least one lock");
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
    const h = await this.take(options);
    if (h === null) throw new AcquireTimeout(`not all of ${JSON.stringify(this.names)} were granted within ${options.timeout} ms`);
    return h;
  }

  /** One try of each (or within `timeout`): the holds, or null (nothing kept). */
  tryAcquire(options: AcquireOptions = {}): Promise<MultiHold | null> {
    return this.take({ timeout: 0, ...options });
  }

  private async take(options: AcquireOptions): Promise<MultiHold | null> {
    const deadline = options.timeout === undefined ? undefined : now() + options.timeout;
    const taken: Hold[] = [];
    const rollback = async (): Promise<void> => {
      for (const h of taken.reverse()) await h.release().catch(() => undefined);
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
  /** How often the watchdog renews (ms). Default a third of `watchdogLease`. */
  renewInterval?: number;
}

/** A RedLock hold: valid while a majority of the nodes hold it. */
export class RedHold implements AsyncDisposable {
  private readonly ctrl = new AbortController();
  private outcome: Promise<ReleaseOutcome> | undefined;
  private t: ReturnType<typeof setTimeout> | undefined;
  private ended = false;
  /** @internal */
  validUntil: number;

  /** @internal */
  constructor(
    private readonly rl: RedLock,
    readonly owner: string,
    /** Each node's fencing token, in node order (null where not granted); tokens of different nodes are unrelated. */
    readonly tokens: Array<bigint | null>,
    start: number,
    private readonly lease: number,
    private readonly watchdog: boolean,
  ) {
    this.validUntil = start + lease - drift(lease);
    this.schedule(watchdog ? start + rl.renewInterval : this.validUntil);
  }

  /** Aborted when the lock is lost (no quorum, lease ended, unreachable). */
  get signal(): AbortSignal {
    return this.ctrl.signal;
  }

  /** Milliseconds the lock is certainly still held (0 when lost). */
  validity(): number {
    if (this.ctrl.signal.aborted) return 0;
    return Math.max(0, this.validUntil - now());
  }

  private lost(reason: LostReason): void {
    if (this.ctrl.signal.aborted || this.ended) return;
    this.stop();
    this.ctrl.abort(new LockLost(this.rl.name, reason));
  }

  private stop(): void {
    if (this.t !== undefined) clearTimeout(this.t);
    this.t = undefined;
  }

  private schedule(at: number): void {
    this.stop();
    const when = Math.min(at, this.validUntil);
    this.t = setTimeout(() => void this.tick(), Math.max(0, when - now()));
    this.t.unref?.();
  }

  private async tick(): Promise<void> {
    if (this.ended || this.ctrl.signal.aborted) return;
    const t0 = now();
    if (t0 >= this.validUntil) return this.lost(this.watchdog ? "unreachable" : "lease-ended");
    if (!this.watchdog) return this.schedule(this.validUntil);
    const rl = this.rl;
    const answers = await rl._onAll(
      ["DLOCK.RENEW", rl.name, this.owner, "PX", Math.ceil(this.lease)],
      Math.max(Math.min(this.validUntil - t0, rl.renewInterval), 1),
    );
    if (this.ended) return;
    const yes = answers.filter((a) => !(a instanceof Error) && toInt(a, "DLOCK.RENEW") === 1).length;
    const no = answers.filter((a) => !(a instanceof Error) && toInt(a, "DLOCK.RENEW") === 0).length;
    if (yes >= rl.quorum) {
      this.validUntil = t0 + this.lease - drift(this.lease);
      return this.schedule(t0 + rl.renewInterval);
    }
    if (no > rl.nodes.length - rl.quorum) return this.lost("no-quorum");
    this.schedule(now() + Math.min(Math.max(this.lease / 10, 20), rl.renewInterval));
  }

  /** Releases on every node: `'released'` when a majority let go, `'lost'` when a majority no longer held it. */
  release(): Promise<ReleaseOutcome> {
    this.outcome ??= (async () => {
      const wasLost = this.ctrl.signal.aborted;
      this.ended = true;
      this.stop();
      const rl = this.rl;
      const answers = await rl._onAll(["DLOCK.RELEASE", rl.name, this.owner], Math.max(rl.nodeTimeout, 1000));
      const released = answers.filter((a) => !(a instanceof Error) && toInt(a, "DLOCK.RELEASE") === 1).length;
      const gone = answers.filter((a) => a instanceof NotHeld).length;
      if (released >= rl.quorum) return wasLost ? "lost" : "released";
      if (released + gone < rl.quorum) {
        const err = answers.find((a) => a instanceof Error && !(a instanceof NotHeld));
        if (err !== undefined) throw err;
      }
      this.ended = false;
      this.lost("no-quorum");
      this.ended = true;
      return "lost";
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
    this.nodes = [...clients].map((c) => (c instanceof Dlock ? c : new Dlock(c)));
    if (this.nodes.length === 0) throw new RangeError("a RedLock needs at least one server");
    this.nodeTimeout = Math.max(options.nodeTimeout ?? 100, 1);
    this.retryDelay = options.retryDelay ?? 200;
    checkMs(options.watchdogLease, "watchdogLease", 1);
    checkMs(options.renewInterval, "renewInterval", 1);
    this.watchdogLease = options.watchdogLease ?? 30000;
    this.renewInterval = options.renewInterval ?? this.watchdogLease / 3;
  }

  get quorum(): number {
    return Math.floor(this.nodes.length / 2) + 1;
  }

  /** @internal Each node's reply, or the error (a timeout after `timeout` ms). */
  async _onAll(args: Array<string | number>, timeout: number): Promise<unknown[]> {
    return Promise.all(
      this.nodes.map((n) =>
        Promise.race([
          n._call(this.name, args),
          sleep(timeout).then(() => Promise.reject(new Error("node timed out"))),
        ]).catch((e: unknown) => (e instanceof Error ? e : new Error(String(e)))),
      ),
    );
  }

  /** Takes the lock on a majority; throws `AcquireTimeout` when `timeout` (ms) passes first. */
  async acquire(options: { timeout?: number; lease?: number; signal?: AbortSignal } = {}): Promise<RedHold> {
    const h = await this.take(options);
    if (h === null) throw new AcquireTimeout(`RedLock ${JSON.stringify(this.name)} was not granted within ${options.timeout} ms`);
    return h;
  }

  /** One attempt (or attempts within `timeout`): the hold, or null. */
  tryAcquire(options: { timeout?: number; lease?: number; signal?: AbortSignal } = {}): Promise<RedHold | null> {
    return this.take({ timeout: 0, ...options });
  }

  private async take(o: { timeout?: number; lease?: number; signal?: AbortSignal }): Promise<RedHold | null> {
    this.seq += 1;
    const owner = `${this.prefix}:${this.seq}`;
    checkMs(o.lease, "lease", 1);
    checkMs(o.timeout, "timeout");
    const lease = Math.ceil(o.lease ?? this.watchdogLease);
    const deadline = o.timeout === undefined ? Infinity : now() + o.timeout;
    for (;;) {
      o.signal?.throwIfAborted();
      const start = now();
      const answers = await this._onAll(["DLOCK.ACQUIRE", this.name, owner, "PX", lease], this.nodeTimeout);
      const tokens = answers.map((a) => {
        try {
          return a instanceof Error ? null : toToken(a, "DLOCK.ACQUIRE");
        } catch {
          return null;
        }
      });
      const granted = tokens.filter((t) => t !== null).length;
      if (granted >= this.quorum && now() - start + drift(lease) < lease) {
        return new RedHold(this, owner, tokens, start, lease, o.lease === undefined);
      }
      // A failed attempt: release everywhere (also where the answer was lost).
      await this._onAll(["DLOCK.RELEASE", this.name, owner], this.nodeTimeout);
      // A majority that cannot run the command (module not loaded): retrying cannot help.
      const unknown = answers.filter((a) => a instanceof UnknownCommand);
      if (unknown.length >= this.quorum) throw unknown[0];
      const t = now();
      if (t >= deadline) return null;
      await sleep(Math.min(Math.random() * this.retryDelay, deadline - t));
    }
  }
}
