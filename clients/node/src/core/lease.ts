// The lease clock and the life of one hold (docs/clients.md, rules 1–3): when a hold is
// valid, when to renew, what a renewal's, a notice's, a check's or a closed BIND
// connection's answer means, and that a signal once fired stays fired. Time is passed in
// (ms on the caller's monotonic clock); nothing here does I/O or sets a timer.

/** Why a hold was lost (the contract's reasons, in this package's spelling). */
export type LostReason =
  /** A `released` notice for a hold this handle did not release: `DLOCK.FORCERELEASE`, or the same owner released it elsewhere. */
  | "forced"
  /** Its lease ended: an explicit lease ran out (no watchdog), or the server's `expired` notice. */
  | "expired"
  /** Its key was deleted (`DEL`, `FLUSHDB`, eviction). */
  | "deleted"
  /** Its `BIND` connection closed. */
  | "disconnected"
  /** No renewal was acknowledged before the lease clock ran out (a partition, a stalled server or event loop). */
  | "unreachable"
  /** The server says the hold is gone (a renewal answered 0, a release `NOTHELD`) and no notice said why. */
  | "not-held"
  /** RedLock: a majority of the servers says the lock is gone. */
  | "no-quorum";

/** How late a runtime's timer may fire under load (ms): part of the lease clock's margin. */
export const TIMER_SLACK = 50;

/**
 * The lease clock's margin (ms) for a lease of `lease` ms: clock rate drift between client
 * and server (1 %) and a late timer (50 ms), never more than half the lease.
 */
export function margin(lease: number): number {
  return Math.min(lease / 2, lease / 100 + TIMER_SLACK);
}

/** Until when a hold whose last acknowledged grant or renewal was sent at `sent` is valid. */
export function validUntil(sent: number, lease: number): number {
  return sent + lease - margin(lease);
}

/** The watchdog's renew interval when none is given: a third of its lease. */
export function defaultRenewInterval(lease: number): number {
  return lease / 3;
}

/**
 * Whether a grant sent at `sent` whose reply arrived at `arrived` is re-anchored with a
 * RENEW: the clock starts at the send, so a reply that took more than a quarter of the
 * lease would leave the hold little of it.
 */
export function needsReanchor(sent: number, arrived: number, lease: number): boolean {
  return arrived - sent > lease / 4;
}

/** How soon a renewal that failed (no answer, a connection error) is tried again (ms). */
export function renewRetryDelay(lease: number, renewInterval: number): number {
  return Math.min(Math.max(lease / 10, 20), renewInterval);
}

/** The reason a notice on the lock's channel gives, should the check after it find the hold gone. */
export function noticeReason(message: string): LostReason | undefined {
  switch (message) {
    case "released":
      return "forced";
    case "expired":
      return "expired";
    case "deleted":
      return "deleted";
    case "disconnected":
      return "disconnected";
    default:
      return undefined; // a message of a recipe ("elected", …) or a reconnect: look, no reason
  }
}

/**
 * How long (ms) a hold the server called gone waits for a notice to name why — a notice
 * published by the act that ended it is already on its way then — before it is lost as
 * `not-held`.
 */
export const REASON_GRACE = 50;

/** What the driver does after feeding an event to a `HoldLife`. */
export type Verdict =
  /** Nothing changed that the caller must act on. */
  | { readonly kind: "none" }
  /** The hold is lost now: fire its loss signal (once) and stop its timers. */
  | { readonly kind: "lost"; readonly reason: LostReason }
  /** Check the hold now (`DLOCK.CHECK`): a notice came. */
  | { readonly kind: "check" }
  /**
   * The server says the hold is gone and no notice said why yet: `tick` at `until` (it is
   * lost then as `not-held`) unless a notice names the reason first.
   */
  | { readonly kind: "wait"; readonly until: number };

const NONE: Verdict = { kind: "none" };

/**
 * One hold's state: held (renewed by the watchdog, or until its explicit lease ends),
 * gone (the server says it ended: lost as soon as a notice names why, or after
 * `REASON_GRACE`), lost (its signal fired: final), or ended (unlocked: never renewed again).
 */
export class HoldLife {
  /** When the last acknowledged grant or renewal was sent. */
  private sent: number;
  /** The lease that grant or renewal gave (an explicit `renew(lease)` may differ from `lease`). */
  private granted: number;
  private phase: "held" | "gone" | "lost" | "ended" = "held";
  /** Until when a gone hold waits for a notice's reason. */
  private goneUntil = 0;
  private why: LostReason | undefined;
  /** The reason of the latest notice not yet answered by a check. */
  private pending: LostReason | undefined;
  private renewing = false;

  constructor(
    /** The lease (ms) each grant or renewal gives. */
    readonly lease: number,
    /** The watchdog's renew interval (ms); undefined: an explicit lease, never renewed. */
    readonly renewInterval: number | undefined,
    sent: number,
  ) {
    this.sent = sent;
    this.granted = lease;
  }

