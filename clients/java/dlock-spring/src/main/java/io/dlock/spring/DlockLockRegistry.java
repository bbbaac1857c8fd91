package io.dlock.spring;

import io.dlock.DLock;
import io.dlock.Dlock;
import java.time.Duration;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;
import org.springframework.beans.factory.DisposableBean;
import org.springframework.integration.support.locks.DistributedLock;
import org.springframework.integration.support.locks.ExpirableLockRegistry;
import org.springframework.integration.support.locks.RenewableLockRegistry;
import org.springframework.scheduling.TaskScheduler;

/**
 * A Spring Integration lock registry on dlock, a drop-in for {@code RedisLockRegistry}:
 * {@link #obtain(Object)} gives one {@link DistributedLock} per key (a {@code String}), stored
 * under {@code registryKey + ":" + key}, reentrant per thread, held for {@code expireAfter}
 * (default 60 s) unless renewed, with {@link #expireUnusedOlderThan(long)} and
 * {@link #renewLock(Object)} as {@code RedisLockRegistry} has them.
 *
 * <p>Differences worth knowing: waiting happens on the server (FIFO, one grant per
 * release) instead of polling or pub/sub, so there is no {@code RedisLockType} and no
 * {@code idleBetweenTries}. As in {@code RedisLockRegistry}, threads of one process first
 * take a process-local {@link ReentrantLock} of the key, so one thread per process waits on
 * the server; unlike it, that local lock is fair, so threads are served in the order they
 * asked in the process too (no thread starves while others re-take the lock).
 */
