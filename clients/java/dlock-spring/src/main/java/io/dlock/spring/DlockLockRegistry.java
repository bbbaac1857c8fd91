package io.dlock.spring;

import io.dlock.Dlock;
import java.time.Duration;
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
 *
 * <p>For Spring Integration 7 (Spring Boot 4); {@link DlockLockRegistry6} is the same
 * registry for Spring Integration 6 (Spring Boot 3), whose {@code LockRegistry} is not
 * generic and has no {@code DistributedLock}.
 */
public final class DlockLockRegistry
        implements ExpirableLockRegistry<DistributedLock>, RenewableLockRegistry<DistributedLock>, DisposableBean {

    /** {@code RedisLockRegistry}'s default lease. */
    public static final Duration DEFAULT_EXPIRE_AFTER = Duration.ofSeconds(60);

    private final RegistryCore core;

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
        this.core = new RegistryCore(dlock, registryKey, expireAfter, Distributed::new);
    }

    /** A registry lock that is Spring Integration 7's {@link DistributedLock}. */
    private static final class Distributed extends RegistryLock implements DistributedLock {
        Distributed(RegistryCore core, String path) {
            super(core, path);
        }
    }

    /** How many unused locks the registry keeps (least recently obtained go first); default 100 000. */
    public void setCacheCapacity(int capacity) {
        core.setCacheCapacity(capacity);
    }

    /**
     * Renews every hold taken after this call every third of its lease until it is
     * unlocked, as {@code RedisLockRegistry} does with a renewal scheduler; null stops that
     * for later holds.
     */
    @Override
    public void setRenewalTaskScheduler(TaskScheduler scheduler) {
        core.renewalScheduler = scheduler;
    }

    /**
     * The lock of {@code lockKey} (a {@code String}): the same object for the same key while
     * it stays in the registry.
     */
    @Override
    public DistributedLock obtain(Object lockKey) {
        return (DistributedLock) core.obtain(lockKey);
    }

    /** Forgets locks not held by this process and last taken more than {@code age} ms ago. */
    @Override
    public void expireUnusedOlderThan(long age) {
        core.expireUnusedOlderThan(age);
    }

    /** Restarts the current thread's hold of {@code lockKey} with the registry's {@code expireAfter}. */
    @Override
    public void renewLock(Object lockKey) {
        core.renewLock(lockKey, Duration.ofMillis(core.expireAfterMs));
    }

    /**
     * Restarts the current thread's hold of {@code lockKey} with {@code ttl}.
     *
     * @throws IllegalStateException when the registry has no such lock, the current thread
     *     does not hold it, or the server no longer has the hold
     */
    @Override
    public void renewLock(Object lockKey, Duration ttl) {
        core.renewLock(lockKey, ttl);
    }

    /** Forgets all locks (holds stay on the server until released or expired). */
    @Override
    public void destroy() {
        core.destroy();
    }

    @Override
    public String toString() {
        return "DlockLockRegistry" + core;
    }
}
