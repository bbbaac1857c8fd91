package io.dlock;

import io.dlock.core.Commands;
import io.dlock.core.Kind;
import io.dlock.core.Leases;
import io.dlock.core.Replies;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionStage;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.Lock;

/**
 * A lock held by a thread: a reentrant mutex, a fair mutex, or one mode of a read-write
 * lock. Redisson's {@code RLock} shapes on {@link Lock}: {@code lock()} without a lease
 * takes the watchdog's lease (30 s) and renews it every 10 s until {@link #unlock()};
 * {@code lock(leaseTime, unit)} holds for that lease with no renewal, and a
 * {@code leaseTime} of 0 or less means the watchdog's lease, as in Redisson. The
 * {@link Duration} methods ({@link #lock(Duration)}, {@link #tryLock(Duration, Duration)})
 * take a lease that must be positive, and {@code null} for the watchdog's.
 *
 * <p>Every grant carries a fencing token ({@link #getToken()}); a hold that ends without
 * its owner's release completes its {@link #lostSignal()} — at the latest when its lease
 * could end on the server by the client's own clock, and within a round trip of the
 * server's notice when the server ended it. {@link #isHeldByCurrentThread()},
 * {@link #getHoldCount()} and {@link #getToken()} answer from that same state.
 *
 * <p>Bad arguments (a null or empty name, a lease or wait out of range) are refused with
 * {@link DlockArgumentException} before anything is sent.
 */
public class DLock implements Lock {
    private final Dlock client;
    private final String name;
    private final byte[] key;
    private final Kind kind;
    private final LockOptions options;

    DLock(Dlock client, String name, Kind kind, LockOptions options) {
        this.client = client;
        this.name = Leases.checkName("name", name);
        this.key = Commands.bytes(name);
        this.kind = kind;
        this.options = options;
    }

    /** The lock's name (its key). */
    public String getName() {
        return name;
    }

    /** What kind of lock this is. */
    public Kind getKind() {
        return kind;
    }

    private String owner() {
        return client.threadOwner();
    }

    private static long lease(long time, TimeUnit unit) {
        return Leases.leaseOrWatchdog("leaseTime", time, unit);
    }

    private static long waitMs(long time, TimeUnit unit) {
        return Leases.waitOrForever("waitTime", time, unit);
    }

    private Hold take(long waitMs, long leaseMs, boolean interruptible) throws InterruptedException {
        return client.acquire(name, key, kind, owner(), waitMs, leaseMs, 0, 1, options, interruptible);
    }

    private Hold takeUninterruptibly(long waitMs, long leaseMs) {
        try {
            return take(waitMs, leaseMs, false);
        } catch (InterruptedException e) {
            // not thrown when uninterruptible
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        }
    }

    Dlock client() {
        return client;
    }

    String clientId() {
        return client.getId();
    }

    /** A try that keeps an interrupt for later (for multi-locks and RedLocks). */
    boolean tryLockUninterruptibly(long waitMs, long leaseMs) {
        return takeUninterruptibly(waitMs, leaseMs) != null;
    }

    /** Waits for the lock (an interrupt is kept, not acted on), with the watchdog's lease. */
    @Override
    public void lock() {
        takeUninterruptibly(-1, -1);
    }

    /**
     * Waits for the lock and holds it for {@code leaseTime} (no renewal). A
     * {@code leaseTime} of 0 or less means the watchdog's lease, renewed until
     * {@link #unlock()} (as Redisson's {@code lock(leaseTime, unit)}).
     *
     * @throws DlockArgumentException when the lease is above 2^40 ms or below 1 ms but positive
     */
    public void lock(long leaseTime, TimeUnit unit) {
        takeUninterruptibly(-1, lease(leaseTime, unit));
    }

