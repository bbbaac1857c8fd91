// Waits that fit the transport (docs/clients.md, rule 4): how long each server-side WAIT
// slice may be, how long to wait for any reply, and how a caller's deadline bounds
// connecting, each slice and each retry. Time is passed in; no I/O, no timers.

/** The longest server-side wait of one slice (ms) when the transport allows more. */
export const DEFAULT_SLICE = 4000;
/** The shortest slice (ms). */
export const MIN_SLICE = 10;
/**
 * How long a call of this package waits for a reply that is not a server-side wait (ms),
 * when the transport has no shorter timeout of its own: a renewal, a release, a first try.
 */
export const DEFAULT_REQUEST_TIMEOUT = 5000;
/** How far past the caller's deadline a wait may end: it is kept within 250 ms. */
export const DEADLINE_SLACK = 150;
/** The pause (ms) before a wait connects again after a connection error (doubled up to the max). */
export const RECONNECT_PAUSE = 50;
export const RECONNECT_PAUSE_MAX = 1000;

/**
 * The longest server-side WAIT of one slice for a transport that cuts replies after
 * `transportTimeout` ms (undefined: no limit):
 * `min(defaultSlice, T − max(100 ms, T / 5))`, at least 10 ms.
 */
export function sliceFor(transportTimeout: number | undefined, defaultSlice = DEFAULT_SLICE): number {
  const d = Math.max(MIN_SLICE, defaultSlice);
  if (transportTimeout === undefined || !Number.isFinite(transportTimeout) || transportTimeout <= 0) return d;
  return Math.max(MIN_SLICE, Math.min(d, transportTimeout - Math.max(100, transportTimeout / 5)));
}

/**
 * What a reply may take beyond the server's own wait (ms): the share of the transport's
 * timeout a slice leaves free, 100 ms .. 1 s (1 s without a transport timeout).
 */
export function replyAllowance(transportTimeout: number | undefined): number {
  if (transportTimeout === undefined || !Number.isFinite(transportTimeout) || transportTimeout <= 0) return 1000;
  return Math.min(1000, Math.max(100, transportTimeout / 5));
}

/** How long a call that does not wait on the server may take (ms). */
export function requestTimeout(transportTimeout: number | undefined): number {
  if (transportTimeout === undefined || !Number.isFinite(transportTimeout) || transportTimeout <= 0) {
    return DEFAULT_REQUEST_TIMEOUT;
  }
  return Math.min(DEFAULT_REQUEST_TIMEOUT, transportTimeout);
}

/** The timing of one wait: its deadline and the transport's limits. */
export class WaitPlan {
  /** The instant the caller gives up (Infinity: no deadline). */
  readonly deadline: number;
  readonly slice: number;
  private readonly allowance: number;
  private readonly request: number;
  private pause = RECONNECT_PAUSE;

  constructor(
    start: number,
    /** The caller's timeout (ms): undefined waits as long as it takes, 0 is one try. */
    readonly timeout: number | undefined,
    transportTimeout: number | undefined,
    defaultSlice = DEFAULT_SLICE,
  ) {
    this.deadline = timeout === undefined ? Infinity : start + timeout;
    this.slice = sliceFor(transportTimeout, defaultSlice);
    this.allowance = replyAllowance(transportTimeout);
    this.request = requestTimeout(transportTimeout);
  }

  /** Whether this is a single try (no wait). */
  get oneTry(): boolean {
    return this.timeout === 0;
  }

  /** Time left (ms) at `now`; Infinity without a deadline. */
  left(now: number): number {
    return this.deadline - now;
  }

  /** Whether the deadline has passed. */
  over(now: number): boolean {
    return now >= this.deadline;
  }

  /** The WAIT (ms) of the next slice at `now`: what is left, at most a slice. */
  nextWait(now: number): number {
    if (this.oneTry) return 0;
    return Math.max(0, Math.floor(Math.min(this.slice, this.left(now))));
  }

  /**
   * How long to wait (ms from `now`) for the reply of a call whose server-side wait is
   * `wms`: the wait, the reply's allowance, never past the deadline (plus a little slack).
   * A single try is bounded by the request timeout only: its deadline is its start.
   */
  replyWithin(wms: number, now: number): number {
    const own = wms > 0 ? wms + this.allowance : this.request;
    if (this.oneTry || this.deadline === Infinity) return own;
    return Math.max(1, Math.min(own, this.left(now) + DEADLINE_SLACK));
  }

  /** How long connecting may take (ms from `now`): never past the deadline (a connection made later is of no use). */
  connectWithin(now: number): number {
    if (this.oneTry || this.deadline === Infinity) return this.request;
    return Math.max(1, Math.min(this.request, this.left(now)));
  }

  /**
   * After a connection error at `now`: how long to pause before trying again (ms), or
   * undefined when the wait ends with that error (a single try; or the deadline is too
   * near for another attempt).
   */
  retryAfter(now: number): number | undefined {
    if (this.oneTry) return undefined;
    const left = this.left(now);
    if (left <= 0) return undefined;
    const p = Math.min(this.pause, left);
    this.pause = Math.min(this.pause * 2, RECONNECT_PAUSE_MAX);
    return p;
  }

  /** A call got an answer: the next connection error pauses briefly again. */
  answered(): void {
    this.pause = RECONNECT_PAUSE;
  }
}