public final class DlockLockRegistry
        implements ExpirableLockRegistry<DistributedLock>, RenewableLockRegistry<DistributedLock>, DisposableBean {

    /** {@code RedisLockRegistry}'s default lease. */
    public static final Duration DEFAULT_EXPIRE_AFTER = Duration.ofSeconds(60);

    private static final int DEFAULT_CAPACITY = 100_000;

    private final Dlock dlock;
    private final String registryKey;
    private final long expireAfterMs;
    private final Object sync = new Object();
    private final Map<String, RegistryLock> locks = new LinkedHashMap<>(16, 0.75F, true) {
        private static final long serialVersionUID = 1L;

        @Override
        protected boolean removeEldestEntry(Map.Entry<String, RegistryLock> eldest) {
            return size() > cacheCapacity;
        }
    };
    private volatile int cacheCapacity = DEFAULT_CAPACITY;
    private volatile TaskScheduler renewalScheduler;

    /** A registry whose locks are held for {@link #DEFAULT_EXPIRE_AFTER} (60 s). */
    public DlockLockRegistry(Dlock dlock, String registryKey) {
        this(dlock, registryKey, DEFAULT_EXPIRE_AFTER);
    }

    /** A registry whose locks are held for {@code expireAfter} ms unless renewed. */
    public DlockLockRegistry(Dlock dlock, String registryKey, long expireAfter) {
        this(dlock, registryKey, Duration.ofMillis(expireAfter));
    }

    /** A registry whose locks are held for {@code expireAfter} unless renewed. */
    public DlockLockRegistry(Dlock dlock, String registryKey, Duration expireAfter) {
        this.dlock = Objects.requireNonNull(dlock, "dlock");
        this.registryKey = Objects.requireNonNull(registryKey, "registryKey");
        if (expireAfter == null || expireAfter.toMillis() <= 0) {
            throw new IllegalArgumentException("expireAfter must be a positive duration, got " + expireAfter);
        }
        this.expireAfterMs = expireAfter.toMillis();
    }

    /** How many unused locks the registry keeps (least recently obtained go first); default 100 000. */
    public void setCacheCapacity(int capacity) {
        if (capacity <= 0) {
            throw new IllegalArgumentException("cache capacity must be > 0, got " + capacity);
        }
        this.cacheCapacity = capacity;
    }

    /**
     * Renews every hold taken after this call every third of its lease until it is
     * unlocked, as {@code RedisLockRegistry} does with a renewal scheduler; null stops that
     * for later holds.
     */
    @Override
    public void setRenewalTaskScheduler(TaskScheduler scheduler) {
        this.renewalScheduler = scheduler;
    }

    /**
     * The lock of {@code lockKey} (a {@code String}): the same object for the same key while
     * it stays in the registry.
     */
    @Override
    public DistributedLock obtain(Object lockKey) {
        String path = checkKey(lockKey);
        synchronized (sync) {
            return locks.computeIfAbsent(path, RegistryLock::new);
        }
    }

    private static String checkKey(Object lockKey) {
        if (!(lockKey instanceof String s)) {
            throw new IllegalArgumentException("lock keys of a DlockLockRegistry must be Strings, got "
                    + (lockKey == null ? "null" : lockKey.getClass().getName()));
        }
        return s;
    }

    /** Forgets locks not held by this process and last taken more than {@code age} ms ago. */
    @Override
    public void expireUnusedOlderThan(long age) {
        long now = System.currentTimeMillis();
        synchronized (sync) {
            Iterator<RegistryLock> it = locks.values().iterator();
            while (it.hasNext()) {
                RegistryLock l = it.next();
                if (now - l.lockedAt > age && !l.isAcquiredInThisProcess()) {
                    it.remove();
                }
            }
        }
    }

    /** Restarts the current thread's hold of {@code lockKey} with the registry's {@code expireAfter}. */
    @Override
    public void renewLock(Object lockKey) {
        renewLock(lockKey, Duration.ofMillis(expireAfterMs));
    }

    /**
     * Restarts the current thread's hold of {@code lockKey} with {@code ttl}.
     *
     * @throws IllegalStateException when the registry has no such lock, the current thread
     *     does not hold it, or the server no longer has the hold
     */
    @Override
    public void renewLock(Object lockKey, Duration ttl) {
        String path = checkKey(lockKey);
        RegistryLock l;
        synchronized (sync) {
            l = locks.get(path);
        }
        if (l == null) {
            throw new IllegalStateException("no lock \"" + path + "\" in registry \"" + registryKey + "\" to renew");
        }
        if (!l.local.isHeldByCurrentThread()) {
            throw new IllegalStateException("the current thread does not hold lock \"" + l.name + "\"");
        }
        boolean renewed;
        try {
            renewed = l.dlock.renew(ttl.toMillis(), TimeUnit.MILLISECONDS);
        } catch (IllegalMonitorStateException e) {
            renewed = false;
        }
        if (!renewed) {
            throw new IllegalStateException("failed to renew lock \"" + l.name + "\": the server no longer has the"
                    + " hold (its lease ended or it was force-released)");
        }
    }

    /** Forgets all locks (holds stay on the server until released or expired). */
    @Override
    public void destroy() {
        synchronized (sync) {
            for (RegistryLock l : locks.values()) {
                l.stopRenewal();
            }
            locks.clear();
        }
    }

    @Override
    public String toString() {
        return "DlockLockRegistry{registryKey='" + registryKey + "', expireAfter=" + expireAfterMs + " ms}";
    }

    /**
     * One key's lock. A process-local fair {@link ReentrantLock} records which thread holds it
     * and how often (what {@code unlock} checks); the server's hold (owner
     * {@code clientId:threadId}) is what excludes other threads and processes.
     */
    private final class RegistryLock implements DistributedLock {
        final String name;
        final DLock dlock;
        final ReentrantLock local = new ReentrantLock(true);
        volatile long lockedAt;
        private ScheduledFuture<?> renewal;
        private long generation;

        RegistryLock(String path) {
            this.name = registryKey + ":" + path;
            this.dlock = DlockLockRegistry.this.dlock.getLock(name);
        }

        boolean isAcquiredInThisProcess() {
            return local.isLocked();
        }

        private long lease(Duration ttl) {
            if (ttl == null) {
                return expireAfterMs;
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

        @Override
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
                dlock.lockInterruptibly(expireAfterMs, TimeUnit.MILLISECONDS);
            } catch (InterruptedException | RuntimeException e) {
                local.unlock();
                throw e;
            }
            taken(expireAfterMs);
        }

        @Override
        public boolean tryLock() {
            if (!local.tryLock()) {
                return false;
            }
            boolean got = false;
            try {
                got = dlock.tryLock(0, expireAfterMs, TimeUnit.MILLISECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            } finally {
                if (!got) {
                    local.unlock();
                }
            }
            if (got) {
                taken(expireAfterMs);
            }
            return got;
        }

        @Override
        public boolean tryLock(long time, TimeUnit unit) throws InterruptedException {
            return tryLock(Duration.ofNanos(unit.toNanos(time)), null);
        }

        @Override
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
            TaskScheduler scheduler = renewalScheduler;
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
}
