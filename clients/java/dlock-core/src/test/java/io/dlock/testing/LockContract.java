package io.dlock.testing;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import io.dlock.DCountDownLatch;
import io.dlock.DLock;
import io.dlock.DReadWriteLock;
import io.dlock.DSemaphore;
import io.dlock.DeadlockException;
import io.dlock.Dlock;
import io.dlock.DlockConfig;
import io.dlock.LockOptions;
import io.dlock.LostReason;
import io.dlock.NotDurableException;
import io.dlock.UnknownCommandException;
import io.dlock.core.Commands;
import io.dlock.spi.Transport;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInfo;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.Timeout;

/**
 * The behaviour every transport must show, against a real server with the module. A
 * transport's test subclasses this once per server binary and supplies a transport.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
@Timeout(value = 60, unit = TimeUnit.SECONDS)
public abstract class LockContract {
    protected RedisServer server;
    protected Dlock client;
    private final List<Dlock> extra = new ArrayList<>();
    private String prefix;

    /** The server binary to run these tests on (null: skip); REDIS_SERVER unless overridden. */
    protected String serverBinary() {
        return RedisServer.redisBinary();
    }

    /** A new transport to the server at host:port. */
    protected abstract Transport transport(String host, int port);

    /** Whether to run the server as a one-node Redis Cluster. */
    protected boolean cluster() {
        return false;
    }

    @BeforeAll
    void startServer() throws Exception {
        String bin = serverBinary();
        Assumptions.assumeTrue(bin != null, "no server binary configured (VALKEY_SERVER unset)");
        server = cluster() ? RedisServer.startCluster(bin) : RedisServer.start(bin);
    }

    @AfterAll
    void stopServer() {
        if (server != null) {
            server.close();
        }
    }

    @BeforeEach
    void newClient(TestInfo info) {
        prefix = info.getTestMethod().map(m -> m.getName()).orElse("t") + ":";
        client = newDlock(new DlockConfig().setWaitSlice(1000));
    }

    @AfterEach
    void closeClients() {
        for (Dlock d : extra) {
            d.close();
        }
        extra.clear();
    }

    protected Dlock newDlock(DlockConfig config) {
        Dlock d = Dlock.create(transport(server.host(), server.port()), config);
        extra.add(d);
        return d;
    }

    protected String key(String k) {
        return prefix + k;
    }

    /**
     * Runs {@code s} on a new daemon thread (never the common pool, whose few workers
     * would make blocking test tasks wait for each other).
     */
    protected static <T> CompletableFuture<T> async(java.util.function.Supplier<T> s) {
        return CompletableFuture.supplyAsync(s, r -> {
            Thread t = new Thread(r, "test-task");
            t.setDaemon(true);
            t.start();
        });
    }

    private static <T> T inThread(java.util.concurrent.Callable<T> c) throws Exception {
        CompletableFuture<T> f = new CompletableFuture<>();
        Thread t = new Thread(() -> {
            try {
                f.complete(c.call());
            } catch (Throwable e) {
                f.completeExceptionally(e);
            }
        });
        t.start();
        try {
            return f.get(30, TimeUnit.SECONDS);
        } catch (ExecutionException e) {
            if (e.getCause() instanceof Exception ex) {
                throw ex;
            }
            throw e;
        }
    }

    @Test
    void lockIsReentrantAndFenced() throws Exception {
        DLock lock = client.getLock(key("a"));
        assertFalse(lock.isLocked());
        long t1 = lock.lockAndGetToken();
        assertTrue(t1 > 0);
        lock.lock();
        assertEquals(t1, lock.getToken());
        assertEquals(2, lock.getHoldCount());
        assertTrue(lock.isHeldByCurrentThread());
        assertTrue(lock.isLocked());
        assertTrue(lock.checkToken(t1));
        assertFalse(LockContract.<Boolean>inThread(lock::isHeldByCurrentThread));
        assertFalse(LockContract.<Boolean>inThread(lock::tryLock));
        lock.unlock();
        assertTrue(lock.isLocked());
        lock.unlock();
        assertFalse(lock.isLocked());
        assertNull(lock.getToken());
        Long t2 = inThread(() -> lock.tryLockAndGetToken(0, 10, TimeUnit.SECONDS));
        assertNotNull(t2);
        assertTrue(t2 > t1, "tokens grow: " + t2 + " > " + t1);
        assertTrue(lock.forceUnlock());
        assertEquals(-2, lock.remainTimeToLive());
    }

    @Test
    void unlockByAnotherThreadIsRefused() throws Exception {
        DLock lock = client.getLock(key("a"));
        lock.lock();
        Exception e = assertThrows(IllegalMonitorStateException.class, () -> inThread(() -> {
            lock.unlock();
            return null;
        }));
        assertTrue(e.getMessage().contains("not locked by current thread"), e.getMessage());
        lock.unlock();
        assertThrows(IllegalMonitorStateException.class, lock::unlock);
    }

    @Test
    void tryLockWaitsOnTheServerAndGetsItOnRelease() throws Exception {
        DLock lock = client.getLock(key("a"));
        lock.lock();
        CountDownLatch started = new CountDownLatch(1);
        CompletableFuture<Boolean> got = async(() -> {
            started.countDown();
            try {
                boolean ok = lock.tryLock(20, TimeUnit.SECONDS);
                if (ok) {
                    lock.unlock();
                }
                return ok;
            } catch (InterruptedException e) {
                throw new IllegalStateException(e);
            }
        });
        started.await();
        Thread.sleep(300);
        lock.unlock();
        assertTrue(got.get(20, TimeUnit.SECONDS));
        // a timed-out try returns false after about its wait
        lock.lock();
        long t0 = System.nanoTime();
        assertFalse(LockContract.<Boolean>inThread(() -> lock.tryLock(300, TimeUnit.MILLISECONDS)));
        long took = (System.nanoTime() - t0) / 1_000_000;
        assertTrue(took >= 250 && took < 5000, "took " + took + " ms");
        lock.unlock();
    }

    @Test
    void watchdogRenewsUntilUnlock() throws Exception {
        Dlock d = newDlock(new DlockConfig().setLockWatchdogTimeout(900).setWaitSlice(1000));
        DLock lock = d.getLock(key("w"));
        lock.lock();
        Thread.sleep(2500);
        assertTrue(lock.isHeldByCurrentThread(), "renewed past three leases");
        assertTrue(lock.remainTimeToLive() > 0);
        lock.unlock();
        assertFalse(lock.isLocked());
    }

    @Test
    void explicitLeaseEndsAndSignalsLost() throws Exception {
        DLock lock = client.getLock(key("l"));
        AtomicReference<LostReason> heard = new AtomicReference<>();
        client.addLostListener((name, owner, token, reason) -> heard.set(reason));
        lock.lock(300, TimeUnit.MILLISECONDS);
        LostReason r = lock.lostSignal().toCompletableFuture().get(10, TimeUnit.SECONDS);
        assertEquals(LostReason.EXPIRED, r);
        assertEquals(LostReason.EXPIRED, heard.get());
        awaitFree(key("l")); // the signal comes a margin before the server's lease end
        assertThrows(IllegalMonitorStateException.class, lock::unlock);
        assertTrue(LockContract.<Boolean>inThread(() -> lock.tryLock(10, TimeUnit.SECONDS)));
    }

    @Test
    void forceReleaseIsReported() throws Exception {
        Dlock d = newDlock(new DlockConfig().setLockWatchdogTimeout(1500).setWaitSlice(1000));
        DLock lock = d.getLock(key("f"));
        lock.lock();
        CompletableFuture<LostReason> lost = lock.lostSignal().toCompletableFuture();
        assertTrue(client.getLock(key("f")).forceUnlock());
        // FORCED from the lock's notice; NOT_HELD when the notice came before the subscription
        LostReason r = lost.get(10, TimeUnit.SECONDS);
        assertTrue(r == LostReason.FORCED || r == LostReason.NOT_HELD, String.valueOf(r));
        Exception e = assertThrows(IllegalMonitorStateException.class, lock::unlock);
        assertNotNull(e.getMessage());
    }

    @Test
    void interruptedLockInterruptiblyLeavesNothing() throws Exception {
        // slices of 10 s: an answer within 2.5 s comes from DLOCK.CANCEL, not a slice's end
        DLock lock = newDlock(new DlockConfig().setWaitSlice(10_000)).getLock(key("i"));
        lock.lock();
        AtomicReference<Throwable> outcome = new AtomicReference<>();
        CountDownLatch done = new CountDownLatch(1);
        Thread waiter = new Thread(() -> {
            try {
                lock.lockInterruptibly();
                outcome.set(new AssertionError("granted while held"));
            } catch (Throwable e) {
                outcome.set(e);
            }
            done.countDown();
        });
        waiter.start();
        awaitWaiters(key("i"), 1);
        long t0 = System.nanoTime();
        waiter.interrupt();
        assertTrue(done.await(30, TimeUnit.SECONDS));
        long took = (System.nanoTime() - t0) / 1_000_000;
        assertTrue(outcome.get() instanceof InterruptedException, String.valueOf(outcome.get()));
        if (server.hasCancel()) {
            assertTrue(took < 2500, "interrupt answered in " + took + " ms");
            // The DLOCK.CANCEL runs in the background: on a loaded machine an unlock right
            // after the interrupt could still hand the lock to the place it frees.
            awaitNoWaiters(key("i"));
        }
        lock.unlock();
        assertFalse(lock.isLocked(), "the interrupted waiter holds nothing");
    }

    /** Waits (up to 20 s) until no connection waits on {@code name}. */
    private void awaitNoWaiters(String name) throws InterruptedException {
        long deadline = System.nanoTime() + 20_000_000_000L;
        while (System.nanoTime() < deadline) {
            var info = client.getLock(name).info();
            if (info == null || !(info.get("waiters") instanceof List<?> w) || w.isEmpty()) {
                return;
            }
            Thread.sleep(10);
        }
        fail("the interrupted waiter's place on " + name + " was never freed");
    }

    /** A timed-out fair tryLock gives its place up: the next owner is served at once, not after 5 s. */
    @Test
    void timedOutFairTryLockFreesItsPlace() throws Exception {
        Assumptions.assumeTrue(server.hasCancel(), "the module at DLOCK_MODULE has no DLOCK.CANCEL");
        DLock fair = client.getFairLock(key("fair"));
        fair.lock();
        assertFalse(LockContract.<Boolean>inThread(() -> fair.tryLock(200, TimeUnit.MILLISECONDS)));
        assertFalse(LockContract.<Boolean>inThread(fair::tryLock), "an immediate try also gives its place up");
        fair.unlock();
        long t0 = System.nanoTime();
        assertTrue(LockContract.<Boolean>inThread(() -> {
            boolean ok = fair.tryLock(10, TimeUnit.SECONDS);
            fair.unlock();
            return ok;
        }));
        long took = (System.nanoTime() - t0) / 1_000_000;
        assertTrue(took < 2500, "next owner granted after " + took + " ms (the place would time out after 5 s)");
    }

    @Test
    void fairLockServesInArrivalOrder() throws Exception {
        DLock fair = client.getFairLock(key("order"));
        fair.lock();
        List<Integer> order = java.util.Collections.synchronizedList(new ArrayList<>());
        List<Thread> ts = new ArrayList<>();
        for (int i = 0; i < 3; i++) {
            final int n = i;
            Thread t = new Thread(() -> {
                try {
                    if (fair.tryLock(20, TimeUnit.SECONDS)) {
                        order.add(n);
                        fair.unlock();
                    }
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            });
            t.start();
            awaitWaiters(key("order"), i + 1);
            ts.add(t);
        }
        fair.unlock();
        for (Thread t : ts) {
            t.join(20_000);
        }
        assertEquals(List.of(0, 1, 2), order);
    }

    @Test
    void readWriteLock() throws Exception {
        DReadWriteLock rw = client.getReadWriteLock(key("rw"));
        rw.readLock().lock();
        assertTrue(LockContract.<Boolean>inThread(() -> {
            boolean ok = rw.readLock().tryLock();
            rw.readLock().unlock();
            return ok;
        }), "readers share");
        assertFalse(LockContract.<Boolean>inThread(() -> rw.writeLock().tryLock()), "a writer waits for readers");
        rw.writeLock().lock(); // the only reader upgrades
        assertTrue(rw.writeLock().isHeldByCurrentThread());
        assertFalse(LockContract.<Boolean>inThread(() -> rw.readLock().tryLock()));
        rw.writeLock().unlock();
        rw.readLock().unlock();
        assertFalse(rw.writeLock().isLocked());
    }

    @Test
    void semaphorePermitsWithLeases() throws Exception {
        DSemaphore s = client.getSemaphore(key("s"), 2);
        String a = s.acquire();
        String b = s.tryAcquire(1, 10, TimeUnit.SECONDS);
        assertNotNull(b);
        assertNull(s.tryAcquire());
        assertEquals(0, s.availablePermits());
        assertNotNull(s.getToken(a));
        s.release(a);
        assertEquals(1, s.availablePermits());
        String c = s.tryAcquire(1, 300, TimeUnit.MILLISECONDS);
        assertNotNull(c);
        assertEquals(LostReason.EXPIRED, s.lostSignal(c).toCompletableFuture().get(10, TimeUnit.SECONDS));
        awaitAvailable(s, 1); // the signal comes a margin before the server's lease end
        assertThrows(IllegalArgumentException.class, () -> s.release(c));
        s.release(b);
    }

    @Test
    void countDownLatch() throws Exception {
        DCountDownLatch latch = client.getCountDownLatch(key("latch"));
        assertTrue(latch.trySetCount(2));
        assertFalse(latch.trySetCount(5));
        assertEquals(2, latch.getCount());
        CompletableFuture<Boolean> waiter = async(() -> {
            try {
                return latch.await(20, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                throw new IllegalStateException(e);
            }
        });
        latch.countDown();
        assertFalse(latch.await(100, TimeUnit.MILLISECONDS));
        latch.countDown();
        assertTrue(waiter.get(20, TimeUnit.SECONDS));
        assertEquals(0, latch.getCount());
    }

    @Test
    void deadlockCarriesTheCycle() throws Exception {
        DLock a = client.getLock(key("{d}a"));
        DLock b = client.getLock(key("{d}b"));
        CountDownLatch held = new CountDownLatch(2);
        CountDownLatch go = new CountDownLatch(1);
        Future<Object> one = async(() -> cross(a, b, held, go));
        Future<Object> two = async(() -> cross(b, a, held, go));
        go.countDown();
        Object r1 = one.get(30, TimeUnit.SECONDS);
        Object r2 = two.get(30, TimeUnit.SECONDS);
        DeadlockException d = r1 instanceof DeadlockException x ? x : r2 instanceof DeadlockException y ? y : null;
        assertNotNull(d, "one side is refused with DEADLOCK: " + r1 + " / " + r2);
        assertEquals(2, d.cycle().size(), d.getMessage());
        assertTrue(d.keys().contains(key("{d}a")) && d.keys().contains(key("{d}b")), d.keys().toString());
    }

    private static Object cross(DLock first, DLock second, CountDownLatch held, CountDownLatch go) {
        try {
            first.lock();
            held.countDown();
            held.await();
            go.await();
            try {
                boolean ok = second.tryLock(15, TimeUnit.SECONDS);
                if (ok) {
                    second.unlock();
                }
                return ok;
            } catch (DeadlockException e) {
                return e;
            } finally {
                first.unlock();
            }
        } catch (InterruptedException e) {
            return e;
        }
    }

    @Test
    protected void durableGrantWithoutReplicasIsRefusedAndReleased() throws Exception {
        DLock lock = client.getLock(key("dur"), LockOptions.DEFAULT.withReplicas(1, 100));
        NotDurableException e = assertThrows(NotDurableException.class, lock::lock);
        assertEquals(0, e.acked());
        assertFalse(lock.isLocked());
    }

    @Test
    void lockDelayKeepsExcludingAfterTheLease() throws Exception {
        DLock lock = client.getLock(key("delay"), LockOptions.DEFAULT.withLockDelay(1500));
        lock.lock(200, TimeUnit.MILLISECONDS);
        lock.lostSignal().toCompletableFuture().get(10, TimeUnit.SECONDS);
        assertFalse(LockContract.<Boolean>inThread(lock::tryLock), "the lock-delay still excludes");
        assertTrue(LockContract.<Boolean>inThread(() -> {
            boolean ok = lock.tryLock(10, TimeUnit.SECONDS);
            lock.unlock();
            return ok;
        }));
    }

    @Test
    void unknownCommandSaysToLoadTheModule() {
        byte[] k = Commands.bytes(key("x"));
        UnknownCommandException e = assertThrows(UnknownCommandException.class,
                () -> client.getTransport().call(k, new byte[][] {Commands.bytes("DLOCK.NOSUCH"), k}));
        assertTrue(e.getMessage().contains("is the dlock module loaded?"), e.getMessage());
    }

    @Test
    void manyThreadsOneLock() throws Exception {
        DLock lock = client.getLock(key("many"));
        int[] counter = {0};
        List<Thread> ts = new ArrayList<>();
        for (int i = 0; i < 8; i++) {
            Thread t = new Thread(() -> {
                for (int j = 0; j < 20; j++) {
                    lock.lock();
                    try {
                        counter[0]++;
                    } finally {
                        lock.unlock();
                    }
                }
            });
            t.start();
            ts.add(t);
        }
        for (Thread t : ts) {
            t.join(50_000);
        }
        assertEquals(160, counter[0]);
    }

    /**
     * Many virtual threads wait for one lock at once. Surefire runs the JVM with two carrier
     * threads at most, so a wait that pinned its carrier would stall the holder's unlock and
     * time the test out. Skipped on a JVM without virtual threads (Java 17).
     */
    @Test
    void virtualThreadsWaitWithoutPinning() throws Exception {
        java.lang.reflect.Method start;
        try {
            start = Thread.class.getMethod("startVirtualThread", Runnable.class);
        } catch (NoSuchMethodException e) {
            Assumptions.abort("no virtual threads on Java " + Runtime.version().feature());
            return;
        }
        DLock lock = client.getFairLock(key("virtual"));
        int n = 24;
        CountDownLatch done = new CountDownLatch(n);
        int[] counter = {0};
        List<Throwable> errors = java.util.Collections.synchronizedList(new ArrayList<>());
        lock.lock();
        for (int i = 0; i < n; i++) {
            start.invoke(null, (Runnable) () -> {
                try {
                    if (lock.tryLock(30, TimeUnit.SECONDS)) {
                        try {
                            counter[0]++;
                        } finally {
                            lock.unlock();
                        }
                    } else {
                        errors.add(new AssertionError("timed out"));
                    }
                } catch (Throwable e) {
                    errors.add(e);
                }
                done.countDown();
            });
        }
        awaitWaiters(key("virtual"), 6); // Jedis: 7 pooled connections wait on the server at most
        lock.unlock();
        assertTrue(done.await(40, TimeUnit.SECONDS), "virtual waiters finished");
        assertEquals(List.of(), errors);
        assertEquals(n, counter[0]);
    }

    @Test
    void multiLockAllOrNone() throws Exception {
        DLock a = client.getLock(key("{m}a"));
        DLock b = client.getLock(key("{m}b"));
        io.dlock.DMultiLock multi = client.getMultiLock(b, a);
        assertEquals(List.of(a.getName(), b.getName()), multi.getLocks().stream().map(DLock::getName).toList());
        b.lock();
        assertFalse(LockContract.<Boolean>inThread(() -> multi.tryLock(200, TimeUnit.MILLISECONDS)));
        assertFalse(a.isLocked(), "the failed attempt gave back what it took");
        b.unlock();
        assertTrue(multi.tryLock(5, TimeUnit.SECONDS));
        assertTrue(multi.isHeldByCurrentThread());
        assertTrue(multi.getTokens().stream().allMatch(t -> t != null && t > 0));
        multi.unlock();
        assertFalse(a.isLocked() || b.isLocked());
    }

    @Test
    void redLockNeedsAMajority() throws Exception {
        List<DLock> nodes = new ArrayList<>();
        for (int i = 0; i < 3; i++) {
            nodes.add(newDlock(new DlockConfig().setWaitSlice(1000)).getLock(key("red" + i)));
        }
        io.dlock.DRedLock red = client.getRedLock(nodes.toArray(new DLock[0]));
        assertEquals(2, red.quorum());
        DLock other = client.getLock(key("red0"));
        inThread(() -> other.tryLock(0, 30, TimeUnit.SECONDS));
        assertTrue(red.tryLock(1, 10, TimeUnit.SECONDS), "two of three is a majority");
        red.unlock();
        DLock other2 = client.getLock(key("red1"));
        inThread(() -> other2.tryLock(0, 30, TimeUnit.SECONDS));
        assertFalse(red.tryLock(300, 10_000, TimeUnit.MILLISECONDS), "one of three is not");
        assertFalse(nodes.get(2).isLocked(), "the minority grant was given back");
        other.forceUnlock();
        other2.forceUnlock();
    }

    @Test
    void runOnceSkipsWhileHeldAndKeepsAtLeastFor() throws Exception {
        java.time.Duration most = java.time.Duration.ofSeconds(10);
        io.dlock.RunOnce.Result<String> r = io.dlock.RunOnce.run(client, key("{job}"), most, java.time.Duration.ZERO,
                false, ctx -> {
                    assertTrue(ctx.check());
                    var inner = io.dlock.RunOnce.run(client, key("{job}"), most, java.time.Duration.ZERO, false,
                            c -> "never");
                    assertEquals(io.dlock.RunOnce.Outcome.SKIPPED, inner.outcome());
                    ctx.fenced("SET", key("{job}out"), "1");
                    return "done";
                });
        assertEquals(io.dlock.RunOnce.Outcome.RAN, r.outcome());
        assertEquals("done", r.value());
        assertNotNull(r.token());
        assertFalse(client.getLock(key("{job}")).isLocked(), "released when atLeastFor is 0");
        io.dlock.RunOnce.run(client, key("{job}"), most, java.time.Duration.ofSeconds(5), false, c -> 1);
        assertEquals(io.dlock.RunOnce.Outcome.SKIPPED,
                io.dlock.RunOnce.run(client, key("{job}"), most, java.time.Duration.ZERO, false, c -> 2).outcome());
        assertTrue(client.getLock(key("{job}")).remainTimeToLive() > 3000, "kept for atLeastFor");
    }

    @Test
    void electionCampaignProclaimResignObserve() throws Exception {
        io.dlock.Election a = client.getElection(key("el"));
        io.dlock.Election b = newDlock(new DlockConfig().setWaitSlice(1000)).getElection(key("el"));
        java.util.concurrent.LinkedBlockingQueue<Object> seen = new java.util.concurrent.LinkedBlockingQueue<>();
        AutoCloseable obs = a.observe(l -> seen.add(l == null ? "nobody" : l));
        try {
            assertEquals("nobody", seen.poll(10, TimeUnit.SECONDS));
            io.dlock.Election.Term t = a.campaign(5, TimeUnit.SECONDS);
            assertNotNull(t);
            t.proclaim("node-a");
            io.dlock.Election.Leader l = a.leader();
            assertEquals(new io.dlock.Election.Leader(a.owner(), t.token(), "node-a"), l);
            Object first = seen.poll(10, TimeUnit.SECONDS);
            if (first instanceof io.dlock.Election.Leader fl && fl.value() == null) {
                first = seen.poll(10, TimeUnit.SECONDS);
            }
            assertEquals(l, first);
            assertNull(LockContract.<io.dlock.Election.Term>inThread(() -> b.campaign(200, TimeUnit.MILLISECONDS)));
            CompletableFuture<io.dlock.Election.Term> bt = async(() -> {
                try {
                    return b.campaign(20, TimeUnit.SECONDS);
                } catch (InterruptedException e) {
                    throw new IllegalStateException(e);
                }
            });
            awaitWaiters(key("el"), 1);
            assertTrue(t.resign());
            io.dlock.Election.Term t2 = bt.get(20, TimeUnit.SECONDS);
            assertTrue(t2.token() > t.token());
            assertEquals(b.owner(), a.leader().owner());
            assertNull(a.leader().value(), "the old term's value is not the new leader's");
            assertThrows(io.dlock.FencedException.class, () -> t.proclaim("stale"));
        } finally {
            obs.close();
        }
    }

    /** The calls of one command the server ran so far ({@code INFO commandstats}). */
    private long calls(String command) throws Exception {
        for (String line : server.command("INFO commandstats").split("\r\n")) {
            if (line.startsWith("cmdstat_" + command + ":")) {
                int i = line.indexOf("calls=");
                return Long.parseLong(line.substring(i + 6, line.indexOf(',', i)));
            }
        }
        return 0;
    }

    /** Issue 45: Election.observe is told by the lock's channel, and reads nothing while nothing changes. */
    @Test
    void electionObserveIsByNotification() throws Exception {
        io.dlock.Election a = client.getElection(key("obs"));
        io.dlock.Election b = newDlock(new DlockConfig().setWaitSlice(1000)).getElection(key("obs"));
        java.util.concurrent.LinkedBlockingQueue<Object> seen = new java.util.concurrent.LinkedBlockingQueue<>();
        AutoCloseable obs = a.observe(l -> seen.add(l == null ? "nobody" : l));
        try {
            assertEquals("nobody", seen.poll(10, TimeUnit.SECONDS));
            io.dlock.Election.Term t = a.campaign(5, TimeUnit.SECONDS);
            t.proclaim("node-a");
            io.dlock.Election.Leader l = null;
            while (l == null || l.value() == null) {
                Object o = seen.poll(5, TimeUnit.SECONDS);
                assertNotNull(o, "the new leader and its value were observed");
                l = (io.dlock.Election.Leader) o;
            }
            assertEquals("node-a", l.value());
            Thread.sleep(200);
            long reads = calls("dlock.info");
            Thread.sleep(1500);
            assertEquals(reads, calls("dlock.info"), "no polling while nothing changes");
            CompletableFuture<io.dlock.Election.Term> bt = async(() -> {
                try {
                    return b.campaign(20, TimeUnit.SECONDS);
                } catch (InterruptedException e) {
                    throw new IllegalStateException(e);
                }
            });
            awaitWaiters(key("obs"), 1);
            long t0 = System.nanoTime();
            assertTrue(t.resign());
            bt.get(20, TimeUnit.SECONDS);
            Object next = seen.poll(5, TimeUnit.SECONDS);
            assertTrue(next instanceof io.dlock.Election.Leader nl && nl.owner().equals(b.owner()), "" + next);
            long took = (System.nanoTime() - t0) / 1_000_000L;
            assertTrue(took < 1000, "the new leader was observed " + took + " ms after the resign");
        } finally {
            obs.close();
        }
    }

    /** Issue 45: Redisson's async shapes on a lock: lockAsync, tryLockAsync, unlockAsync; a cancelled wait gives its place up. */
    @Test
    void lockAsyncTryLockAsyncUnlockAsync() throws Exception {
        DLock lock = client.getFairLock(key("async"));
        long me = Thread.currentThread().getId();
        lock.lockAsync().get(10, TimeUnit.SECONDS);
        assertTrue(lock.isHeldByCurrentThread(), "the hold is the calling thread's");
        assertFalse(LockContract.<Boolean>inThread(() -> lock.tryLockAsync().get(10, TimeUnit.SECONDS)));
        CompletableFuture<Void> waiting = LockContract.inThread(() -> lock.lockAsync());
        awaitWaiters(key("async"), 1);
        assertTrue(waiting.cancel(true));
        long deadline = System.nanoTime() + 5_000_000_000L;
        while (lock.info().get("waiters") instanceof List<?> w && !w.isEmpty()) {
            assertTrue(System.nanoTime() < deadline, "the cancelled wait left its place");
            Thread.sleep(10);
        }
        CompletableFuture<Boolean> other = LockContract.inThread(() -> lock.tryLockAsync(10, 5, TimeUnit.SECONDS));
        lock.unlockAsync(me).get(10, TimeUnit.SECONDS);
        assertTrue(other.get(10, TimeUnit.SECONDS), "granted once unlocked");
        assertFalse(lock.isHeldByCurrentThread());
        assertTrue(lock.forceUnlockAsync().get(10, TimeUnit.SECONDS));
    }

    /** Issue 45: the async shapes of the permit-id semaphore and the latch. */
    @Test
    void semaphoreAndLatchAsync() throws Exception {
        DSemaphore s = client.getSemaphore(key("asem"), 1);
        String id = s.acquireAsync().get(10, TimeUnit.SECONDS);
        assertNull(s.tryAcquireAsync().get(10, TimeUnit.SECONDS));
        assertEquals(0, s.availablePermitsAsync().get(10, TimeUnit.SECONDS));
        s.releaseAsync(id).get(10, TimeUnit.SECONDS);
        assertNotNull(s.tryAcquireAsync(5, 10, TimeUnit.SECONDS).get(10, TimeUnit.SECONDS));
        DCountDownLatch latch = client.getCountDownLatch(key("alatch"));
        assertTrue(latch.trySetCountAsync(2).get(10, TimeUnit.SECONDS));
        CompletableFuture<Boolean> opened = latch.awaitAsync(20, TimeUnit.SECONDS);
        latch.countDownAsync().get(10, TimeUnit.SECONDS);
        assertEquals(1L, latch.getCountAsync().get(10, TimeUnit.SECONDS));
        assertFalse(opened.isDone());
        latch.countDownAsync().get(10, TimeUnit.SECONDS);
        assertTrue(opened.get(10, TimeUnit.SECONDS));
        latch.awaitAsync().get(10, TimeUnit.SECONDS);
    }

    /** Issue 45: a semaphore in RSemaphore's shape: acquire(n), tryAcquire, release(n) from any thread, availablePermits. */
    @Test
    void countingSemaphoreInRedissonsShape() throws Exception {
        io.dlock.DCountingSemaphore s = client.getCountingSemaphore(key("rsem"), 3);
        s.acquire(2);
        assertEquals(1, s.availablePermits());
        assertFalse(s.tryAcquire(2));
        assertFalse(s.tryAcquire(2, 200, TimeUnit.MILLISECONDS));
        LockContract.<Boolean>inThread(() -> {
            s.release(); // any thread of the client gives permits back
            return true;
        });
        assertEquals(2, s.availablePermits());
        assertEquals(1, s.heldPermits());
        assertTrue(s.tryAcquire(2, 1, TimeUnit.SECONDS));
        assertEquals(3, s.heldPermits());
        s.release(2); // part of the second grant stays held
        assertEquals(1, s.heldPermits());
        assertEquals(2, s.availablePermits());
        assertThrows(io.dlock.DlockArgumentException.class, () -> s.release(2), "more than held is refused");
        assertTrue(s.tryAcquireAsync(2).get(10, TimeUnit.SECONDS));
        assertFalse(s.tryAcquireAsync().get(10, TimeUnit.SECONDS));
        CompletableFuture<Void> waiting = s.acquireAsync();
        s.releaseAsync(3).get(10, TimeUnit.SECONDS);
        waiting.get(10, TimeUnit.SECONDS);
        assertEquals(1, s.heldPermits());
        s.release();
        assertEquals(3, s.availablePermits());
    }

    /** Issue 45: a lease of 0 in Redisson's (long, TimeUnit) shape is the watchdog's lease, renewed. */
    @Test
    void leaseZeroIsTheWatchdog() throws Exception {
        Dlock d = newDlock(new DlockConfig().setLockWatchdogTimeout(900).setWaitSlice(1000));
        DLock lock = d.getLock(key("zero"));
        lock.lock(0, TimeUnit.SECONDS);
        Thread.sleep(2500);
        assertTrue(lock.isHeldByCurrentThread(), "renewed past two leases");
        assertTrue(lock.remainTimeToLive() > 0);
        lock.unlock();
    }

    /** Waits until the server lists no holder of {@code name} (its lease ended). */
    protected void awaitFree(String name) throws InterruptedException {
        long deadline = System.nanoTime() + 20_000_000_000L;
        while (client.getLock(name).isLocked()) {
            assertTrue(System.nanoTime() < deadline, name + " still held after 20 s");
            Thread.sleep(5);
        }
    }

    private static void awaitAvailable(DSemaphore s, int n) throws InterruptedException {
        long deadline = System.nanoTime() + 20_000_000_000L;
        while (s.availablePermits() < n) {
            assertTrue(System.nanoTime() < deadline, "fewer than " + n + " permits of " + s.getName() + " after 20 s");
            Thread.sleep(5);
        }
    }

    /** Waits until the lock at {@code name} has at least {@code n} waiters. */
    protected void awaitWaiters(String name, int n) throws InterruptedException {
        long deadline = System.nanoTime() + 20_000_000_000L;
        while (System.nanoTime() < deadline) {
            var info = client.getLock(name).info();
            if (info != null && info.get("waiters") instanceof List<?> w && w.size() >= n) {
                return;
            }
            Thread.sleep(10);
        }
        fail("no " + n + " waiter(s) on " + name);
    }
}