    /**
     * Waits for the lock and holds it for {@code leaseTime} (no renewal); {@code null}: the
     * watchdog's lease, renewed until {@link #unlock()}.
     *
     * @throws DlockArgumentException when the lease is zero, negative or above 2^40 ms
     */
    public void lock(Duration leaseTime) {
        takeUninterruptibly(-1, Leases.lease("leaseTime", leaseTime));
    }

    /** Waits for the lock until interrupted; an interrupt leaves no hold and no queue place. */
    @Override
    public void lockInterruptibly() throws InterruptedException {
        take(-1, -1, true);
    }

    /** {@link #lockInterruptibly()} with a lease (no renewal; 0 or less: the watchdog's). */
    public void lockInterruptibly(long leaseTime, TimeUnit unit) throws InterruptedException {
        take(-1, lease(leaseTime, unit), true);
    }

    /** Takes the lock if it is free now (one round trip), with the watchdog's lease. */
    @Override
    public boolean tryLock() {
        return takeUninterruptibly(0, -1) != null;
    }

    /**
     * Waits up to {@code time} for the lock, with the watchdog's lease. The deadline holds
     * when the server is down or partitioned away: then the wait ends with
     * {@link DlockTimeoutException} (carrying the last connection error) at its deadline.
     */
    @Override
    public boolean tryLock(long time, TimeUnit unit) throws InterruptedException {
        return take(waitMs(time, unit), -1, true) != null;
    }

    /**
     * Waits up to {@code waitTime} (negative: without end) and holds for {@code leaseTime}
     * (0 or less: the watchdog's lease, renewed — as in Redisson).
     */
    public boolean tryLock(long waitTime, long leaseTime, TimeUnit unit) throws InterruptedException {
        return take(waitMs(waitTime, unit), lease(leaseTime, unit), true) != null;
    }

    /**
     * Waits up to {@code waitTime} ({@code null}: without end; zero: one try) and holds for
     * {@code leaseTime} ({@code null}: the watchdog's lease, renewed).
     *
     * @throws DlockArgumentException when the lease is zero, negative or above 2^40 ms, or
     *     the wait negative or above 2^40 ms
     */
    public boolean tryLock(Duration waitTime, Duration leaseTime) throws InterruptedException {
        long lease = Leases.lease("leaseTime", leaseTime);
        return take(Leases.waitTime("waitTime", waitTime), lease, true) != null;
    }

    /** {@link #lock()} and return the hold's fencing token. */
    public long lockAndGetToken() {
        return takeUninterruptibly(-1, -1).token;
    }

    /** {@link #lock(long, TimeUnit)} and return the hold's fencing token. */
    public long lockAndGetToken(long leaseTime, TimeUnit unit) {
        return takeUninterruptibly(-1, lease(leaseTime, unit)).token;
    }

    /** {@link #tryLock(long, long, TimeUnit)} returning the fencing token, or null when not acquired. */
    public Long tryLockAndGetToken(long waitTime, long leaseTime, TimeUnit unit) throws InterruptedException {
        Hold h = take(waitMs(waitTime, unit), lease(leaseTime, unit), true);
        return h == null ? null : h.token;
    }

    /** {@link #tryLock(Duration, Duration)} returning the fencing token, or null when not acquired. */
    public Long tryLockAndGetToken(Duration waitTime, Duration leaseTime) throws InterruptedException {
        long lease = Leases.lease("leaseTime", leaseTime);
        Hold h = take(Leases.waitTime("waitTime", waitTime), lease, true);
        return h == null ? null : h.token;
    }

    /** The fencing token of the current thread's hold, or null when it holds none (or lost it). */
    public Long getToken() {
        Hold h = client.hold(kind, name, owner());
        return h == null ? null : h.token;
    }

