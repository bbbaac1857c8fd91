package io.dlock.spring;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotSame;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.dlock.Dlock;
import io.dlock.DlockConfig;
import io.dlock.spi.Transport;
import io.dlock.testing.RedisServer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.ConcurrentModificationException;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.locks.Lock;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInfo;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.Timeout;
import org.springframework.integration.support.locks.DistributedLock;
import org.springframework.scheduling.concurrent.ThreadPoolTaskScheduler;

/**
 * {@link DlockLockRegistry} against a real server: RedisLockRegistry's behaviour (one lock
 * per key, reentrancy, exclusion between processes, expireAfter, expireUnusedOlderThan,
 * renewLock, a renewal scheduler). Two {@link Dlock} clients stand for two processes.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
@Timeout(value = 60, unit = TimeUnit.SECONDS)
abstract class RegistryContract {
    private RedisServer server;
    private final List<Dlock> clients = new ArrayList<>();
    private String registryKey;

    /** The server binary to run these tests on (null: skip); REDIS_SERVER unless overridden. */
    protected String serverBinary() {
        return RedisServer.redisBinary();
    }

    /** A new transport to host:port. */
    protected abstract Transport transport(String host, int port);

    @BeforeAll
    void startServer() throws Exception {
        String bin = serverBinary();
        Assumptions.assumeTrue(bin != null, "no server binary configured (VALKEY_SERVER unset)");
        server = RedisServer.start(bin);
    }

    @AfterAll
    void stopServer() {
        if (server != null) {
            server.close();
        }
    }

    @BeforeEach
    void name(TestInfo info) {
        registryKey = "reg-" + info.getTestMethod().map(m -> m.getName()).orElse("t");
    }

    @AfterEach
    void closeClients() {
        for (Dlock d : clients) {
            d.close();
        }
        clients.clear();
    }

    private Dlock client() {
        Dlock d = Dlock.create(transport(server.host(), server.port()), new DlockConfig().setWaitSlice(1000));
        clients.add(d);
        return d;
    }

    private DlockLockRegistry registry(Duration expireAfter) {
        return new DlockLockRegistry(client(), registryKey, expireAfter);
    }

    private static <T> T inThread(java.util.concurrent.Callable<T> c) throws Exception {
        ExecutorService ex = Executors.newSingleThreadExecutor();
        try {
            return ex.submit(c).get(30, TimeUnit.SECONDS);
        } finally {
            ex.shutdownNow();
        }
    }

    @Test
    void obtainGivesOneLockPerStringKey() {
        DlockLockRegistry r = registry(DlockLockRegistry.DEFAULT_EXPIRE_AFTER);
        assertSame(r.obtain("a"), r.obtain("a"));
        assertNotSame(r.obtain("a"), r.obtain("b"));
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> r.obtain(42));
        assertTrue(e.getMessage().contains("Strings"), e.getMessage());
        assertThrows(UnsupportedOperationException.class, () -> r.obtain("a").newCondition());
    }

    @Test
    void lockIsStoredUnderTheRegistryKeyAndReentrant() throws Exception {
        DlockLockRegistry r = registry(DlockLockRegistry.DEFAULT_EXPIRE_AFTER);
        Dlock observer = client();
        Lock l = r.obtain("k");
        l.lock();
        l.lock();
        assertTrue(observer.getLock(registryKey + ":k").isLocked());
        List<java.util.Map<String, Object>> holders = io.dlock.core.Replies.holders(
                observer.getLock(registryKey + ":k").info());
        assertEquals(1, holders.size());
        assertEquals(2L, holders.get(0).get("count"), "reentry counts on the server: " + holders);
        l.unlock();
        assertTrue(observer.getLock(registryKey + ":k").isLocked(), "an outer hold remains");
        l.unlock();
        assertFalse(observer.getLock(registryKey + ":k").isLocked());
        assertThrows(IllegalStateException.class, l::unlock);
    }

    @Test
    void excludesAnotherProcessUntilUnlocked() throws Exception {
        DlockLockRegistry a = registry(DlockLockRegistry.DEFAULT_EXPIRE_AFTER);
        DlockLockRegistry b = registry(DlockLockRegistry.DEFAULT_EXPIRE_AFTER);
        Lock la = a.obtain("k");
        la.lock();
        assertFalse(inThread(() -> b.obtain("k").tryLock()));
        assertFalse(inThread(() -> b.obtain("k").tryLock(200, TimeUnit.MILLISECONDS)));
        CompletableFuture<Boolean> waiter = new CompletableFuture<>();
        Thread t = new Thread(() -> {
            try {
                Lock lb = b.obtain("k");
                boolean got = lb.tryLock(20, TimeUnit.SECONDS);
                if (got) {
                    lb.unlock();
                }
                waiter.complete(got);
            } catch (Throwable e) {
                waiter.completeExceptionally(e);
            }
        });
        t.start();
        Thread.sleep(100);
        assertFalse(waiter.isDone());
        la.unlock();
        assertTrue(waiter.get(20, TimeUnit.SECONDS));
        t.join(10_000);
    }

    @Test
    void unlockByAnotherThreadIsRefused() throws Exception {
        DlockLockRegistry r = registry(DlockLockRegistry.DEFAULT_EXPIRE_AFTER);
        Lock l = r.obtain("k");
        l.lock();
        try {
            Throwable e = inThread(() -> {
                try {
                    l.unlock();
                    return null;
                } catch (IllegalStateException ex) {
                    return ex;
                }
            });
            assertTrue(e instanceof IllegalStateException, String.valueOf(e));
            assertFalse(inThread(() -> l.tryLock()), "another thread of this process must not take it");
        } finally {
            l.unlock();
        }
    }

    @Test
    void holdEndsAfterExpireAfterAndLateUnlockReportsIt() throws Exception {
        DlockLockRegistry r = registry(Duration.ofMillis(300));
        DlockLockRegistry other = registry(DlockLockRegistry.DEFAULT_EXPIRE_AFTER);
        Lock l = r.obtain("k");
        l.lock();
        assertTrue(inThread(() -> {
            Lock lo = other.obtain("k");
            boolean got = lo.tryLock(20, TimeUnit.SECONDS);
            lo.unlock();
            return got;
        }), "the 300 ms lease must end");
        assertThrows(ConcurrentModificationException.class, l::unlock);
        assertTrue(inThread(() -> {
            boolean got = l.tryLock();
            if (got) {
                l.unlock();
            }
            return got;
        }), "the local lock is free again after the failed unlock");
    }

    @Test
    void explicitLeaseOfDistributedLock() throws Exception {
        DlockLockRegistry r = registry(DlockLockRegistry.DEFAULT_EXPIRE_AFTER);
        DistributedLock l = r.obtain("k");
        l.lock(Duration.ofMillis(5000));
        long ttl = client().getLock(registryKey + ":k").remainTimeToLive();
        assertTrue(ttl > 0 && ttl <= 5000, "ttl " + ttl);
        l.unlock();
        assertTrue(l.tryLock(Duration.ofSeconds(1), Duration.ofMillis(7000)));
        ttl = client().getLock(registryKey + ":k").remainTimeToLive();
        assertTrue(ttl > 5000 && ttl <= 7000, "ttl " + ttl);
        l.unlock();
    }

    @Test
    void expireUnusedOlderThanForgetsOnlyUnheldLocks() throws Exception {
        DlockLockRegistry r = registry(DlockLockRegistry.DEFAULT_EXPIRE_AFTER);
        Lock free = r.obtain("free");
        free.lock();
        free.unlock();
        Lock held = r.obtain("held");
        held.lock();
        Thread.sleep(20);
        r.expireUnusedOlderThan(10);
        assertNotSame(free, r.obtain("free"));
        assertSame(held, r.obtain("held"));
        r.expireUnusedOlderThan(60_000);
        held.unlock();
    }

    @Test
    void renewLockRestartsTheLease() throws Exception {
        DlockLockRegistry r = registry(Duration.ofMillis(2000));
        Lock l = r.obtain("k");
        assertThrows(IllegalStateException.class, () -> r.renewLock("k"), "not held");
        assertThrows(IllegalStateException.class, () -> r.renewLock("unknown"));
        l.lock();
        try {
            r.renewLock("k", Duration.ofSeconds(30));
            long ttl = client().getLock(registryKey + ":k").remainTimeToLive();
            assertTrue(ttl > 20_000, "ttl " + ttl);
            Throwable e = inThread(() -> {
                try {
                    r.renewLock("k");
                    return null;
                } catch (IllegalStateException ex) {
                    return ex;
                }
            });
            assertTrue(e instanceof IllegalStateException, "another thread cannot renew: " + e);
            r.renewLock("k");
            ttl = client().getLock(registryKey + ":k").remainTimeToLive();
            assertTrue(ttl <= 2000, "ttl " + ttl);
        } finally {
            l.unlock();
        }
    }

    @Test
    void renewalSchedulerKeepsTheHoldPastExpireAfter() throws Exception {
        ThreadPoolTaskScheduler scheduler = new ThreadPoolTaskScheduler();
        scheduler.initialize();
        try {
            Dlock d = client();
            DlockLockRegistry r = new DlockLockRegistry(d, registryKey, Duration.ofMillis(600));
            r.setRenewalTaskScheduler(scheduler);
            DlockLockRegistry other = registry(DlockLockRegistry.DEFAULT_EXPIRE_AFTER);
            Lock l = r.obtain("k");
            l.lock();
            Thread.sleep(2000);
            assertFalse(inThread(() -> other.obtain("k").tryLock()), "renewed past 3 leases");
            assertFalse(d.getLock(registryKey + ":k").lostSignal().toCompletableFuture().isDone(),
                    "each renewal moves the client's lost clock on: no false LEASE_ENDED");
            l.unlock();
            assertTrue(inThread(() -> {
                Lock lo = other.obtain("k");
                boolean got = lo.tryLock();
                lo.unlock();
                return got;
            }));
        } finally {
            scheduler.shutdown();
        }
    }

    @Test
    void mutualExclusionAcrossProcessesAndThreads() throws Exception {
        List<DlockLockRegistry> regs = List.of(registry(DlockLockRegistry.DEFAULT_EXPIRE_AFTER),
                registry(DlockLockRegistry.DEFAULT_EXPIRE_AFTER));
        AtomicInteger inside = new AtomicInteger();
        AtomicInteger violations = new AtomicInteger();
        AtomicInteger done = new AtomicInteger();
        ExecutorService ex = Executors.newFixedThreadPool(8);
        try {
            List<Future<?>> fs = new ArrayList<>();
            for (int i = 0; i < 8; i++) {
                DlockLockRegistry r = regs.get(i % 2);
                fs.add(ex.submit(() -> {
                    for (int n = 0; n < 25; n++) {
                        r.executeLocked("k", () -> {
                            if (inside.incrementAndGet() != 1) {
                                violations.incrementAndGet();
                            }
                            Thread.onSpinWait();
                            inside.decrementAndGet();
                            done.incrementAndGet();
                        });
                    }
                    return null;
                }));
            }
            for (Future<?> f : fs) {
                f.get(50, TimeUnit.SECONDS);
            }
        } finally {
            ex.shutdownNow();
        }
        assertEquals(0, violations.get());
        assertEquals(200, done.get());
    }
}
