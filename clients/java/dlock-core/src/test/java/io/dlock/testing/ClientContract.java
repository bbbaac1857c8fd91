package io.dlock.testing;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import io.dlock.DLock;
import io.dlock.Dlock;
import io.dlock.DlockArgumentException;
import io.dlock.DlockConfig;
import io.dlock.DlockConnectionException;
import io.dlock.DMultiLock;
import io.dlock.DSemaphore;
import io.dlock.Election;
import io.dlock.LockOptions;
import io.dlock.LostReason;
import io.dlock.RunOnce;
import io.dlock.UnlockResult;
import io.dlock.WrongKindException;
import io.dlock.core.Commands;
import io.dlock.core.Replies;
import io.dlock.spi.Transport;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
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
 * The client contract ({@code docs/clients.md}) on one transport, against a real server
 * with the module, and — for the partition cases — a real Toxiproxy between client and
 * server (skipped when no Toxiproxy binary is installed). Each test is one case of
 * issue 43 that the Java client got wrong before: its name says what must hold.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
@Timeout(value = 120, unit = TimeUnit.SECONDS)
public abstract class ClientContract {
    protected RedisServer server;
    private Toxiproxy toxiproxy;
    private final List<Dlock> opened = new ArrayList<>();
    private String prefix;

    /** A new transport to host:port; {@code replyTimeoutMs} > 0 sets the client library's reply timeout. */
    protected abstract Transport transport(String host, int port, long replyTimeoutMs);

    @BeforeAll
    void startServer() throws Exception {
        server = RedisServer.start(RedisServer.redisBinary());
    }

    @AfterAll
    void stopServer() {
        if (toxiproxy != null) {
            toxiproxy.close();
        }
        if (server != null) {
            server.close();
        }
    }

    @BeforeEach
    void name(TestInfo info) {
        prefix = info.getTestMethod().map(m -> m.getName()).orElse("t") + ":";
    }

    @AfterEach
    void closeClients() {
        for (Dlock d : opened) {
            d.close();
        }
        opened.clear();
    }

    protected String key(String k) {
        return prefix + k;
    }

    protected Dlock open(int port, long replyTimeoutMs, DlockConfig config) {
        Dlock d = Dlock.create(transport(server.host(), port, replyTimeoutMs), config);
        opened.add(d);
        return d;
    }

    protected Dlock open(DlockConfig config) {
        return open(server.port(), 0, config);
    }

    private Toxiproxy.Proxy proxy() throws Exception {
        String bin = Toxiproxy.binary();
        Assumptions.assumeTrue(bin != null, "no Toxiproxy server installed (TOXIPROXY_SERVER, $(go env GOPATH)/bin/server)");
        if (toxiproxy == null) {
            toxiproxy = Toxiproxy.start(bin);
        }
        return toxiproxy.proxy(prefix.replace(":", "") + System.nanoTime(), server.port());
    }

    private static long ms(long fromNanos) {
        return (System.nanoTime() - fromNanos) / 1_000_000L;
    }

    /** Runs {@code c} on a new daemon thread (so its holds are that thread's). */
    private static <T> CompletableFuture<T> async(java.util.concurrent.Callable<T> c) {
        CompletableFuture<T> f = new CompletableFuture<>();
        Thread t = new Thread(() -> {
            try {
                f.complete(c.call());
            } catch (Throwable e) {
                f.completeExceptionally(e);
            }
        }, "contract-task");
        t.setDaemon(true);
        t.start();
        return f;
    }

    /** The number of DLOCK.* commands the server ran so far. */
    private long dlockCommands() throws Exception {
        long n = 0;
        for (String line : server.command("INFO commandstats").split("\r\n")) {
            if (line.startsWith("cmdstat_dlock.")) {
                int i = line.indexOf("calls=");
                n += Long.parseLong(line.substring(i + 6, line.indexOf(',', i)));
            }
        }
        return n;
    }

