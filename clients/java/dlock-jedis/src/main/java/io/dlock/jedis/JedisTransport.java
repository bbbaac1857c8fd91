package io.dlock.jedis;

import io.dlock.DlockConnectionException;
import io.dlock.core.Errors;
import io.dlock.spi.BlockingCall;
import io.dlock.spi.Transport;
import java.lang.invoke.MethodHandle;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.MethodType;
import java.lang.reflect.InvocationTargetException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import redis.clients.jedis.AbstractPipeline;
import redis.clients.jedis.CommandArguments;
import redis.clients.jedis.Connection;
import redis.clients.jedis.JedisCluster;
import redis.clients.jedis.Response;
import redis.clients.jedis.UnifiedJedis;
import redis.clients.jedis.commands.ProtocolCommand;
import redis.clients.jedis.exceptions.JedisDataException;
import redis.clients.jedis.exceptions.JedisException;
import redis.clients.jedis.util.KeyValue;
import redis.clients.jedis.util.Pool;

/**
 * A {@link Transport} over a Jedis {@link UnifiedJedis}: {@code RedisClient} (pooled),
 * {@code RedisClusterClient}/{@code JedisCluster}, {@code RedisSentinelClient}. Commands
 * that wait on the server run on a connection of their own from the pool (a blocking
 * command, without read timeout), on a small pool of platform daemon threads, so the
 * calling thread (virtual or not) only waits on a future and can be interrupted. A wait
 * that nothing interrupts ({@code lock()}) on a platform thread of a pooled
 * {@code RedisClient} runs on the calling thread instead, within the same bound on
 * connections that wait: the grant then wakes the caller itself, one thread hand-over less.
 *
 * <p>Runs on Jedis 6, 7 and 8 (the pooled client is {@code JedisPooled} before Jedis 8,
 * {@code RedisClient} from 8 on): the classes that only some of them have are named, never
 * linked, so Spring Boot 3.5's Jedis 6 and Boot 4.0's Jedis 7 load this class too.
 */
public final class JedisTransport implements Transport {
    private static final AtomicLong THREADS = new AtomicLong();
    private final UnifiedJedis jedis;
    private final boolean owned;
    private final boolean cluster;
    private final ExecutorService executor;
    /** The pool of a pooled {@code RedisClient}, where a wait may run on the caller; else null. */
    private final Pool<Connection> pool;
    /** The connections that may wait on the server at once (null: no bound), fair: FIFO. */
    private final Semaphore slots;

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
        Pool<Connection> pool = poolOf(jedis);
        if (pool != null) {
            int max = pool.getMaxTotal();
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
        this.jedis = java.util.Objects.requireNonNull(jedis, "jedis");
        this.owned = owned;
        this.cluster = jedis instanceof JedisCluster || isA(jedis, "redis.clients.jedis.RedisClusterClient");
        this.executor = newExecutor(maxBlocking);
        this.pool = poolOf(jedis);
        this.slots = maxBlocking == Integer.MAX_VALUE ? null : new Semaphore(maxBlocking, true);
    }

    /**
     * Platform daemon threads run the blocking calls (Jedis reads a socket; the caller only
     * waits on a future, which never pins a virtual thread): at most {@code maxBlocking}
     * at a time, further calls queue in FIFO order.
     */
    private static ExecutorService newExecutor(int maxBlocking) {
        java.util.concurrent.ThreadFactory tf = r -> {
            Thread t = new Thread(r, "dlock-jedis-wait-" + THREADS.incrementAndGet());
            t.setDaemon(true);
            return t;
        };
        if (maxBlocking == Integer.MAX_VALUE) {
            return Executors.newCachedThreadPool(tf);
        }
        java.util.concurrent.ThreadPoolExecutor ex = new java.util.concurrent.ThreadPoolExecutor(maxBlocking,
                maxBlocking, 30, java.util.concurrent.TimeUnit.SECONDS, new java.util.concurrent.LinkedBlockingQueue<>(),
                tf);
        ex.allowCoreThreadTimeOut(true);
        return ex;
    }

    /** Whether {@code o}'s class or one of its superclasses is named {@code className}. */
    private static boolean isA(Object o, String className) {
        for (Class<?> c = o.getClass(); c != null; c = c.getSuperclass()) {
            if (c.getName().equals(className)) {
                return true;
            }
        }
        return false;
    }

    /**
     * The connection pool of a pooled standalone client ({@code RedisClient} of Jedis 8,
     * {@code JedisPooled} of Jedis 6 and 7; both have {@code getPool()}), else null. Looked
     * up by name: neither class exists in every Jedis version.
     */
    @SuppressWarnings("unchecked") // getPool() is declared Pool<Connection> in both
    private static Pool<Connection> poolOf(UnifiedJedis jedis) {
        if (!isA(jedis, "redis.clients.jedis.RedisClient") && !isA(jedis, "redis.clients.jedis.JedisPooled")) {
            return null;
        }
        try {
            Object p = jedis.getClass().getMethod("getPool").invoke(jedis);
            return p instanceof Pool<?> ? (Pool<Connection>) p : null;
        } catch (NoSuchMethodException | IllegalAccessException | InvocationTargetException e) {
            return null; // no pool to wait on the caller's thread with: waits run on the executor
        }
    }

    private static final MethodHandle PIPELINED = pipelinedHandle();

