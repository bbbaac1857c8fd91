package io.dlock.jedis;

import io.dlock.DlockConnectionException;
import io.dlock.core.Errors;
import io.dlock.spi.BlockingCall;
import io.dlock.spi.Notices;
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
import java.util.concurrent.Executor;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import redis.clients.jedis.AbstractPipeline;
import redis.clients.jedis.CommandArguments;
import redis.clients.jedis.Connection;
import redis.clients.jedis.ConnectionPool;
import redis.clients.jedis.JedisCluster;
import redis.clients.jedis.Response;
import redis.clients.jedis.UnifiedJedis;
import redis.clients.jedis.commands.ProtocolCommand;
import redis.clients.jedis.exceptions.JedisConnectionException;
import redis.clients.jedis.exceptions.JedisDataException;
import redis.clients.jedis.exceptions.JedisException;
import redis.clients.jedis.util.KeyValue;
import redis.clients.jedis.util.Pool;

/**
 * A {@link Transport} over a Jedis {@link UnifiedJedis}: {@code RedisClient} (pooled),
 * {@code RedisClusterClient}/{@code JedisCluster}, {@code RedisSentinelClient}. Commands
 * that wait on the server run on a connection of their own from the pool, on a small pool
 * of platform daemon threads, so the calling thread (virtual or not) only waits on a
 * future and can be interrupted. A wait that nothing interrupts ({@code lock()}) on a
 * platform thread of a pooled {@code RedisClient} runs on the calling thread instead,
 * within the same bound on connections that wait: the grant then wakes the caller itself,
 * one thread hand-over less.
 *
 * <p>Every server-side wait is sized to end within the connections' socket timeout (the
 * client's {@code timeoutMillis}/{@code socketTimeoutMillis}, 2 s by default), which this
 * transport reads from the connections it uses ({@link #replyTimeoutMs()}). A connection
 * that fails makes the pool drop its idle connections (after a server restart or a
 * {@code CLIENT KILL} they are all dead). The lock notices come on a connection of their
 * own ({@link #notices}).
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
    /** Runs {@link #callAsync} calls (renewals, checks, cancels): daemon threads, as many as are out. */
    private final ExecutorService async;
    /** The connections' socket timeout in ms, once a connection was seen (0: not yet). */
    private volatile int soTimeout;
    private volatile JedisNotices notices;
    /** Jedis' default socket timeout, assumed until a connection was seen. */
    private static final int DEFAULT_SO_TIMEOUT = 2_000;

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
        this.async = new java.util.concurrent.ThreadPoolExecutor(0, Integer.MAX_VALUE, 30, TimeUnit.SECONDS,
                new java.util.concurrent.SynchronousQueue<>(), r -> {
                    Thread t = new Thread(r, "dlock-jedis-call-" + THREADS.incrementAndGet());
                    t.setDaemon(true);
                    return t;
                });
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
            throw connectionFailed(name(args), e);
        }
    }

    /**
     * A connection failed: the pool's idle connections are dropped (after a restart, a
     * failover or a {@code CLIENT KILL} every one of them is dead, and each would fail one
     * more call), and the failure is wrapped.
     */
    private DlockConnectionException connectionFailed(String command, JedisException e) {
        if (e instanceof JedisConnectionException) {
            clearIdle();
        }
        return new DlockConnectionException(command + " failed: " + e.getMessage(), e);
    }

    /** Drops the idle connections of the pool (of every node's pool in a cluster); best effort. */
    private void clearIdle() {
        try {
            if (pool != null) {
                pool.clear();
            } else {
                clusterNodes().values().forEach(ConnectionPool::clear);
            }
        } catch (RuntimeException ignored) {
            // best effort
        }
    }

    /**
     * The node pools of a cluster client ({@code getClusterNodes()} of {@code JedisCluster}
     * and {@code RedisClusterClient}), or none; looked up by name, as the cluster client's
     * class differs between Jedis versions.
     */
    @SuppressWarnings("unchecked")
    private Map<String, ConnectionPool> clusterNodes() {
        if (!cluster) {
            return Map.of();
        }
        try {
            Object nodes = jedis.getClass().getMethod("getClusterNodes").invoke(jedis);
            return nodes instanceof Map<?, ?> m ? (Map<String, ConnectionPool>) m : Map.of();
        } catch (NoSuchMethodException | IllegalAccessException | InvocationTargetException e) {
            return Map.of();
        }
    }

    /** A pooled connection to the node serving {@code slot} ({@code getConnectionFromSlot}, by name). */
    private Connection connectionFromSlot(int slot) {
        try {
            return (Connection) jedis.getClass().getMethod("getConnectionFromSlot", int.class).invoke(jedis, slot);
        } catch (InvocationTargetException e) {
            if (e.getCause() instanceof JedisException je) {
                throw je;
            }
            throw new JedisConnectionException("getConnectionFromSlot(" + slot + ") failed: " + e.getCause(), e);
        } catch (NoSuchMethodException | IllegalAccessException e) {
            throw new JedisConnectionException("this cluster client has no getConnectionFromSlot", e);
        }
    }

    /**
     * This transport's daemon threads, one per call out, for {@link #callAsync}: a stalled
     * call holds up only its own thread (and ends at the socket timeout, when its connection
     * is dropped).
     */
    @Override
    public Executor asyncExecutor() {
        return async;
    }

    /**
     * The retry of a failed release: the pool's idle connections (which may be as dead as
     * the one that failed) are dropped first, so the call goes on a new connection.
     */
    @Override
    public Object callFresh(byte[] key, byte[][] args) {
        clearIdle();
        return call(key, args);
    }

    /**
     * The connections' socket timeout (Jedis' reply timeout), as read from the connections
     * this transport used; Jedis' default of 2000 ms until one was seen.
     */
    @Override
    public long replyTimeoutMs() {
        int t = soTimeout;
        return t > 0 ? t : t < 0 ? Long.MAX_VALUE : DEFAULT_SO_TIMEOUT;
    }

    /** Notes the socket timeout of {@code c} (0, no timeout, is kept as -1). */
    private void learn(Connection c) {
        if (soTimeout == 0) {
            int t = c.getSoTimeout();
            soTimeout = t > 0 ? t : -1;
        }
    }

    /** Notes the socket timeout from a pooled connection, if none was seen yet (off the caller's thread). */
    private void learnFromPool() {
        if (soTimeout != 0) {
            return;
        }
        try {
            Pool<Connection> p = pool;
            if (p == null) {
                p = clusterNodes().values().stream().findFirst().orElse(null);
            }
            if (p != null) {
                try (Connection c = p.getResource()) {
                    learn(c);
                }
            }
        } catch (RuntimeException e) {
            // not now: the default stands
        }
    }

    /** Whether a server-side wait of {@code waitMs} fits the socket timeout with its margin. */
    private boolean fits(long waitMs) {
        int t = soTimeout;
        return t < 0 || (t > 0 && waitMs <= io.dlock.core.Leases.slice(Long.MAX_VALUE, t));
    }

    /** The server-side wait a command asks for: its {@code WAIT ms}, and a pipelined {@code WAIT n ms}'s timeout. */
    private static long waitOf(List<byte[][]> commands) {
        long total = 0;
        for (byte[][] a : commands) {
            if (Arrays.equals(a[0], WAIT)) {
                total += a.length > 2 ? parse(a[2]) : 0;
                continue;
            }
            for (int i = 2; i + 1 < a.length; i++) {
                if (Arrays.equals(a[i], WAIT)) {
                    total += parse(a[i + 1]);
                }
            }
        }
        return total;
    }

    private static final byte[] WAIT = "WAIT".getBytes(StandardCharsets.US_ASCII);

    private static long parse(byte[] b) {
        try {
            return Long.parseLong(new String(b, StandardCharsets.US_ASCII));
        } catch (NumberFormatException e) {
            return 0;
        }
    }

    /**
     * The subscriber for lock notices: a connection of its own from the client's connection
     * factory (standalone {@code RedisClient}; in a cluster, one per node, with
     * {@code SSUBSCRIBE}), or for other clients (sentinel, …) a connection the client itself
     * subscribes with.
     */
    @Override
    public synchronized Notices notices(Notices.Listener listener, ScheduledExecutorService timer) {
        JedisNotices.Connector connector;
        if (cluster) {
            connector = new JedisNotices.Connector() {
                @Override
                public String node(byte[] slotKey) {
                    int slot = redis.clients.jedis.util.JedisClusterCRC16.getSlot(slotKey);
                    try (Connection c = connectionFromSlot(slot)) {
                        return c.getHostAndPort().toString();
                    }
                }

                @Override
                public Connection connect(String node) {
                    ConnectionPool p = clusterNodes().get(node);
                    if (p == null) {
                        throw new JedisConnectionException("no cluster node " + node);
                    }
                    return fresh(p);
                }

                @Override
                public void subscribe(redis.clients.jedis.BinaryJedisPubSub pubsub, byte[][] channels) {
                    jedis.subscribe(pubsub, channels);
                }
            };
        } else {
            connector = JedisNotices.standalone(jedis, pool == null ? null : () -> fresh(pool));
        }
        JedisNotices n = new JedisNotices(connector, cluster, listener, timer);
        notices = n;
        return n;
    }

    /** {@code PUBLISH}, or in a cluster {@code SPUBLISH} when the channel is in the key's slot (as the subscriber listens). */
    @Override
    public void publish(byte[] key, byte[] channel, String message) {
        boolean sharded = cluster && redis.clients.jedis.util.JedisClusterCRC16.getSlot(channel)
                == redis.clients.jedis.util.JedisClusterCRC16.getSlot(key);
        call(key, new byte[][] {(sharded ? "SPUBLISH" : "PUBLISH").getBytes(StandardCharsets.US_ASCII), channel,
            message.getBytes(StandardCharsets.UTF_8)});
    }

    /**
     * A new connection made by {@code p}'s factory (the client's settings), outside the
     * pool; null where commons-pool2 is older than 2.12 (no {@code getFactory()}), and the
     * subscriber then subscribes through the client itself (on a pooled connection).
     */
    private Connection fresh(Pool<Connection> p) {
        org.apache.commons.pool2.PooledObjectFactory<Connection> factory;
        try {
            factory = p.getFactory();
        } catch (LinkageError e) {
            return null;
        }
        try {
            Connection c = factory.makeObject().getObject();
            learn(c);
            return c;
        } catch (JedisException e) {
            throw e;
        } catch (Exception e) {
            throw new JedisConnectionException("could not connect: " + e.getMessage(), e);
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
        learnFromPool();
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
                // A wait that fits the socket timeout keeps it (a silent server is then noticed);
                // one that does not (a custom timeout not seen yet) is sent as a blocking command.
                out.add(normalize(jedis.executeCommand(arguments(a, !fits(waitOf(commands))))));
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
            throw connectionFailed(first, e);
        }
    }

    /**
     * Runs one waiting command on the calling thread when it is a platform thread (an
     * interrupt of a virtual thread blocked on a socket closes the socket), the client is a
     * pooled {@code RedisClient} and a waiting slot is free without overtaking queued
     * waits; else null (the caller uses {@link #callBlocking}). The read keeps the
     * connection's socket timeout when the wait fits it, as every slice does once the
     * timeout is known.
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
            learn(c);
            int before = c.getSoTimeout();
            boolean raise = before > 0 && !fits(waitMs);
            if (raise) {
                c.setSoTimeout((int) Math.min(Integer.MAX_VALUE, waitMs + Math.max(100, before)));
            }
            try {
                return normalize(c.executeCommand(arguments(args, false)));
            } finally {
                if (raise && !c.isBroken()) {
                    c.setSoTimeout(before); // back to the pool with its own timeout, after an error reply too
                }
            }
        } catch (JedisDataException e) {
            throw Errors.fromServer(e.getMessage(), name(args));
        } catch (JedisException e) {
            throw connectionFailed(name(args), e);
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
        JedisNotices n = notices;
        if (n != null) {
            n.close();
        }
        executor.shutdownNow();
        async.shutdownNow();
        if (owned) {
            jedis.close();
        }
    }
}