    private long renewals() throws Exception {
        for (String line : server.command("INFO commandstats").split("\r\n")) {
            if (line.startsWith("cmdstat_dlock.renew:")) {
                int i = line.indexOf("calls=");
                return Long.parseLong(line.substring(i + 6, line.indexOf(',', i)));
            }
        }
        return 0;
    }

    // ---------------------------------------------------------------- rule 1: the lease clock

    /**
     * Issue 43: a silent partition with a 2 s watchdog was reported at 60.6 s on Lettuce (its
     * renewals blocked the one watchdog thread for the 60 s command timeout) and at 4.7 s on
     * Jedis; the other client had the lock at 2.0 s. The loss must come first.
     */
    @Test
    void silentPartitionIsToldBeforeAnotherClientIsGranted() throws Exception {
        Toxiproxy.Proxy proxy = proxy();
        Dlock holder = open(proxy.port(), 0, new DlockConfig().setLockWatchdogTimeout(2000));
        Dlock other = open(new DlockConfig());
        DLock lock = holder.getLock(key("k"));
        lock.lock();
        CompletableFuture<Long> lost = new CompletableFuture<>();
        CompletableFuture<LostReason> reason = lock.lostSignal().toCompletableFuture();
        reason.thenRun(() -> lost.complete(System.nanoTime()));
        Thread.sleep(500);
        proxy.partition();
        try {
            long cut = System.nanoTime();
            CompletableFuture<Long> granted = async(() -> {
                assertTrue(other.getLock(key("k")).tryLock(30, TimeUnit.SECONDS));
                return System.nanoTime();
            });
            long grant = granted.get(40, TimeUnit.SECONDS);
            assertTrue(lost.isDone(), "the other client was granted " + ms(cut) + " ms after the cut, before the"
                    + " holder was told");
            long lead = (grant - lost.get()) / 1_000_000L;
            assertTrue(lead >= 0, "lead " + lead + " ms");
            assertEquals(LostReason.UNREACHABLE, reason.get());
            assertFalse(lock.isHeldByCurrentThread());
        } finally {
            proxy.heal();
        }
    }

    /** Issue 43: a wait with a 3 s deadline under a silent partition must end within 3.25 s. */
    @Test
    void deadlineHoldsUnderASilentPartition() throws Exception {
        Toxiproxy.Proxy proxy = proxy();
        Dlock other = open(new DlockConfig());
        DLock held = other.getLock(key("k"));
        held.lock();
        Dlock waiter = open(proxy.port(), 0, new DlockConfig());
        DLock lock = waiter.getLock(key("k"));
        assertFalse(lock.tryLock(), "held by the other client");
        proxy.partition();
        try {
            long t0 = System.nanoTime();
            Object outcome;
            try {
                outcome = lock.tryLock(3, TimeUnit.SECONDS);
            } catch (DlockConnectionException e) {
                outcome = e;
            }
            long took = ms(t0);
            assertTrue(took < 3250, "gave up after " + took + " ms (" + outcome + ")");
            assertTrue(Boolean.FALSE.equals(outcome) || outcome instanceof DlockConnectionException, "" + outcome);
        } finally {
            proxy.heal();
        }
    }

    /** Rule 1: the renew interval follows the lease (a RunOnce renewing a 1.5 s lease is not lost in 4 s). */
    @Test
    void renewIntervalFollowsTheLease() throws Exception {
        Dlock d = open(new DlockConfig());
        RunOnce.Result<String> r = RunOnce.run(d, key("job"), Duration.ofMillis(1500), Duration.ZERO, true, ctx -> {
            Thread.sleep(4000);
            return ctx.check() ? "held" : "gone";
        });
        assertEquals(RunOnce.Outcome.RAN, r.outcome(), "reason " + r.reason());
        assertEquals("held", r.value());
    }

    // ---------------------------------------------------------------- rule 2: prompt notice