  /** Whether the watchdog renews this hold. */
  get watchdog(): boolean {
    return this.renewInterval !== undefined;
  }
  get held(): boolean {
    return this.phase === "held";
  }
  get lost(): boolean {
    return this.phase === "lost";
  }
  /** The server says it ended; the signal fires within `REASON_GRACE`. */
  get gone(): boolean {
    return this.phase === "gone";
  }
  get ended(): boolean {
    return this.phase === "ended";
  }
  /** Why it was lost (undefined while not lost). */
  get reason(): LostReason | undefined {
    return this.why;
  }
  /** The instant the hold stops being valid on this client's clock. */
  get validUntil(): number {
    return validUntil(this.sent, this.granted);
  }
  /** When the watchdog renews next (Infinity: never): sooner after a shorter explicit renewal. */
  get renewAt(): number {
    if (this.renewInterval === undefined || this.phase !== "held") return Infinity;
    const i = this.granted === this.lease ? this.renewInterval : Math.min(this.renewInterval, defaultRenewInterval(this.granted));
    return this.sent + i;
  }

  private lose(reason: LostReason): Verdict {
    if (this.phase !== "held" && this.phase !== "gone") return NONE;
    this.phase = "lost";
    this.why = reason;
    return { kind: "lost", reason };
  }

  /** The server says the hold is gone: lost with the last notice's reason, else after a short wait for one. */
  private serverSaysGone(now: number): Verdict {
    if (this.phase !== "held") return NONE;
    if (this.pending !== undefined) return this.lose(this.pending);
    this.phase = "gone";
    this.goneUntil = now + REASON_GRACE;
    return { kind: "wait", until: this.goneUntil };
  }

  /**
   * The clock: past `validUntil` the hold is lost (`unreachable` under the watchdog,
   * `expired` otherwise); a gone hold past its wait for a reason, `not-held`.
   */
  tick(now: number): Verdict {
    if (this.phase === "gone") {
      return now >= Math.min(this.goneUntil, this.validUntil) ? this.lose("not-held") : NONE;
    }
    if (this.phase !== "held" || now < this.validUntil) return NONE;
    return this.lose(this.watchdog ? "unreachable" : "expired");
  }

  /**
   * Starts a renewal at `now` when one is due and none is in flight: its deadline (the
   * renewal has failed when no answer came by then), or undefined (nothing to send).
   */
  startRenewal(now: number): number | undefined {
    if (this.phase !== "held" || !this.watchdog || this.renewing || now < this.renewAt) return undefined;
    this.renewing = true;
    return this.validUntil;
  }

  /** The answer to a renewal sent at `sent`: 1 renewed (the clock moves), 0 gone. */
  renewed(sent: number, answer: number, now: number): Verdict {
    this.renewing = false;
    const lapsed = this.tick(now);
    if (lapsed.kind !== "none" || this.phase !== "held") return lapsed;
    if (answer === 1) {
      if (sent > this.sent) {
        this.sent = sent;
        this.granted = this.lease;
      }
      return NONE;
    }
    return this.serverSaysGone(now);
  }

  /** A renewal that got no answer (a timeout, a connection error): when to try again. */
  renewFailed(now: number): number {
    this.renewing = false;
    const i = this.renewInterval ?? this.lease;
    return Math.min(now + renewRetryDelay(this.lease, i), this.validUntil);
  }

  /**
   * An explicit renewal by the caller (`renew(lease)`), sent at `sent`, that the server
   * acknowledged: the server's lease is now `lease` from then (shorter or longer).
   */
  acknowledged(sent: number, now: number, lease = this.lease): Verdict {
    const lapsed = this.tick(now);
    if (lapsed.kind !== "none" || this.phase !== "held") return lapsed;
    if (sent >= this.sent) {
      this.sent = sent;
      this.granted = lease;
    }
    return NONE;
  }

  /**
   * A message on the lock's channel (`subscribed` / `reconnected`: look again, nothing was
   * said): check the hold now — or, when the server already called it gone, it is lost
   * with this notice's reason.
   */
  notice(message: string): Verdict {
    const reason = noticeReason(message);
    if (this.phase === "gone") return reason === undefined ? NONE : this.lose(reason);
    if (this.phase !== "held") return NONE;
    this.pending = reason ?? this.pending;
    return { kind: "check" };
  }

  /** The answer of a check (`DLOCK.CHECK key token`) sent after a notice or a reconnect. */
  checked(alive: boolean, now: number): Verdict {
    const lapsed = this.tick(now);
    if (lapsed.kind !== "none" || this.phase !== "held") return lapsed;
    if (alive) {
      this.pending = undefined;
      return NONE;
    }
    return this.serverSaysGone(now);
  }

  /** The server said the hold is gone (`NOTHELD`, a fenced command refused). */
  serverGone(now: number): Verdict {
    return this.serverSaysGone(now);
  }

  /**
   * The last release found the hold already gone (`NOTHELD`): the caller learns it had
   * ended before, so the signal fires now if it had not.
   */
  releaseGone(): Verdict {
    if (this.phase === "lost") return NONE;
    this.phase = "held";
    return this.lose(this.pending ?? "not-held");
  }

  /** The hold's own BIND connection closed: the server ends a bound hold at once. */
  bindClosed(): Verdict {
    return this.lose("disconnected");
  }

  /** A loss decided elsewhere (RedLock's quorum, a recipe). */
  fail(reason: LostReason): Verdict {
    return this.lose(reason);
  }

  /** Unlock (the last release): never renewed again, whatever the reply. */
  end(): void {
    if (this.phase === "held" || this.phase === "gone") this.phase = "ended";
  }
}
