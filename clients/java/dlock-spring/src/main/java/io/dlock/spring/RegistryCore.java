package io.dlock.spring;

import io.dlock.Dlock;
import java.time.Duration;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.TimeUnit;
import java.util.function.BiFunction;
import org.springframework.scheduling.TaskScheduler;

/**
 * What {@link DlockLockRegistry} (Spring Integration 7) and {@link DlockLockRegistry6}
 * (Spring Integration 6) do, written once and naming no Spring Integration type, so that
 * it loads on either: the locks by key, their expiry from the registry, renewal.
 */
final class RegistryCore {
    private static final int DEFAULT_CAPACITY = 100_000;

    final Dlock dlock;
    final String registryKey;
    final long expireAfterMs;
    private final BiFunction<RegistryCore, String, RegistryLock> newLock;
    private final Object sync = new Object();
    private final Map<String, RegistryLock> locks = new LinkedHashMap<>(16, 0.75F, true) {
        private static final long serialVersionUID = 1L;

        @Override
        protected boolean removeEldestEntry(Map.Entry<String, RegistryLock> eldest) {
            return size() > cacheCapacity;
        }
    };
    private volatile int cacheCapacity = DEFAULT_CAPACITY;
    volatile TaskScheduler renewalScheduler;

    RegistryCore(Dlock dlock, String registryKey, Duration expireAfter,
            BiFunction<RegistryCore, String, RegistryLock> newLock) {
        this.dlock = Objects.requireNonNull(dlock, "dlock");
        this.registryKey = Objects.requireNonNull(registryKey, "registryKey");
        if (expireAfter == null || expireAfter.toMillis() <= 0) {
            throw new IllegalArgumentException("expireAfter must be a positive duration, got " + expireAfter);
        }
        this.expireAfterMs = expireAfter.toMillis();
        this.newLock = newLock;
    }

    void setCacheCapacity(int capacity) {
        if (capacity <= 0) {
            throw new IllegalArgumentException("cache capacity must be > 0, got " + capacity);
        }
        this.cacheCapacity = capacity;
    }

    RegistryLock obtain(Object lockKey) {
        String path = checkKey(lockKey);
        synchronized (sync) {
            return locks.computeIfAbsent(path, p -> newLock.apply(this, p));
        }
    }

    private static String checkKey(Object lockKey) {
        if (!(lockKey instanceof String s)) {
            throw new IllegalArgumentException("lock keys of a DlockLockRegistry must be Strings, got "
                    + (lockKey == null ? "null" : lockKey.getClass().getName()));
        }
        return s;
    }

    void expireUnusedOlderThan(long age) {
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

    void renewLock(Object lockKey, Duration ttl) {
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

    void destroy() {
        synchronized (sync) {
            for (RegistryLock l : locks.values()) {
                l.stopRenewal();
            }
            locks.clear();
        }
    }

    @Override
    public String toString() {
        return "{registryKey='" + registryKey + "', expireAfter=" + expireAfterMs + " ms}";
    }
}