    /** Issue 43: a FORCERELEASE was learned at the next renewal (~10 s); it must come within a second. */
    @Test
    void forceReleaseIsToldAtOnce() throws Exception {
        Dlock d = open(new DlockConfig());
        DLock lock = d.getLock(key("k"));
        lock.lock();
        CompletableFuture<LostReason> lost = lock.lostSignal().toCompletableFuture();
        Thread.sleep(200);
        long t0 = System.nanoTime();
        assertTrue(server.command("DLOCK.FORCERELEASE " + key("k")).startsWith(":1"));
        assertEquals(LostReason.FORCED, lost.get(5, TimeUnit.SECONDS));
        long late = ms(t0);
        assertTrue(late < 1000, "told " + late + " ms after the force-release");
        assertFalse(lock.isHeldByCurrentThread());
        assertEquals(UnlockResult.Status.LOST, lock.unlockAndGetResult().status());
    }

    /** A deleted key is told at once, with its reason. */
    @Test
    void deletedKeyIsToldAtOnce() throws Exception {
        Dlock d = open(new DlockConfig());
        DSemaphore s = d.getSemaphore(key("{s}"), 2);
        String permit = s.acquire();
        CompletableFuture<LostReason> lost = s.lostSignal(permit).toCompletableFuture();
        Thread.sleep(200);
        long t0 = System.nanoTime();
        server.command("DEL " + key("{s}"));
        assertEquals(LostReason.DELETED, lost.get(5, TimeUnit.SECONDS));
        assertTrue(ms(t0) < 1000, "told " + ms(t0) + " ms after DEL");
    }

    /** Issue 43: a BIND hold whose connection was killed was reported after 10.9-13 s. */
    @Test
    void bindHoldWhoseConnectionIsKilledIsToldAtOnce() throws Exception {
        Dlock d = open(new DlockConfig());
        DLock lock = d.getLock(key("k"), LockOptions.DEFAULT.withBind(true));
        lock.lock();
        CompletableFuture<LostReason> lost = lock.lostSignal().toCompletableFuture();
        Thread.sleep(200);
        long t0 = System.nanoTime();
        server.command("CLIENT KILL TYPE normal SKIPME yes");
        assertEquals(LostReason.DISCONNECTED, lost.get(5, TimeUnit.SECONDS));
        assertTrue(ms(t0) < 1000, "told " + ms(t0) + " ms after the kill");
    }

    /** Issue 43: a MultiLock is one hold: lost when any part is. */
    @Test
    void multiLockIsLostWhenAPartIs() throws Exception {
        Dlock d = open(new DlockConfig());
        DMultiLock multi = d.getMultiLock(d.getLock(key("a")), d.getLock(key("b")));
        multi.lock();
        CompletableFuture<LostReason> lost = multi.lostSignal().toCompletableFuture();
        Thread.sleep(200);
        long t0 = System.nanoTime();
        server.command("DLOCK.FORCERELEASE " + key("b"));
        assertEquals(LostReason.FORCED, lost.get(5, TimeUnit.SECONDS));
        assertTrue(ms(t0) < 1000, "told " + ms(t0) + " ms after the force-release");
        assertEquals(UnlockResult.Status.LOST, multi.unlockAndGetResult().status());
    }

    /** Issue 43: Election learned a FORCERELEASE of its term after 9.7 s (Go's subscribes). */
    @Test
    void electionTermForceReleasedIsToldAtOnce() throws Exception {
        Dlock d = open(new DlockConfig());
        Election e = d.getElection(key("el"));
        Election.Term t = e.campaign(5, TimeUnit.SECONDS);
        assertNotNull(t);
        CompletableFuture<LostReason> lost = t.lostSignal().toCompletableFuture();
        Thread.sleep(200);
        long t0 = System.nanoTime();
        server.command("DLOCK.FORCERELEASE " + key("el"));
        assertEquals(LostReason.FORCED, lost.get(5, TimeUnit.SECONDS));
        assertTrue(ms(t0) < 1000, "told " + ms(t0) + " ms after the force-release");
        assertTrue(t.isLost());
    }