    /**
     * Completes with the reason when the current thread's hold ends without its release:
     * {@link LostReason#UNREACHABLE} (no renewal acknowledged before the lease could end),
     * {@link LostReason#EXPIRED} (an explicit lease ran out), {@link LostReason#FORCED},
     * {@link LostReason#DELETED}, {@link LostReason#DISCONNECTED} (the server's notice), or
     * {@link LostReason#NOT_HELD}. Its stages run on a thread of the client's own, never one
     * that renews or times holds. Already complete when the hold was lost and not yet unlocked.
     *
     * @throws IllegalMonitorStateException when the current thread has no hold here
     */
    public CompletionStage<LostReason> lostSignal() {
        Hold h = client.anyHold(kind, name, owner());
        if (h == null) {
            throw new IllegalMonitorStateException("lock \"" + name + "\" is not held by the current thread ("
                    + owner() + ")");
        }
        return h.lost.minimalCompletionStage();
    }

    /**
     * Releases one hold of the current thread. Whatever happens, the hold is no longer
     * renewed once its last count is released (see {@link #unlockAndGetResult()}).
     *
     * @throws IllegalMonitorStateException when the thread does not hold the lock (never
     *     did, or its hold had ended: lease, force-release, BIND connection, deletion)
     * @throws DlockConnectionException when the release failed, and again on a fresh
     *     connection: the hold is no longer renewed and ends at its lease
     */
    @Override
    public void unlock() {
        throwFor(client.release(name, key, kind, owner()), owner());
    }

    /** What {@link #unlock()} throws for {@code r}: nothing when released or still held. */
    private void throwFor(UnlockResult r, String owner) {
        switch (r.status()) {
            case LOST -> {
                IllegalMonitorStateException ex = new IllegalMonitorStateException("attempt to unlock lock \""
                        + name + "\" held by " + owner + ", but the server no longer has that hold: its lease"
                        + " ended, it was force-released, its key deleted or its BIND connection closed ("
                        + r.error().getMessage() + ")");
                ex.initCause(r.error());
                throw ex;
            }
            case UNKNOWN -> throw r.error();
            default -> {
                // released, or an outer reentrant hold remains
            }
        }
    }

    /**
     * Releases one hold of the current thread and says what became of it
     * ({@code docs/clients.md}, rule 3): {@link UnlockResult.Status#RELEASED},
     * {@link UnlockResult.Status#STILL_HELD} (an outer reentrant hold remains, still
     * renewed), {@link UnlockResult.Status#LOST} (the server no longer had it) or
     * {@link UnlockResult.Status#UNKNOWN} (the release failed on its connection and once
     * more on a fresh one; the hold is not renewed and ends at its lease). Never throws
     * for these.
     *
     * @throws IllegalMonitorStateException when the current thread has no hold here
     */
    public UnlockResult unlockAndGetResult() {
        return client.release(name, key, kind, owner());
    }

    /**
     * Renews the current thread's hold to {@code leaseTime} from now ({@code DLOCK.RENEW});
     * false when the server no longer has it (its lost signal completes).
     *
     * @throws IllegalMonitorStateException when the current thread holds nothing
     */
    public boolean renew(long leaseTime, TimeUnit unit) {
        return client.renew(name, key, kind, owner(), Leases.checkLease("leaseTime", unit.toMillis(leaseTime),
                leaseTime + " " + unit));
    }

    /** {@link #renew(long, TimeUnit)} for the hold of thread {@code threadId} of this client. */
    public boolean renewHeldByThread(long threadId, long leaseTime, TimeUnit unit) {
        return client.renew(name, key, kind, client.getId() + ":" + threadId, Leases.checkLease("leaseTime",
                unit.toMillis(leaseTime), leaseTime + " " + unit));
    }

    /** Removes the lock whatever its holders; true when there was one. Redisson's {@code forceUnlock}. */
    public boolean forceUnlock() {
        return Replies.integer(client.call(key, Commands.forceRelease(key)), "DLOCK.FORCERELEASE") == 1;
    }

    /**
     * Whether anyone holds the lock (in any mode): true at once when this client's thread
     * holds it by its lease clock, else as the server says ({@code DLOCK.INFO}, live holds only).
     */
    public boolean isLocked() {
        if (client.hold(kind, name, owner()) != null) {
            return true;
        }
        return !Replies.holders(client.info(key)).isEmpty();
    }

