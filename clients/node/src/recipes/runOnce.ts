// runOnce: a scheduled job that runs on one process of many (ShedLock's @SchedulerLock):
// skip, not wait, when another process runs it; atMostFor is the lease; atLeastFor keeps
// the hold after a fast finish. Same semantics as the Python and Rust recipes
// (docs/recipes.md).
import { Dlock, type Hold } from "../client.js";
import { defaultRenewInterval } from "../core/lease.js";
import { checkKey, checkOptions, RUN_ONCE_OPTIONS } from "../core/options.js";
import { toInt, toToken } from "../core/replies.js";
import { InvalidArgument, LockLost, NotHeld, type LostReason } from "../errors.js";

const now = (): number => performance.now();

/** What `runOnce` did. */
export type RunOutcome =
  /** The job ran and the hold lasted to its end (kept until `atLeastFor`). */
  | "ran"
  /** Someone else holds the job's lock: the job did not run (nobody waited). */
  | "skipped"
  /**
   * The job ran but its hold ended before the job did (`atMostFor` passed without
   * `renew`, renewals failed, the lock was force-released): another process may have run it.
   */
  | "lost";

export interface RunOnceOptions {
  /** The lease (ms): a process that dies mid-job keeps the job locked no longer than this (required). */
  atMostFor: number;
  /**
   * After a job that finished sooner, the hold is kept until this many ms after the start
   * (`DLOCK.RENEW … PX remainder`, not a release), so a process whose clock or schedule runs
   * a little behind does not run the job again. Default 0.
   */
  atLeastFor?: number;
  /** Renew the lease (every `atMostFor / 3`) while the job runs, so a long job keeps it. Default false. */
  renew?: boolean;
}

export interface RunResult<T> {
  outcome: RunOutcome;
  /** What the job returned (undefined when skipped). */
  value?: T;
  /** The fencing token of the run (undefined when skipped). */
  token?: bigint;
  /** Why the hold was lost (only when `outcome` is `'lost'`). */
  reason?: LostReason;
}

/**
 * Runs `job(signal, hold)` unless another process runs it now.
 *
 * - One try (`DLOCK.ACQUIRE name owner PX atMostFor WAIT 0`, a fresh owner per run, so a
 *   run is never re-entrant): when someone else holds `name` the result is `'skipped'`.
 * - `atMostFor` is the lease. A job that outlives it loses the hold: `signal` aborts (a
 *   `LockLost`, `'expired'`) a margin before the server's lease ends, and the
 *   result is `'lost'` — unless `renew`, which renews it every `atMostFor / 3`.
 * - `atLeastFor`: after a faster job, the hold is kept for the rest of it.
 * - `hold` gives the run's fencing `token`, `fenced(...)` and `check()`. An exception of
 *   the job propagates, after the hold was handled the same way.
 */
export async function runOnce<T>(
  client: Dlock,
  name: string,
  options: RunOnceOptions,
  job: (signal: AbortSignal, hold: Hold) => Promise<T> | T,
): Promise<RunResult<T>> {
  checkKey("runOnce()", name, "name");
  checkOptions("runOnce()", options, RUN_ONCE_OPTIONS);
  if (options?.atMostFor === undefined) {
    throw new InvalidArgument("runOnce(): atMostFor must be a number of milliseconds from 1 to 2^40, got undefined", {
      argument: "atMostFor",
    });
  }
  if (typeof job !== "function") throw new InvalidArgument("runOnce(): job must be a function", { argument: "job" });
  const { atMostFor, atLeastFor = 0, renew = false } = options;
  if (atLeastFor > atMostFor) {
    throw new InvalidArgument(`runOnce(): atLeastFor (${atLeastFor} ms) must not be longer than atMostFor (${atMostFor} ms)`, {
      argument: "atLeastFor",
    });
  }
  const owner = `${client.newOwner()}:run`;
  const sent = now();
  const token = toToken(
    await client._request(name, ["DLOCK.ACQUIRE", name, owner, "PX", Math.ceil(atMostFor), "WAIT", 0]),
    "DLOCK.ACQUIRE",
  );
  if (token === null) return { outcome: "skipped" };
  // With `renew`, the watchdog renews PX atMostFor every atMostFor / 3.
  const hold = client._adopt("mutex", name, owner, token, sent, {
    lease: atMostFor,
    renewInterval: renew ? defaultRenewInterval(atMostFor) : undefined,
  });
  let value: T | undefined;
  try {
    value = await job(hold.signal, hold);
  } finally {
    await finish(client, hold, sent, atLeastFor);
  }
  if (hold.signal.aborted) {
    const r = hold.signal.reason;
    return { outcome: "lost", value, token, reason: r instanceof LockLost ? r.reason : "not-held" };
  }
  return { outcome: "ran", value, token };
}

/**
 * The end of a run: keep the hold for what is left of `atLeastFor`, else release it. A
 * connection error is not thrown: the lease (`atMostFor`) then ends the hold.
 */
async function finish(client: Dlock, hold: Hold, start: number, atLeastFor: number): Promise<void> {
  const s = hold._state;
  const left = start + atLeastFor - now();
  if (s.lost || left < 0.5) {
    await hold.release(); // never throws; a lost hold's may still be there (only unreachable)
    return;
  }
  // Kept, not released: no watchdog or lease timer from here on; the server ends it.
  s.end();
  client._forget(s);
  try {
    const v = toInt(await client._request(s.key, ["DLOCK.RENEW", s.key, s.owner, "PX", Math.ceil(left)]), "DLOCK.RENEW");
    if (v !== 1) s.apply(s.life.releaseGone());
  } catch (e) {
    if (e instanceof NotHeld) s.apply(s.life.releaseGone());
  }
}