    /**
     * A client's own releases are never taken for losses: its own `released` messages, and
     * the checks they start, race with its releases' replies (a check answered 0 by the
     * hold's own release counted it lost, FORCED or NOT_HELD, before the fix).
     */
    @Test
    void ownReleasesAreNeverTakenForLosses() throws Exception {
        Dlock d = open(new DlockConfig());
        java.util.concurrent.atomic.AtomicInteger lost = new java.util.concurrent.atomic.AtomicInteger();
        List<String> why = java.util.Collections.synchronizedList(new ArrayList<>());
        d.addLostListener((name, owner, token, reason) -> {
            lost.incrementAndGet();
            why.add(name + " " + reason);
        });
        List<CompletableFuture<Integer>> workers = new ArrayList<>();
        for (int t = 0; t < 3; t++) {
            workers.add(async(() -> {
                int n = 0;
                for (int i = 0; i < 150; i++) {
                    DLock lock = i % 2 == 0 ? d.getLock(key("k")) : d.getFairLock(key("f"));
                    if (lock.tryLock(5, TimeUnit.SECONDS)) {
                        lock.unlock();
                        n++;
                    }
                }
                return n;
            }));
        }
        for (CompletableFuture<Integer> w : workers) {
            assertEquals(150, w.get(60, TimeUnit.SECONDS));
        }
        Thread.sleep(300);
        assertEquals(0, lost.get(), "no hold was lost: " + why);
    }

    /** A notice missed while the subscriber was away is caught up on when it is back. */
    @Test
    void subscriberResubscribesAndChecksAfterItsConnectionIsKilled() throws Exception {
        Dlock d = open(new DlockConfig());
        DLock lock = d.getLock(key("k"));
        lock.lock();
        CompletableFuture<LostReason> lost = lock.lostSignal().toCompletableFuture();
        Thread.sleep(200);
        // the subscriber's connection goes, and the lock with it before it is back
        server.command("MULTI\r\nCLIENT KILL TYPE pubsub\r\nDLOCK.FORCERELEASE " + key("k") + "\r\nEXEC");
        LostReason r = lost.get(5, TimeUnit.SECONDS);
        assertTrue(r == LostReason.NOT_HELD || r == LostReason.FORCED, "" + r);
        // and it listens again: a second hold's force-release is told at once
        lock.lock();
        CompletableFuture<LostReason> again = lock.lostSignal().toCompletableFuture();
        Thread.sleep(300);
        long t0 = System.nanoTime();
        server.command("DLOCK.FORCERELEASE " + key("k"));
        again.get(5, TimeUnit.SECONDS);
        assertTrue(ms(t0) < 1000, "told " + ms(t0) + " ms after the second force-release");
    }

    // ---------------------------------------------------------------- rule 3: unlock ends ownership

    /**
     * Issue 43: after {@code CLIENT KILL TYPE normal}, {@code unlock()} threw "Unexpected end of
     * stream" (a dead pooled connection), the lock stayed held and the watchdog renewed it for
     * as long as the process lived.
     */
    @Test
    void failedUnlockStillEndsOwnership() throws Exception {
        Dlock d = open(new DlockConfig().setLockWatchdogTimeout(3000));
        Dlock other = open(new DlockConfig());
        DLock lock = d.getLock(key("k"));
        lock.lock();
        assertTrue(d.getLock(key("warm")).tryLock(0, 30, TimeUnit.SECONDS)); // more pooled connections to kill
        Thread.sleep(200);
        server.command("CLIENT KILL TYPE normal SKIPME yes");
        UnlockResult r = lock.unlockAndGetResult();
        assertTrue(Set.of(UnlockResult.Status.RELEASED, UnlockResult.Status.LOST, UnlockResult.Status.UNKNOWN)
                .contains(r.status()), "" + r);
        assertFalse(lock.isHeldByCurrentThread());
        long renewed = renewals();
        long t0 = System.nanoTime();
        assertTrue(async(() -> other.getLock(key("k")).tryLock(5, TimeUnit.SECONDS)).get(10, TimeUnit.SECONDS),
                "the other client gets the lock within the lease");
        assertTrue(ms(t0) < 3500, "granted after " + ms(t0) + " ms");
        Thread.sleep(1500);
        assertEquals(renewed, renewals(), "no renewal after unlock");
    }

