package io.dlock.bench;

import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisURI;
import io.lettuce.core.api.StatefulRedisConnection;
import java.util.Deque;
import java.util.List;
import java.util.concurrent.ConcurrentLinkedDeque;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.Lock;

/**
 * What a client library's round trips allow a FIFO lock, before any lock logic: one token
 * passed through a Redis list. {@code lock()} is {@code BLPOP key 0} (the server serves the
 * connections blocked on a list first come, first served) and {@code unlock()} is
 * {@code RPUSH key token}. No owner, no lease, no reentry, no check: two commands per grant,
 * each a plain core command, sent the way dlock's transport for the same library sends its
 * own (the wait on a connection of its own, the release on a shared one for Lettuce; both
 * from Jedis' pool). A lock handed from thread to thread in FIFO order over that library
 * cannot go faster than this.
 */
final class Floor {
    private Floor() {
    }

    private static final String TOKEN = "t";

    /**
     * The floor over Lettuce: a wait takes an idle connection of its own (opened when none is
     * idle, given back after), as {@code LettuceTransport} does.
     */
    static Bench.Contender lettuce(String name, String host, int port) {
        RedisClient client = RedisClient.create(RedisURI.create(host, port));
        StatefulRedisConnection<String, String> shared = client.connect();
        List<StatefulRedisConnection<String, String>> all = new CopyOnWriteArrayList<>();
        Deque<StatefulRedisConnection<String, String>> idle = new ConcurrentLinkedDeque<>();
        return new Bench.Contender(name, key -> {
            shared.sync().del(key);
            shared.sync().rpush(key, TOKEN);
            return new TokenLock(() -> {
                StatefulRedisConnection<String, String> c = idle.pollFirst();
                if (c == null) {
                    c = client.connect();
                    all.add(c);
                }
                c.sync().blpop(0, key);
                idle.addFirst(c);
            }, () -> shared.sync().rpush(key, TOKEN));
        }, () -> {
            for (StatefulRedisConnection<String, String> c : all) {
                c.close();
            }
            shared.close();
            client.shutdown();
        });
    }

    /** The floor over Jedis: both commands from the pool, the wait on the calling thread. */
    static Bench.Contender jedis(String name, String host, int port, int threads) {
        redis.clients.jedis.RedisClient client = Bench.jedisClient(host, port, threads);
        return new Bench.Contender(name, key -> {
            client.del(key);
            client.rpush(key, TOKEN);
            return new TokenLock(() -> client.blpop(0, key), () -> client.rpush(key, TOKEN));
        }, client::close);
    }

    /** {@code lock} and {@code unlock} only: the rest of {@link Lock} is not needed here. */
    private record TokenLock(Runnable take, Runnable put) implements Lock {
        @Override
        public void lock() {
            take.run();
        }

        @Override
        public void unlock() {
            put.run();
        }

        @Override
        public void lockInterruptibly() {
            throw new UnsupportedOperationException("the floor only has lock() and unlock()");
        }

        @Override
        public boolean tryLock() {
            throw new UnsupportedOperationException("the floor only has lock() and unlock()");
        }

        @Override
        public boolean tryLock(long time, TimeUnit unit) {
            throw new UnsupportedOperationException("the floor only has lock() and unlock()");
        }

        @Override
        public Condition newCondition() {
            throw new UnsupportedOperationException("the floor only has lock() and unlock()");
        }
    }
}
