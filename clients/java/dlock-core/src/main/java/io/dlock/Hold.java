package io.dlock;

import io.dlock.core.Kind;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.locks.ReentrantLock;

/** One owner's hold of one lock: its token, count, lease and lost signal. */
final class Hold {
    final String mapKey;
    final String name;
    final byte[] key;
    final Kind kind;
    final String owner;
    final long token;
    final long permits;
    /** The lease; changed by an explicit renewal ({@link Dlock#renew}). */
    volatile long leaseMs;
    final boolean watchdog;
    final AtomicInteger count = new AtomicInteger(1);
    final CompletableFuture<LostReason> lost = new CompletableFuture<>();
    final java.util.concurrent.atomic.AtomicBoolean signalled = new java.util.concurrent.atomic.AtomicBoolean();
    final ReentrantLock guard = new ReentrantLock();
    /** When the last confirmed lease started (System.nanoTime of the request). */
    volatile long confirmedNanos;
    long nextRenewNanos;
    ScheduledFuture<?> task;
    volatile boolean ended;
    /** When it was granted (System.nanoTime), for its hold time ({@link DlockObserver}). */
    final long grantedNanos = System.nanoTime();

    Hold(String mapKey, String name, byte[] key, Kind kind, String owner, long token, long permits, long leaseMs,
            boolean watchdog, long confirmedNanos) {
        this.mapKey = mapKey;
        this.name = name;
        this.key = key;
        this.kind = kind;
        this.owner = owner;
        this.token = token;
        this.permits = permits;
        this.leaseMs = leaseMs;
        this.watchdog = watchdog;
        this.confirmedNanos = confirmedNanos;
    }

    /** The safety margin for clock drift over the lease: 1 % + 2 ms, at most half the lease. */
    long marginNanos() {
        long leaseNanos = leaseMs * 1_000_000L;
        return Math.min(leaseNanos / 100 + 2_000_000L, leaseNanos / 2);
    }

    /** When the hold counts as lost without a further confirmed renewal. */
    long lostAtNanos() {
        return confirmedNanos + leaseMs * 1_000_000L - marginNanos();
    }

    /** Ends the hold quietly (released). */
    void finish() {
        ended = true;
        guard.lock();
        try {
            if (task != null) {
                task.cancel(false);
            }
        } finally {
            guard.unlock();
        }
    }
}