    /** After unlock, the watchdog never renews that hold again. */
    @Test
    void unlockStopsRenewals() throws Exception {
        Dlock d = open(new DlockConfig().setLockWatchdogTimeout(600));
        DLock lock = d.getLock(key("k"));
        lock.lock();
        Thread.sleep(700);
        assertEquals(UnlockResult.Status.RELEASED, lock.unlockAndGetResult().status());
        long renewed = renewals();
        Thread.sleep(1000);
        assertEquals(renewed, renewals(), "no renewal after unlock");
    }

    // ---------------------------------------------------------------- rule 4: waits fit the transport

    /** A wait longer than the client library's reply timeout (1 s here) is granted. */
    @Test
    void waitLongerThanTheReplyTimeoutIsGranted() throws Exception {
        Dlock other = open(new DlockConfig());
        DLock held = other.getLock(key("k"));
        held.lock();
        Dlock d = open(server.port(), 1000, new DlockConfig());
        CompletableFuture<Boolean> got = async(() -> {
            boolean ok = d.getLock(key("k")).tryLock(10, TimeUnit.SECONDS);
            d.getLock(key("k")).unlock();
            return ok;
        });
        Thread.sleep(2500);
        held.unlock();
        assertTrue(got.get(15, TimeUnit.SECONDS));
    }

    // ---------------------------------------------------------------- rule 5: errors

    /** Issue 43: a Long.MAX_VALUE lease was capped at ~34 years; bad input is refused before anything is sent. */
    @Test
    void badInputIsRefusedBeforeAnythingIsSent() throws Exception {
        Dlock d = open(new DlockConfig());
        DLock lock = d.getLock(key("k"));
        long before = dlockCommands();
        DlockArgumentException e = assertThrows(DlockArgumentException.class,
                () -> lock.lock(Long.MAX_VALUE, TimeUnit.MILLISECONDS));
        assertEquals("leaseTime", e.argument());
        assertThrows(DlockArgumentException.class, () -> lock.tryLock(0, 1L << 41, TimeUnit.MILLISECONDS));
        assertThrows(DlockArgumentException.class, () -> lock.lock(500, TimeUnit.MICROSECONDS));
        assertThrows(DlockArgumentException.class, () -> lock.tryLock(Duration.ZERO, Duration.ZERO));
        assertThrows(DlockArgumentException.class, () -> lock.tryLock(Duration.ZERO, Duration.ofMillis(-5)));
        assertThrows(DlockArgumentException.class, () -> lock.tryLock(Duration.ZERO, Duration.ofMillis(1L << 41)));
        assertThrows(DlockArgumentException.class, () -> lock.tryLock(Duration.ofMillis(-1), null));
        assertEquals("name", assertThrows(DlockArgumentException.class, () -> d.getLock("")).argument());
        assertThrows(DlockArgumentException.class, () -> d.getLock(null));
        assertThrows(DlockArgumentException.class, () -> d.getSemaphore(key("s"), 0));
        DlockArgumentException ri = assertThrows(DlockArgumentException.class, () -> Dlock.create(
                transport(server.host(), server.port(), 0),
                new DlockConfig().setLockWatchdogTimeout(2000).setRenewInterval(2000)));
        assertEquals("renewInterval", ri.argument());
        assertEquals(before, dlockCommands(), "no DLOCK.* command was sent");
    }