    /**
     * {@code UnifiedJedis.pipelined()}, typed as {@link AbstractPipeline}: Jedis 6 declares
     * it returning {@code PipelineBase} (a subclass), Jedis 7 and 8 {@code AbstractPipeline},
     * so a call linked against one version's signature fails on the other.
     */
    private static MethodHandle pipelinedHandle() {
        try {
            return MethodHandles.publicLookup().unreflect(UnifiedJedis.class.getMethod("pipelined"))
                    .asType(MethodType.methodType(AbstractPipeline.class, UnifiedJedis.class));
        } catch (NoSuchMethodException | IllegalAccessException e) {
            throw new ExceptionInInitializerError(e);
        }
    }

    private AbstractPipeline pipelined() {
        try {
            return (AbstractPipeline) PIPELINED.invokeExact(jedis);
        } catch (RuntimeException | Error e) {
            throw e;
        } catch (Throwable t) {
            throw new DlockConnectionException("UnifiedJedis.pipelined() failed: " + t, t);
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
        BlockingCall call = new BlockingCall();
        long queued = System.nanoTime();
        try {
            executor.execute(() -> {
                try {
                    List<Object> r = blocking(call, commands, queued);
                    if (r != null) {
                        call.complete(r);
                    }
                } catch (RuntimeException e) {
                    call.completeExceptionally(e);
                }
            });
        } catch (java.util.concurrent.RejectedExecutionException e) {
            call.completeExceptionally(new DlockConnectionException("the transport is closed", e));
        }
        return call;
    }

    /**
     * Runs the commands on one pooled connection once a thread is free. A call that waited
     * more than 20 s for one answers nil (not granted in this slice: the caller asks
     * again), so the caller's bound on a slice holds; a call its caller gave up meanwhile
     * is not sent.
     */
    private List<Object> blocking(BlockingCall call, List<byte[][]> commands, long queuedNanos) {
        if (slots != null) {
            try {
                slots.acquire(); // waits held on callers' threads count too
            } catch (InterruptedException e) {
                // Only close() interrupts these threads.
                Thread.currentThread().interrupt();
                throw new DlockConnectionException("the transport is closed", e);
            }
        }
        try {
            return blockingInSlot(call, commands, queuedNanos);
        } finally {
            if (slots != null) {
                slots.release();
            }
        }
    }

    private List<Object> blockingInSlot(BlockingCall call, List<byte[][]> commands, long queuedNanos) {
        String first = name(commands.get(0));
        if (!call.markSent()) {
            return null;
        }
        if (System.nanoTime() - queuedNanos > 20_000_000_000L) {
            return new ArrayList<>(java.util.Collections.nCopies(commands.size(), null));
        }
        try {
            if (commands.size() == 1) {
                byte[][] a = commands.get(0);
                List<Object> out = new ArrayList<>(1);
                out.add(normalize(jedis.executeCommand(arguments(a, true))));
                return out;
            }
            try (AbstractPipeline p = pipelined()) {
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
        }
    }

    /**
     * Runs one waiting command on the calling thread when it is a platform thread (an
     * interrupt of a virtual thread blocked on a socket closes the socket), the client is a
     * pooled {@code RedisClient} and a waiting slot is free without overtaking queued
     * waits; else null (the caller uses {@link #callBlocking}). The read times out 30 s
     * after the server-side wait, as a wait on the executor's future does.
     */
    @Override
    public CompletableFuture<List<Object>> callBlockingOnCaller(byte[] key, byte[][] args, long waitMs) {
        if (pool == null || onVirtualThread()) {
            return null;
        }
        try {
            if (slots != null && !slots.tryAcquire(0, TimeUnit.SECONDS)) {
                return null;
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt(); // kept for later, as the wait keeps it
            return null;
        }
        try {
            return CompletableFuture.completedFuture(java.util.Collections.singletonList(waitHere(args, waitMs)));
        } catch (RuntimeException e) {
            return CompletableFuture.failedFuture(e);
        } finally {
            if (slots != null) {
                slots.release();
            }
        }
    }

    private Object waitHere(byte[][] args, long waitMs) {
        try (Connection c = pool.getResource()) {
            int before = c.getSoTimeout();
            c.setSoTimeout((int) Math.min(Integer.MAX_VALUE, waitMs + 30_000L));
            try {
                return normalize(c.executeCommand(arguments(args, false)));
            } finally {
                if (!c.isBroken()) {
                    c.setSoTimeout(before); // back to the pool with its own timeout, after an error reply too
                }
            }
        } catch (JedisDataException e) {
            throw Errors.fromServer(e.getMessage(), name(args));
        } catch (JedisException e) {
            throw new DlockConnectionException(name(args) + " failed: " + e.getMessage(), e);
        }
    }

    private static final MethodHandle IS_VIRTUAL = isVirtualHandle();

    /** {@code Thread::isVirtual} on Java 21 and later; null on 17, which has no virtual threads. */
    private static MethodHandle isVirtualHandle() {
        try {
            return MethodHandles.publicLookup().findVirtual(Thread.class, "isVirtual",
                    MethodType.methodType(boolean.class));
        } catch (NoSuchMethodException | IllegalAccessException e) {
            return null;
        }
    }

    private static boolean onVirtualThread() {
        if (IS_VIRTUAL == null) {
            return false;
        }
        try {
            return (boolean) IS_VIRTUAL.invokeExact(Thread.currentThread());
        } catch (Throwable t) {
            return true; // unknown: the executor's way is safe on any thread
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
