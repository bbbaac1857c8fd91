package io.dlock;

import io.dlock.core.Commands;
import io.dlock.core.Kind;
import io.dlock.core.Leases;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.locks.ReentrantLock;

/**
 * One owner's hold of one lock: its token, count, lease clock and lost signal.
 *
 * <p>The lease clock ({@code docs/clients.md}, rule 1): the hold is valid until
 * {@code confirmedNanos + leaseMs − margin}, where {@code confirmedNanos} is when the last
 * acknowledged ACQUIRE or RENEW was sent and {@code leaseMs} the lease it asked for.
 */
final class Hold {
    final String mapKey;
    final String name;
    final byte[] key;
    final byte[] channel;
    final Kind kind;
    final String owner;
    final long token;
    /** The permits it holds (a semaphore grant; a partial release lowers it). */
    volatile long permits;
    /** Whether the watchdog renews it; a reentrant grant without a lease turns it on. */
    volatile boolean watchdog;
    /** The lease each renewal asks for; changed by an explicit renewal ({@link Dlock#renew}). */
    volatile long renewLeaseMs;
    final AtomicInteger count = new AtomicInteger(1);
    final CompletableFuture<LostReason> lost = new CompletableFuture<>();
    final AtomicBoolean signalled = new AtomicBoolean();
    /** Why it was lost, set when its loss signal fired (before the future completes, off the timers' thread). */
    volatile LostReason reason;
    final ReentrantLock guard = new ReentrantLock();
    /** The lease clock: when the last acknowledged lease was sent, and its length. */
    private long confirmedNanos;
    private long leaseMs;
    private volatile long validUntilNanos;
    /** The release of the last count is under way: no more renewals. */
    volatile boolean releasing;
    /** The last notice heard on the lock's channel (the reason if a check finds it gone). */
    volatile LostReason notice;
    /** When the watchdog renews next, and whether a renewal is out (set on the scheduler's thread). */
    volatile long nextRenewNanos;
    volatile boolean renewing;
    /** Guarded by {@code this}: a notice check is out, and another notice came meanwhile. */
    boolean checking;
    boolean recheck;
    /** Guarded by {@link #guard}: the hold's one scheduled task. */
    ScheduledFuture<?> task;
    private final AtomicBoolean ended = new AtomicBoolean();
    /** When it was granted (System.nanoTime), for its hold time ({@link DlockObserver}). */
    final long grantedNanos = System.nanoTime();

    Hold(String mapKey, String name, byte[] key, Kind kind, String owner, long token, long permits, long leaseMs,
            boolean watchdog, long sentNanos) {
        this.mapKey = mapKey;
        this.name = name;
        this.key = key;
        this.channel = Commands.channel(key);
        this.kind = kind;
        this.owner = owner;
        this.token = token;
        this.permits = permits;
        this.renewLeaseMs = leaseMs;
        this.watchdog = watchdog;
        confirm(sentNanos, leaseMs);
    }

    /**
     * A lease of {@code leaseMs} sent at {@code sentNanos} was acknowledged. The server's
     * lease is the one of the request it ran last, so a reply to a request sent before the
     * last acknowledged one changes nothing; a later one sets the clock, even when its lease
     * is shorter (a reentrant grant with a short lease shortens the hold).
     */
    synchronized void confirm(long sentNanos, long leaseMs) {
        if (this.leaseMs != 0 && sentNanos - confirmedNanos < 0) {
            return;
        }
        this.confirmedNanos = sentNanos;
        this.leaseMs = leaseMs;
        this.validUntilNanos = sentNanos + leaseMs * 1_000_000L - Leases.marginNanos(leaseMs);
    }

    /** Until when the hold is valid by the lease clock (System.nanoTime). */
    long validUntilNanos() {
        return validUntilNanos;
    }

    /** When the last acknowledged lease was sent. */
    synchronized long confirmedNanos() {
        return confirmedNanos;
    }

    /** The lease of the last acknowledged request. */
    synchronized long clockLeaseMs() {
        return leaseMs;
    }

    /** Whether the hold is still this client's: not released, lost or closed. */
    boolean live() {
        return !ended.get();
    }

    /** Whether the hold is still this client's and valid by its lease clock now. */
    boolean valid() {
        return !ended.get() && System.nanoTime() - validUntilNanos < 0;
    }

    /**
     * Ends the hold (no more renewals, its task cancelled).
     *
     * @return true when this call ended it, false when it had ended already
     */
    boolean end() {
        if (!ended.compareAndSet(false, true)) {
            return false;
        }
        guard.lock();
        try {
            if (task != null) {
                task.cancel(false);
                task = null;
            }
        } finally {
            guard.unlock();
        }
        return true;
    }
}