    /** Issue 43: a string key gave a generic DlockServerException WRONGTYPE. */
    @Test
    void aKeyOfAnotherTypeIsTheWrongKind() throws Exception {
        server.command("SET " + key("k") + " x");
        Dlock d = open(new DlockConfig());
        WrongKindException e = assertThrows(WrongKindException.class, () -> d.getLock(key("k")).tryLock());
        assertEquals("WRONGTYPE", e.code());
        server.command("DLOCK.RWACQUIRE " + key("rw") + " o WRITE");
        assertEquals("WRONGKIND", assertThrows(WrongKindException.class,
                () -> d.getLock(key("rw")).tryLock()).code());
    }

    /**
     * Issue 43: {@code DLOCK.INFO} lists a holder whose lease ended (ttl 0) until the
     * module's timer runs; the client's reads of INFO must not count it (one script takes a
     * 50 ms lease, busy-waits 200 ms and returns INFO, so the timer cannot have run).
     */
    @Test
    void aHolderWhoseLeaseEndedIsNotCounted() throws Exception {
        Dlock d = open(new DlockConfig());
        byte[] k = Commands.bytes(key("k"));
        String script = "redis.call('DLOCK.ACQUIRE', KEYS[1], 'o', 'PX', 50) local t = redis.call('TIME')"
                + " local start = t[1] * 1000000 + t[2] repeat t = redis.call('TIME')"
                + " until t[1] * 1000000 + t[2] - start > 200000 return redis.call('DLOCK.INFO', KEYS[1])";
        Object info = d.getTransport().call(k, new byte[][] {Commands.bytes("EVAL"), Commands.bytes(script),
            Commands.bytes("1"), k});
        List<Map<String, Object>> live = Replies.holders(Replies.info(info));
        assertEquals(List.of(), live, "a holder whose lease ended is not live");
    }

    // ---------------------------------------------------------------- rule 6: no leftovers

    /** {@code close()} twice is fine, and leaves no thread of the client running. */
    @Test
    void closeIsIdempotentAndLeavesNoThreads() throws Exception {
        Dlock d = open(new DlockConfig());
        DLock lock = d.getLock(key("k"));
        lock.lock();
        assertTrue(async(() -> d.getLock(key("k2")).tryLock(100, TimeUnit.MILLISECONDS)).get(10, TimeUnit.SECONDS));
        CompletableFuture<LostReason> lost = lock.lostSignal().toCompletableFuture();
        d.close();
        d.close();
        assertEquals(LostReason.UNREACHABLE, lost.get(5, TimeUnit.SECONDS), "a hold still held reports lost");
        long deadline = System.nanoTime() + 5_000_000_000L;
        List<String> left;
        do {
            left = new ArrayList<>();
            for (Thread t : Thread.getAllStackTraces().keySet()) {
                if (t.isAlive() && t.getName().startsWith("dlock-")) {
                    left.add(t.getName());
                }
            }
            if (left.isEmpty()) {
                return;
            }
            Thread.sleep(50);
        } while (System.nanoTime() < deadline);
        fail("threads left after close(): " + left);
    }

    /** Threads the client starts never keep the JVM alive. */
    @Test
    void everyThreadOfTheClientIsADaemon() throws Exception {
        Dlock d = open(new DlockConfig().setLockWatchdogTimeout(600));
        DLock lock = d.getLock(key("k"));
        lock.lock();
        Thread.sleep(700);
        assertTrue(async(() -> d.getLock(key("k2")).tryLock(100, TimeUnit.MILLISECONDS)).get(10, TimeUnit.SECONDS));
        for (Thread t : Thread.getAllStackTraces().keySet()) {
            if (t.getName().startsWith("dlock-")) {
                assertTrue(t.isDaemon(), t.getName() + " is not a daemon");
            }
        }
        lock.unlock();
    }
}
