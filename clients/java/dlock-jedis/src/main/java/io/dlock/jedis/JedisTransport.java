package io.dlock.jedis;

import io.dlock.DlockConnectionException;
import io.dlock.core.Errors;
import io.dlock.spi.Transport;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Semaphore;
import java.util.concurrent.atomic.AtomicLong;
import redis.clients.jedis.AbstractPipeline;
import redis.clients.jedis.CommandArguments;
import redis.clients.jedis.JedisCluster;
import redis.clients.jedis.RedisClient;
import redis.clients.jedis.RedisClusterClient;
import redis.clients.jedis.Response;
import redis.clients.jedis.UnifiedJedis;
import redis.clients.jedis.commands.ProtocolCommand;
import redis.clients.jedis.exceptions.JedisDataException;
import redis.clients.jedis.exceptions.JedisException;
import redis.clients.jedis.util.KeyValue;

/**
 * A {@link Transport} over a Jedis {@link UnifiedJedis}: {@code RedisClient} (pooled),
 * {@code RedisClusterClient}/{@code JedisCluster}, {@code RedisSentinelClient}. Commands
 * that wait on the server run on a connection of their own from the pool (Jedis'
 * {@code sendBlockingCommand}, without read timeout), on a virtual thread where the JVM
 * has them (Java 21+) and on a daemon thread otherwise, so the calling thread waits on a
 * future and can be interrupted.
 */
public final class JedisTransport implements Transport {
    private static final AtomicLong THREADS = new AtomicLong();
    private final UnifiedJedis jedis;
    private final boolean owned;
    private final boolean cluster;
    private final ExecutorService executor;
    private final Semaphore blockingSlots;

    /** A transport over {@code jedis}; {@link #close()} does not close it. */
    public JedisTransport(UnifiedJedis jedis) {
        this(jedis, false);
    }

    /**
     * A transport over {@code jedis}; with {@code owned}, {@link #close()} closes it. At
     * most one connection less than a {@code RedisClient}'s pool holds (7 for other
     * clients, Jedis' default pool of 8) waits on the server at a time, so that releases
     * and renewals always find a connection; further waiters queue in this client (FIFO).
     */
    public JedisTransport(UnifiedJedis jedis, boolean owned) {
        this(jedis, owned, defaultBlockingSlots(jedis));
    }

    private static int defaultBlockingSlots(UnifiedJedis jedis) {
        if (jedis instanceof RedisClient rc && rc.getPool() != null) {
            int max = rc.getPool().getMaxTotal();
            return max <= 0 ? Integer.MAX_VALUE : Math.max(1, max - 1);
        }
        return 7;
    }

    /**
     * A transport over {@code jedis} with at most {@code maxBlocking} commands waiting on the
     * server at a time (each holds a pooled connection while it waits; keep it below the
     * pool's size so that releases find a connection).
     */
    @SuppressWarnings("deprecation") // JedisCluster is still in use
    public JedisTransport(UnifiedJedis jedis, boolean owned, int maxBlocking) {
        if (maxBlocking < 1) {
            throw new IllegalArgumentException("maxBlocking must be at least 1, got " + maxBlocking);
        }
        this.blockingSlots = new Semaphore(maxBlocking, true);
        this.jedis = java.util.Objects.requireNonNull(jedis, "jedis");
        this.owned = owned;
        this.cluster = jedis instanceof JedisCluster || jedis instanceof RedisClusterClient;
        this.executor = newExecutor();
    }

    private static ExecutorService newExecutor() {
        try {
            Method m = Executors.class.getMethod("newVirtualThreadPerTaskExecutor");
            return (ExecutorService) m.invoke(null);
        } catch (ReflectiveOperationException | RuntimeException e) {
            return Executors.newCachedThreadPool(r -> {
                Thread t = new Thread(r, "dlock-jedis-wait-" + THREADS.incrementAndGet());
                t.setDaemon(true);
                return t;
            });
        }
    }