    /**
     * Whether the current thread holds the lock (in this lock's mode): this client's own
     * answer, from the hold's lease clock and notices (no round trip), the same state its
     * {@link #lostSignal()} fires from.
     */
    public boolean isHeldByCurrentThread() {
        return client.hold(kind, name, owner()) != null;
    }

    /** Whether thread {@code threadId} of this client holds the lock (from its lease clock). */
    public boolean isHeldByThread(long threadId) {
        return client.hold(kind, name, client.getId() + ":" + threadId) != null;
    }

    /** How many times the current thread holds the lock (0 when not or no longer), from this client's own count. */
    public int getHoldCount() {
        Hold h = client.hold(kind, name, owner());
        return h == null ? 0 : Math.max(0, h.count.get());
    }

    /**
     * The longest remaining lease of any holder in ms; -2 when there is no lock, as
     * Redisson's {@code remainTimeToLive}.
     */
    public long remainTimeToLive() {
        Map<String, Object> info = client.info(key);
        if (info == null) {
            return -2;
        }
        List<Map<String, Object>> holders = Replies.holders(info);
        if (holders.isEmpty()) {
            return -2;
        }
        long best = -1;
        for (Map<String, Object> h : holders) {
            if (h.get("ttl") instanceof Long t) {
                best = Math.max(best, t);
            }
        }
        return best;
    }

    /** Whether {@code token} is the token of a live hold of this lock ({@code DLOCK.CHECK}). */
    public boolean checkToken(long token) {
        return Replies.integer(client.call(key, Commands.check(key, token)), "DLOCK.CHECK") == 1;
    }

    /** {@code DLOCK.INFO} of this lock as a map (null when no lock exists). */
    public Map<String, Object> info() {
        return client.info(key);
    }

    // ------------------------------------------------------------------ async (Redisson's RLockAsync)

    /**
     * Takes the lock for thread {@code threadId} of this client on a daemon thread of the
     * client; the future completes with the hold, or null when not granted in time.
     * Cancelling it gives the wait up ({@code DLOCK.CANCEL}); a grant that raced with the
     * cancellation is released.
     */
    private <T> CompletableFuture<T> takeAsync(long threadId, long waitMs, long leaseMs,
            java.util.function.Function<Hold, T> value) {
        String owner = client.threadOwner(threadId);
        return client.async(() -> client.acquire(name, key, kind, owner, waitMs, leaseMs, 0, 1, options, true), value,
                h -> client.release(name, key, kind, owner));
    }

    /**
     * {@link #lock()} without blocking: the future completes when the calling thread holds
     * the lock (the watchdog's lease). As in Redisson the hold is the calling thread's:
     * {@link #unlock()} from it, or {@link #unlockAsync(long)} with its id. Cancelling the
     * future gives the wait up.
     */
    public CompletableFuture<Void> lockAsync() {
        return lockAsync(-1, TimeUnit.MILLISECONDS, Thread.currentThread().getId());
    }

    /** {@link #lockAsync()} for thread {@code threadId} of this client. */
    public CompletableFuture<Void> lockAsync(long threadId) {
        return lockAsync(-1, TimeUnit.MILLISECONDS, threadId);
    }

    /** {@link #lock(long, TimeUnit)} without blocking (0 or less: the watchdog's lease). */
    public CompletableFuture<Void> lockAsync(long leaseTime, TimeUnit unit) {
        return lockAsync(leaseTime, unit, Thread.currentThread().getId());
    }

    /** {@link #lock(long, TimeUnit)} without blocking, for thread {@code threadId} of this client. */
    public CompletableFuture<Void> lockAsync(long leaseTime, TimeUnit unit, long threadId) {
        return takeAsync(threadId, -1, lease(leaseTime, unit), h -> null);
    }

