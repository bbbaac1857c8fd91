// runOnce: a scheduled job that runs on one process of many (ShedLock's @SchedulerLock):
// skip, not wait, when another process runs it; atMostFor is the lease; atLeastFor keeps
// the hold after a fast finish. Same semantics as the Python and Rust recipes
// (docs/recipes.md).
import { Dlock, type Hold } from "../client.js";
import { LockLost, NotHeld, type LostReason } from "../errors.js";
import { toInt, toToken } from "../resp.js";

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
  /** The lease (ms): a process that dies mid-job keeps the job locked no longer than this. */
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

function checkMs(v: number, what: string, min: number): void {
  if (!Number.isFinite(v) || v < min) {
    throw new RangeError(`${what} must be a number of milliseconds >= ${min}, got ${String(v)}`);
  }
}

/**
 * Runs `job(signal, hold)` unless another process runs it now.
 *
 * - One try (`DLOCK.ACQUIRE name owner PX atMostFor WAIT 0`, a fresh owner per run, so a
 *   run is never re-entrant): when someone else holds `name` the result is `'skipped'`.
 * - `atMostFor` is the lease. A job that outlives it loses the hold: `signal` aborts (a
 *   `LockLost`, `'lease-ended'`) a drift margin before the server's lease ends, and the
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
  const { atMostFor, atLeastFor = 0, renew = false } = options;
  checkMs(atMostFor, "atMostFor", 1);
  checkMs(atLeastFor, "atLeastFor", 0);
  if (atLeastFor > atMostFor) throw new RangeError("atLeastFor must not be longer than atMostFor");
  const owner = `${client.newOwner()}:run`;
  const sent = now();
  const token = toToken(
    await client._call(name, ["DLOCK.ACQUIRE", name, owner, "PX", Math.ceil(atMostFor), "WAIT", 0]),
    "DLOCK.ACQUIRE",
  );
  if (token === null) return { outcome: "skipped" };
  // With `renew`, the watchdog of a client of its own renews PX atMostFor.
  const locks = renew
    ? new Dlock(client.redis, { watchdogLease: atMostFor, ownerPrefix: owner, onLost: client.onLost })
    : client;
  const hold = locks._adopt("mutex", name, owner, token, sent, renew ? undefined : atMostFor);
  let value: T | undefined;
  try {
    value = await job(hold.signal, hold);
  } finally {
    await finish(client, hold, sent, atLeastFor);
    if (locks !== client) locks.close();
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
  if (s.lost) {
    await hold.release().catch(() => undefined); // ours may still be there (only unreachable)
    return;
  }
  const left = start + atLeastFor - now();
  if (left < 0.5) {
    await hold.release().catch(() => undefined);
    return;
  }
  // Kept, not released: no watchdog or lease timer from here on; the server ends it.
  s.ended = true;
  s.stop();
  s.client._forget(s, true);
  try {
    const v = toInt(await client._call(s.key, ["DLOCK.RENEW", s.key, s.owner, "PX", Math.ceil(left)]), "DLOCK.RENEW");
    if (v !== 1) s.markLost("not-held");
  } catch (e) {
    if (e instanceof NotHeld) s.markLost("not-held");
  }
}
