package io.dlock.spring;

import io.dlock.Dlock;
import java.time.Duration;
import java.util.concurrent.locks.Lock;
import java.util.concurrent.locks.ReentrantLock;
import org.springframework.beans.factory.DisposableBean;
import org.springframework.integration.support.locks.ExpirableLockRegistry;
import org.springframework.integration.support.locks.RenewableLockRegistry;
import org.springframework.scheduling.TaskScheduler;

/**
 * {@link DlockLockRegistry} for Spring Integration 6.x (Spring Boot 3), whose
 * {@code LockRegistry} is not generic and has no {@code DistributedLock}: the same
 * registry (same keys, leases, local fair lock, renewal), whose {@link #obtain(Object)}
 * gives a plain {@link Lock}. It loads on Spring Integration 7 too, but there
 * {@link DlockLockRegistry} is the one to use.
 */
@SuppressWarnings("rawtypes") // Spring Integration 6's interfaces have no type parameter
public final class DlockLockRegistry6 implements ExpirableLockRegistry, RenewableLockRegistry, DisposableBean {

    /** {@code RedisLockRegistry}'s default lease. */
    public static final Duration DEFAULT_EXPIRE_AFTER = DlockLockRegistry.DEFAULT_EXPIRE_AFTER;

    private final RegistryCore core;

    /** A registry whose locks are held for {@link #DEFAULT_EXPIRE_AFTER} (60 s). */
    public DlockLockRegistry6(Dlock dlock, String registryKey) {
        this(dlock, registryKey, DEFAULT_EXPIRE_AFTER);
    }

    /** A registry whose locks are held for {@code expireAfter} unless renewed. */
    public DlockLockRegistry6(Dlock dlock, String registryKey, Duration expireAfter) {
        this.core = new RegistryCore(dlock, registryKey, expireAfter, RegistryLock::new);
    }

    /** How many unused locks the registry keeps (least recently obtained go first); default 100 000. */
    public void setCacheCapacity(int capacity) {
        core.setCacheCapacity(capacity);
    }

    /** As {@link DlockLockRegistry#setRenewalTaskScheduler}. */
    @Override
    public void setRenewalTaskScheduler(TaskScheduler scheduler) {
        core.renewalScheduler = scheduler;
    }

    /**
     * The lock of {@code lockKey} (a {@code String}): the same object for the same key while
     * it stays in the registry.
     */
    @Override
    public Lock obtain(Object lockKey) {
        return core.obtain(lockKey);
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

    /** Restarts the current thread's hold of {@code lockKey} with {@code ttl} (as {@link DlockLockRegistry#renewLock(Object, Duration)}). */
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
        return "DlockLockRegistry6" + core;
    }
}
