package io.dlock.jedis;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.dlock.DLock;
import io.dlock.Dlock;
import io.dlock.DlockConfig;
import io.dlock.spi.Transport;
import io.dlock.testing.LockContract;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import redis.clients.jedis.RedisClient;

/** The lock contract on Jedis' pooled {@code RedisClient}, against REDIS_SERVER. */
class JedisRedisTest extends LockContract {
    @Override
    protected Transport transport(String host, int port) {
        return new JedisTransport(RedisClient.create(host, port), true);
    }

    /** A waiter queued in the client for a pooled connection gives up without sending anything. */
    @Test
    void interruptedQueuedWaiterSendsNothing() throws Exception {
        Dlock d = newDlock(new DlockConfig().setWaitSlice(10_000));
        Dlock one = Dlock.create(new JedisTransport(RedisClient.create(server.host(), server.port()), true, 1),
                new DlockConfig().setWaitSlice(10_000));
        try {
            DLock held = d.getLock(key("q"));
            held.lock();
            DLock lock = one.getLock(key("q"));
            CompletableFuture<Boolean> first = async(() -> {
                try {
                    return lock.tryLock(30, TimeUnit.SECONDS);
                } catch (InterruptedException e) {
                    return false;
                }
            });
            awaitWaiters(key("q"), 1);
            CompletableFuture<Throwable> second = new CompletableFuture<>();
            Thread t = new Thread(() -> {
                try {
                    lock.lockInterruptibly();
                    second.complete(null);
                } catch (Throwable e) {
                    second.complete(e);
                }
            });
            t.start();
            Thread.sleep(200);
            long t0 = System.nanoTime();
            t.interrupt();
            assertTrue(second.get(10, TimeUnit.SECONDS) instanceof InterruptedException);
            assertTrue((System.nanoTime() - t0) / 1_000_000 < 2500, "gave up at once");
            Object waiters = held.info().get("waiters");
            assertEquals(1, ((List<?>) waiters).size(), "only the first waiter reached the server");
            held.unlock();
            assertTrue(first.get(20, TimeUnit.SECONDS));
            assertFalse(lock.isHeldByThread(t.getId()));
        } finally {
            one.close();
        }
    }
    /**
     * lock() waits on the caller's own thread, within the transport's bound on waiting
     * connections: with one slot, one lock() waits on the server and the rest queue in the
     * client, and every one is served in turn when the lock frees.
     */
    @Test
    void lockWaitsOnTheCallerWithinTheSlots() throws Exception {
        Dlock one = Dlock.create(new JedisTransport(RedisClient.create(server.host(), server.port()), true, 1));
        try {
            DLock held = client.getLock(key("slots"));
            held.lock();
            DLock lock = one.getLock(key("slots"));
            int n = 5;
            List<CompletableFuture<Long>> got = new java.util.ArrayList<>();
            for (int i = 0; i < n; i++) {
                got.add(async(() -> {
                    long token = lock.lockAndGetToken();
                    lock.unlock();
                    return token;
                }));
            }
            awaitWaiters(key("slots"), 1);
            Thread.sleep(300);
            Object waiters = held.info().get("waiters");
            assertEquals(1, ((List<?>) waiters).size(), "one connection waits on the server: " + waiters);
            held.unlock();
            java.util.Set<Long> tokens = new java.util.HashSet<>();
            for (CompletableFuture<Long> f : got) {
                tokens.add(f.get(20, TimeUnit.SECONDS));
            }
            assertEquals(n, tokens.size(), "each waiter got a hold of its own");
            assertFalse(held.isLocked());
        } finally {
            one.close();
        }
    }
}
