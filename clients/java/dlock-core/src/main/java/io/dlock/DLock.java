package io.dlock;

import io.dlock.core.Commands;
import io.dlock.core.Kind;
import io.dlock.core.Replies;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletionStage;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.Lock;

/**
 * A lock held by a thread: a reentrant mutex, a fair mutex, or one mode of a read-write
 * lock. Redisson's {@code RLock} shapes on {@link Lock}: {@code lock()} without a lease
 * takes the watchdog's lease (30 s) and renews it every 10 s until {@link #unlock()};
 * {@code lock(leaseTime, unit)} holds for that lease with no renewal.
 *
 * <p>Every grant carries a fencing token ({@link #getToken()}); a hold that ends without
 * its owner's release completes its {@link #lostSignal()}.
 */
public class DLock implements Lock {
    private final Dlock client;
    private final String name;
    private final byte[] key;
    private final Kind kind;
    private final LockOptions options;

    DLock(Dlock client, String name, Kind kind, LockOptions options) {
        this.client = client;
        this.name = java.util.Objects.requireNonNull(name, "name");
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

    private static long ms(long time, TimeUnit unit) {
        return time < 0 ? -1 : unit.toMillis(time);
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

    /** Waits for the lock and holds it for {@code leaseTime} (no renewal); a negative lease: the watchdog's. */
    public void lock(long leaseTime, TimeUnit unit) {
        takeUninterruptibly(-1, ms(leaseTime, unit));
    }

    /** Waits for the lock until interrupted; an interrupt leaves no hold and no queue place. */
    @Override
    public void lockInterruptibly() throws InterruptedException {
        take(-1, -1, true);
    }

    /** {@link #lockInterruptibly()} with a lease (no renewal). */
    public void lockInterruptibly(long leaseTime, TimeUnit unit) throws InterruptedException {
        take(-1, ms(leaseTime, unit), true);
    }

    /** Takes the lock if it is free now (one round trip), with the watchdog's lease. */
    @Override
    public boolean tryLock() {
        return takeUninterruptibly(0, -1) != null;
    }

    /** Waits up to {@code time} for the lock, with the watchdog's lease. */
    @Override
    public boolean tryLock(long time, TimeUnit unit) throws InterruptedException {
        return take(ms(time, unit), -1, true) != null;
    }

    /**
     * Waits up to {@code waitTime} (negative: without end) and holds for {@code leaseTime}
     * (negative: the watchdog's lease, renewed).
     */
    public boolean tryLock(long waitTime, long leaseTime, TimeUnit unit) throws InterruptedException {
        return take(ms(waitTime, unit), ms(leaseTime, unit), true) != null;
    }

    /** {@link #lock()} and return the hold's fencing token. */
    public long lockAndGetToken() {
        return takeUninterruptibly(-1, -1).token;
    }

    /** {@link #lock(long, TimeUnit)} and return the hold's fencing token. */
    public long lockAndGetToken(long leaseTime, TimeUnit unit) {
        return takeUninterruptibly(-1, ms(leaseTime, unit)).token;
    }

    /** {@link #tryLock(long, long, TimeUnit)} returning the fencing token, or null when not acquired. */
    public Long tryLockAndGetToken(long waitTime, long leaseTime, TimeUnit unit) throws InterruptedException {
        Hold h = take(ms(waitTime, unit), ms(leaseTime, unit), true);
        return h == null ? null : h.token;
    }

    /** The fencing token of the current thread's hold, or null when it holds none. */
    public Long getToken() {
        Hold h = client.hold(kind, name, owner());
        return h == null ? null : h.token;
    }

    /**
     * Completes with the reason when the current thread's hold ends without its release
     * (lease ended, renewal refused, server unreachable past the lease).
     *
     * @throws IllegalMonitorStateException when the current thread holds nothing
     */
    public CompletionStage<LostReason> lostSignal() {
        Hold h = client.hold(kind, name, owner());
        if (h == null) {
            throw new IllegalMonitorStateException("lock \"" + name + "\" is not held by the current thread ("
                    + owner() + ")");
        }
        return h.lost.minimalCompletionStage();
    }

    /**
     * Releases one hold of the current thread.
     *
     * @throws IllegalMonitorStateException when the thread does not hold the lock (never
     *     did, or its lease ended or it was force-released)
     */
    @Override
    public void unlock() {
        client.release(name, key, kind, owner());
    }

    /**
     * Renews the current thread's hold to {@code leaseTime} from now ({@code DLOCK.RENEW});
     * false when the server no longer has it (its lost signal completes).
     *
     * @throws IllegalMonitorStateException when the current thread holds nothing
     */
    public boolean renew(long leaseTime, TimeUnit unit) {
        return client.renew(name, key, kind, owner(), unit.toMillis(leaseTime));
    }

    /** {@link #renew(long, TimeUnit)} for the hold of thread {@code threadId} of this client. */
    public boolean renewHeldByThread(long threadId, long leaseTime, TimeUnit unit) {
        return client.renew(name, key, kind, client.getId() + ":" + threadId, unit.toMillis(leaseTime));
    }

    /** Removes the lock whatever its holders; true when there was one. Redisson's {@code forceUnlock}. */
    public boolean forceUnlock() {
        return Replies.integer(client.call(key, Commands.forceRelease(key)), "DLOCK.FORCERELEASE") == 1;
    }

    /** Whether anyone holds the lock (in any mode). */
    public boolean isLocked() {
        return !Replies.holders(client.info(key)).isEmpty();
    }

    /** Whether the current thread holds the lock (in this lock's mode), as the server says. */
    public boolean isHeldByCurrentThread() {
        return getHoldCount() > 0;
    }

    /** Whether thread {@code threadId} of this client holds the lock. */
    public boolean isHeldByThread(long threadId) {
        return countOf(client.getId() + ":" + threadId) > 0;
    }

    /** How many times the current thread holds the lock (0 when not), as the server says. */
    public int getHoldCount() {
        return countOf(owner());
    }

    private int countOf(String owner) {
        for (Map<String, Object> h : Replies.holders(client.info(key))) {
            if (owner.equals(h.get("owner")) && modeMatches(h.get("mode"))) {
                Object c = h.get("count");
                return c instanceof Long l ? (int) Math.min(l, Integer.MAX_VALUE) : 1;
            }
        }
        return 0;
    }

    private boolean modeMatches(Object mode) {
        if (kind.mode() == null || !(mode instanceof String m)) {
            return true;
        }
        String want = kind == Kind.READ ? "read" : "write";
        return m.toLowerCase(java.util.Locale.ROOT).startsWith(want)
                || (kind == Kind.WRITE && m.equalsIgnoreCase("exclusive"))
                || (kind == Kind.READ && m.equalsIgnoreCase("shared"));
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