    /** {@link #tryLock()} without blocking: true when granted at once. */
    public CompletableFuture<Boolean> tryLockAsync() {
        return tryLockAsync(0, -1, TimeUnit.MILLISECONDS, Thread.currentThread().getId());
    }

    /** {@link #tryLockAsync()} for thread {@code threadId} of this client. */
    public CompletableFuture<Boolean> tryLockAsync(long threadId) {
        return tryLockAsync(0, -1, TimeUnit.MILLISECONDS, threadId);
    }

    /** {@link #tryLock(long, TimeUnit)} without blocking. */
    public CompletableFuture<Boolean> tryLockAsync(long waitTime, TimeUnit unit) {
        return tryLockAsync(waitTime, -1, unit, Thread.currentThread().getId());
    }

    /** {@link #tryLock(long, long, TimeUnit)} without blocking. */
    public CompletableFuture<Boolean> tryLockAsync(long waitTime, long leaseTime, TimeUnit unit) {
        return tryLockAsync(waitTime, leaseTime, unit, Thread.currentThread().getId());
    }

    /** {@link #tryLock(long, long, TimeUnit)} without blocking, for thread {@code threadId} of this client. */
    public CompletableFuture<Boolean> tryLockAsync(long waitTime, long leaseTime, TimeUnit unit, long threadId) {
        long lease = lease(leaseTime, unit);
        return takeAsync(threadId, waitMs(waitTime, unit), lease, h -> h != null);
    }

    /** {@link #unlock()} without blocking, for the calling thread's hold. */
    public CompletableFuture<Void> unlockAsync() {
        return unlockAsync(Thread.currentThread().getId());
    }

    /**
     * {@link #unlock()} without blocking, for the hold of thread {@code threadId} of this
     * client; fails as {@link #unlock()} throws.
     */
    public CompletableFuture<Void> unlockAsync(long threadId) {
        String owner = client.threadOwner(threadId);
        return client.async(() -> {
            throwFor(client.release(name, key, kind, owner), owner);
            return Boolean.TRUE;
        }, b -> null, null);
    }

    /** {@link #unlockAndGetResult()} without blocking, for the hold of thread {@code threadId} of this client. */
    public CompletableFuture<UnlockResult> unlockAndGetResultAsync(long threadId) {
        String owner = client.threadOwner(threadId);
        return client.async(() -> client.release(name, key, kind, owner), r -> r, null);
    }

    /** {@link #forceUnlock()} without blocking. */
    public CompletableFuture<Boolean> forceUnlockAsync() {
        return client.async(this::forceUnlock, b -> b, null);
    }

    /** {@link #isLocked()} without blocking (for the calling thread's hold, the local answer). */
    public CompletableFuture<Boolean> isLockedAsync() {
        if (client.hold(kind, name, owner()) != null) {
            return CompletableFuture.completedFuture(true);
        }
        return client.async(() -> !Replies.holders(client.info(key)).isEmpty(), b -> b, null);
    }

    /** {@link #remainTimeToLive()} without blocking. */
    public CompletableFuture<Long> remainTimeToLiveAsync() {
        return client.async(this::remainTimeToLive, t -> t, null);
    }

    /**
     * The loss signal of the hold of thread {@code threadId} of this client (a hold taken
     * with {@link #lockAsync(long)} or on another thread).
     *
     * @throws IllegalMonitorStateException when that thread has no hold here
     */
    public CompletionStage<LostReason> lostSignal(long threadId) {
        String owner = client.threadOwner(threadId);
        Hold h = client.anyHold(kind, name, owner);
        if (h == null) {
            throw new IllegalMonitorStateException("lock \"" + name + "\" is not held by " + owner);
        }
        return h.lost.minimalCompletionStage();
    }

    /** Not supported (as in Redisson). */
    @Override
    public Condition newCondition() {
        throw new UnsupportedOperationException("dlock locks have no conditions");
    }

    @Override
    public String toString() {
        return "DLock[" + kind.name().toLowerCase(java.util.Locale.ROOT) + " " + name + "]";
    }
}
