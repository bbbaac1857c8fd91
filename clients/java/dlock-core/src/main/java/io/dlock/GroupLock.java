package io.dlock;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.Lock;

/**
 * The {@link Lock} methods of a lock made of several {@link DLock}s ({@link DMultiLock},
 * {@link DRedLock}): each is one call of {@link #take}, which says how the group is taken.
 */
abstract sealed class GroupLock implements Lock permits DMultiLock, DRedLock {
    final List<DLock> locks;

    GroupLock(List<DLock> locks) {
        this.locks = locks;
    }

    static long ms(long t, TimeUnit unit) {
        return io.dlock.core.Leases.waitOrForever("waitTime", t, unit);
    }

    static long lease(long t, TimeUnit unit) {
        return io.dlock.core.Leases.leaseOrWatchdog("leaseTime", t, unit);
    }

    /**
     * Takes the group: waits up to {@code waitMs} (negative: without end), each hold with
     * {@code leaseMs} (negative: the watchdog's lease); when {@code interruptible}, an
     * interruption ends the wait with {@link InterruptedException}.
     */
    abstract boolean take(long waitMs, long leaseMs, boolean interruptible) throws InterruptedException;

    @Override
    public void lock() {
        lock(-1, TimeUnit.MILLISECONDS);
    }

    /** Waits without end, each hold with {@code leaseTime} (0 or less: the watchdog's lease, as in Redisson). */
    public void lock(long leaseTime, TimeUnit unit) {
        try {
            take(-1, lease(leaseTime, unit), false);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    @Override
    public void lockInterruptibly() throws InterruptedException {
        take(-1, -1, true);
    }

    @Override
    public boolean tryLock() {
        try {
            return take(0, -1, false);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return false;
        }
    }

    @Override
    public boolean tryLock(long time, TimeUnit unit) throws InterruptedException {
        return take(ms(time, unit), -1, true);
    }

    /** Waits up to {@code waitTime} in all, each hold with {@code leaseTime} (0 or less: the watchdog's lease). */
    public boolean tryLock(long waitTime, long leaseTime, TimeUnit unit) throws InterruptedException {
        return take(ms(waitTime, unit), lease(leaseTime, unit), true);
    }

    /**
     * Waits up to {@code waitTime} ({@code null}: without end) in all, each hold with
     * {@code leaseTime} ({@code null}: the watchdog's lease; else 1 ms to 2^40 ms).
     */
    public boolean tryLock(java.time.Duration waitTime, java.time.Duration leaseTime) throws InterruptedException {
        long lease = io.dlock.core.Leases.lease("leaseTime", leaseTime);
        return take(io.dlock.core.Leases.waitTime("waitTime", waitTime), lease, true);
    }

    /** The fencing tokens of the current thread's holds, in the order of the locks (null where not held). */
    public List<Long> getTokens() {
        List<Long> out = new ArrayList<>(locks.size());
        for (DLock l : locks) {
            out.add(l.getToken());
        }
        return out;
    }

    /** Not supported. */
    @Override
    public Condition newCondition() {
        throw new UnsupportedOperationException("dlock locks have no conditions");
    }
}