    /** The Jedis client. */
    public UnifiedJedis jedis() {
        return jedis;
    }

    private record Cmd(byte[] raw) implements ProtocolCommand {
        @Override
        public byte[] getRaw() {
            return raw;
        }
    }

    private static String name(byte[][] args) {
        return new String(args[0], StandardCharsets.UTF_8);
    }

    /** The arguments with the key (always the second word of a DLOCK command) marked for routing. */
    private static CommandArguments arguments(byte[][] args, boolean blocking) {
        CommandArguments ca = new CommandArguments(new Cmd(args[0]));
        for (int i = 1; i < args.length; i++) {
            if (i == 1) {
                ca.key(args[i]);
            } else {
                ca.add(args[i]);
            }
        }
        return blocking ? ca.blocking() : ca;
    }

    @Override
    public Object call(byte[] key, byte[][] args) {
        try {
            return normalize(jedis.executeCommand(arguments(args, false)));
        } catch (JedisDataException e) {
            throw Errors.fromServer(e.getMessage(), name(args));
        } catch (JedisException e) {
            throw new DlockConnectionException(name(args) + " failed: " + e.getMessage(), e);
        }
    }

    @Override
    public CompletableFuture<List<Object>> callBlocking(byte[] key, List<byte[][]> commands) {
        if (commands.size() > 1 && cluster) {
            CompletableFuture<List<Object>> f = new CompletableFuture<>();
            f.completeExceptionally(new UnsupportedOperationException("durable grants (replicas > 0) need the"
                    + " acquire and WAIT on one connection, which Jedis' cluster client cannot pipeline;"
                    + " use dlock-lettuce for durable grants on a cluster"));
            return f;
        }
        return CompletableFuture.supplyAsync(() -> blocking(key, commands), executor);
    }

    private List<Object> blocking(byte[] key, List<byte[][]> commands) {
        String first = name(commands.get(0));
        try {
            blockingSlots.acquire();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new DlockConnectionException(first + " was not sent: the transport is closing", e);
        }
        try {
            if (commands.size() == 1) {
                byte[][] a = commands.get(0);
                List<Object> out = new ArrayList<>(1);
                out.add(normalize(jedis.executeCommand(arguments(a, true))));
                return out;
            }
            try (AbstractPipeline p = jedis.pipelined()) {
                List<Response<Object>> rs = new ArrayList<>();
                for (byte[][] a : commands) {
                    rs.add(p.sendCommand(new Cmd(a[0]), Arrays.copyOfRange(a, 1, a.length)));
                }
                p.sync();
                List<Object> out = new ArrayList<>(rs.size());
                for (Response<Object> r : rs) {
                    out.add(normalize(r.get()));
                }
                return out;
            }
        } catch (JedisDataException e) {
            throw Errors.fromServer(e.getMessage(), first);
        } catch (JedisException e) {
            throw new DlockConnectionException(first + " failed: " + e.getMessage(), e);
        } finally {
            blockingSlots.release();
        }
    }

    /** Replies as the core expects them: Long, byte[], List, null (RESP3 maps flattened). */
    static Object normalize(Object o) {
        if (o instanceof List<?> l) {
            List<Object> out = new ArrayList<>(l.size());
            for (Object e : l) {
                if (e instanceof KeyValue<?, ?> kv) {
                    out.add(normalize(kv.getKey()));
                    out.add(normalize(kv.getValue()));
                } else {
                    out.add(normalize(e));
                }
            }
            return out;
        }
        if (o instanceof Map<?, ?> m) {
            List<Object> out = new ArrayList<>(m.size() * 2);
            for (Map.Entry<?, ?> e : m.entrySet()) {
                out.add(normalize(e.getKey()));
                out.add(normalize(e.getValue()));
            }
            return out;
        }
        return o;
    }

    @Override
    public String describe() {
        return "Jedis " + jedis.getClass().getSimpleName();
    }

    @Override
    public void close() {
        executor.shutdownNow();
        if (owned) {
            jedis.close();
        }
    }
}
