package io.dlock.spring;

import io.dlock.DLock;
import java.time.Duration;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.Lock;
import java.util.concurrent.locks.ReentrantLock;
import org.springframework.scheduling.TaskScheduler;

/**
 * One key's lock. A process-local fair {@link ReentrantLock} records which thread holds it
 * and how often (what {@code unlock} checks); the server's hold (owner
 * {@code clientId:threadId}) is what excludes other threads and processes.
 */
class RegistryLock implements Lock {
    final String name;
    final DLock dlock;
    final ReentrantLock local = new ReentrantLock(true);
    volatile long lockedAt;
    private ScheduledFuture<?> renewal;
    private long generation;
    private final RegistryCore core;

    RegistryLock(RegistryCore core, String path) {
        this.core = core;
        this.name = core.registryKey + ":" + path;
        this.dlock = core.dlock.getLock(name);
    }

    boolean isAcquiredInThisProcess() {
        return local.isLocked();
    }

    private long lease(Duration ttl) {
        if (ttl == null) {
            return core.expireAfterMs;
        }
        if (ttl.toMillis() <= 0) {
            throw new IllegalArgumentException("ttl must be a positive duration, got " + ttl);
        }
        return ttl.toMillis();
    }

    @Override
    public void lock() {
        lock((Duration) null);
    }

    /** Waits for the lock and holds it for {@code ttl} ({@code DistributedLock}'s shape). */
    public void lock(Duration ttl) {
        long lease = lease(ttl);
        local.lock();
        try {
            dlock.lock(lease, TimeUnit.MILLISECONDS);
        } catch (RuntimeException e) {
            local.unlock();
            throw e;
        }
        taken(lease);
    }

    @Override
    public void lockInterruptibly() throws InterruptedException {
        local.lockInterruptibly();
        try {
            dlock.lockInterruptibly(core.expireAfterMs, TimeUnit.MILLISECONDS);
        } catch (InterruptedException | RuntimeException e) {
            local.unlock();
            throw e;
        }
        taken(core.expireAfterMs);
    }

    @Override
    public boolean tryLock() {
        if (!local.tryLock()) {
            return false;
        }
        boolean got = false;
        try {
            got = dlock.tryLock(0, core.expireAfterMs, TimeUnit.MILLISECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        } finally {
            if (!got) {
                local.unlock();
            }
        }
        if (got) {
            taken(core.expireAfterMs);
        }
        return got;
    }

    @Override
    public boolean tryLock(long time, TimeUnit unit) throws InterruptedException {
        return tryLock(Duration.ofNanos(unit.toNanos(time)), null);
    }

    /** Waits up to {@code waitTime} for the lock and holds it for {@code ttl} ({@code DistributedLock}'s shape). */
    public boolean tryLock(Duration waitTime, Duration ttl) throws InterruptedException {
        long lease = lease(ttl);
        long start = System.nanoTime();
        long waitNanos = Math.max(0, waitTime.toNanos());
        if (!local.tryLock(waitNanos, TimeUnit.NANOSECONDS)) {
            return false;
        }
        boolean got = false;
        try {
            long left = Math.max(0, waitNanos - (System.nanoTime() - start));
            got = dlock.tryLock(TimeUnit.NANOSECONDS.toMillis(left), lease, TimeUnit.MILLISECONDS);
        } finally {
            if (!got) {
                local.unlock();
            }
        }
        if (got) {
            taken(lease);
        }
        return got;
    }

    private void taken(long lease) {
        lockedAt = System.currentTimeMillis();
        TaskScheduler scheduler = core.renewalScheduler;
        if (scheduler != null && local.getHoldCount() == 1) {
            long threadId = Thread.currentThread().getId();
            Duration every = Duration.ofMillis(Math.max(1, lease / 3));
            synchronized (this) {
                long gen = ++generation;
                renewal = scheduler.scheduleAtFixedRate(() -> renewFor(threadId, lease, gen), every);
            }
        }
    }

    private void renewFor(long threadId, long lease, long gen) {
        try {
            if (!dlock.renewHeldByThread(threadId, lease, TimeUnit.MILLISECONDS)) {
                stopRenewal(gen);
            }
        } catch (IllegalMonitorStateException e) {
            stopRenewal(gen); // released meanwhile
        } catch (RuntimeException e) {
            // unreachable for now: the next round tries again while the lease lasts
        }
    }

    /** Stops the renewal of hold {@code gen} only (a later hold has its own). */
    synchronized void stopRenewal(long gen) {
        if (gen == generation) {
            stopRenewal();
        }
    }

    synchronized void stopRenewal() {
        if (renewal != null) {
            renewal.cancel(false);
            renewal = null;
        }
    }

    /**
     * Releases one hold of the current thread.
     *
     * @throws IllegalStateException when the current thread does not hold the lock
     * @throws java.util.ConcurrentModificationException when the server no longer had
     *     the hold (its lease ended): what was guarded may have been changed by another
     *     holder, as {@code RedisLockRegistry} reports it
     */
    @Override
    public void unlock() {
        if (!local.isHeldByCurrentThread()) {
            throw new IllegalStateException("you do not own lock \"" + name + "\"");
        }
        try {
            if (local.getHoldCount() == 1) {
                stopRenewal();
            }
            dlock.unlock();
        } catch (IllegalMonitorStateException e) {
            java.util.ConcurrentModificationException ex = new java.util.ConcurrentModificationException(
                    "lock \"" + name + "\" was released on the server by expiry before unlock(): the data it"
                            + " guards may have been changed by another holder");
            ex.initCause(e);
            throw ex;
        } finally {
            local.unlock();
        }
    }

    /** Not supported, as in {@code RedisLockRegistry}. */
    @Override
    public Condition newCondition() {
        throw new UnsupportedOperationException("conditions are not supported by dlock registry locks");
    }

    @Override
    public String toString() {
        return "DlockLockRegistry.Lock[" + name + (isAcquiredInThisProcess() ? ", held in this process" : "")
                + "]";
    }
}
