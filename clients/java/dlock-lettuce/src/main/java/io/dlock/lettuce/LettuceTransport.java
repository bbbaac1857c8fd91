package io.dlock.lettuce;

import io.dlock.DlockConnectionException;
import io.dlock.core.Errors;
import io.dlock.spi.Notices;
import io.dlock.spi.Transport;
import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisCommandExecutionException;
import io.lettuce.core.RedisFuture;
import io.lettuce.core.api.StatefulConnection;
import io.lettuce.core.api.async.BaseRedisAsyncCommands;
import io.lettuce.core.api.StatefulRedisConnection;
import io.lettuce.core.cluster.RedisClusterClient;
import io.lettuce.core.cluster.SlotHash;
import io.lettuce.core.cluster.api.StatefulRedisClusterConnection;
import io.lettuce.core.cluster.models.partitions.RedisClusterNode;
import io.lettuce.core.codec.ByteArrayCodec;
import io.lettuce.core.protocol.CommandArgs;
import io.lettuce.core.protocol.ProtocolKeyword;
import io.lettuce.core.pubsub.StatefulRedisPubSubConnection;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ConcurrentLinkedDeque;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.SynchronousQueue;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.Supplier;

/**
 * A {@link Transport} over Lettuce: a {@link RedisClient} (standalone, or sentinel through a
 * {@code redis-sentinel://} URI) or a {@link RedisClusterClient}. Quick commands share one
 * multiplexed connection; a command that waits on the server takes a connection of its own
 * from a small pool (a blocked command would stall every other user of a shared one).
 * Everything is asynchronous underneath, so a waiting thread only waits on a future, and
 * connections are made on daemon threads of this transport (a caller with a deadline never
 * waits for a connect longer than its deadline).
 *
 * <p>The reply timeout is the connection's command timeout ({@code RedisURI.setTimeout},
 * 60 s by default); every server-side wait slice ends well within it. A command on the
 * shared connection that this client gave up on (a renewal past its hold's lease clock)
 * and that has no reply a second later either makes a new shared connection: Lettuce
 * keeps a timed-out command in line for the next reply, so after a partition that lost
 * bytes heals, every later reply on that connection would go to the command before it.
 * While Lettuce reconnects the shared connection, a call fails at once rather than queue
 * until it is back (renewals and checks wait for it, within their bounds).
 */
public final class LettuceTransport implements Transport {
    private static final int MAX_IDLE = 64;
    private static final byte[] WAIT = "WAIT".getBytes(StandardCharsets.US_ASCII);

    /**
     * A connection of either kind, as far as this transport needs it: {@code cluster} is set
     * for a cluster connection (commands go to the node serving their key); {@code owned}
     * connections are closed by {@link #close()} (a node's belongs to its cluster connection).
     */
    private record Conn(StatefulConnection<byte[], byte[]> c, BaseRedisAsyncCommands<byte[], byte[]> async,
            StatefulRedisClusterConnection<byte[], byte[]> cluster, boolean owned) {
        static Conn single(StatefulRedisConnection<byte[], byte[]> c) {
            return new Conn(c, c.async(), null, true);
        }

        static Conn cluster(StatefulRedisClusterConnection<byte[], byte[]> c) {
            return new Conn(c, c.async(), c, true);
        }

        <T> RedisFuture<T> dispatch(ProtocolKeyword type, io.lettuce.core.output.CommandOutput<byte[], byte[], T> out,
                CommandArgs<byte[], byte[]> args) {
            return async.dispatch(type, out, args);
        }

        /** The connection to the node serving {@code key} (itself when not a cluster). */
        Conn forKey(byte[] key) {
            if (cluster == null) {
                return this;
            }
            RedisClusterNode node = cluster.getPartitions().getMasterBySlot(SlotHash.getSlot(key));
            if (node == null) {
                throw new DlockConnectionException("no cluster node serves slot " + SlotHash.getSlot(key), null);
            }
            StatefulRedisConnection<byte[], byte[]> nc = cluster.getConnection(node.getNodeId());
            return new Conn(nc, nc.async(), null, false);
        }

        boolean isOpen() {
            return c.isOpen();
        }

        Duration timeout() {
            return c.getTimeout();
        }

        /**
         * Closes the connection without waiting: this runs on Lettuce's event loop too (a
         * command's completion), where a blocking close would wait for that very loop. One
         * that is not open (Lettuce reconnects it) is closed too, unless {@code quiet}: after
         * this transport closed, the Lettuce client's own shutdown may have closed it.
         */
        CompletableFuture<Void> close(boolean quiet) {
            if (owned && (c.isOpen() || !quiet)) {
                return c.closeAsync();
            }
            return CompletableFuture.completedFuture(null);
        }
    }

    private static final AtomicLong THREADS = new AtomicLong();
    /** How long a command given up by its caller may still wait for its reply before its connection counts as stalled. */
    private static final long STALL_MS = 1_000;
    private final Supplier<Conn> connect;
    private final Supplier<StatefulRedisPubSubConnection<byte[], byte[]>> connectPubSub;
    private final boolean cluster;
    private final Runnable shutdown;
    /** The shared connection (a new one is made after a command on it was given up). */
    private final AtomicReference<CompletableFuture<Conn>> shared = new AtomicReference<>();
    private final Duration timeout;
    private final ConcurrentLinkedDeque<Conn> idle = new ConcurrentLinkedDeque<>();
    private final AtomicInteger idleCount = new AtomicInteger();
    /** Makes connections (Lettuce's connect blocks the calling thread until it is up or failed). */
    private final ExecutorService connector;
    private final String description;
    private volatile LettuceNotices notices;
    private volatile boolean closed;

    private LettuceTransport(Supplier<Conn> connect, Supplier<StatefulRedisPubSubConnection<byte[], byte[]>> pubSub,
            boolean cluster, Runnable shutdown, String description) {
        this.connect = connect;
        this.connectPubSub = pubSub;
        this.cluster = cluster;
        this.shutdown = shutdown;
        this.description = description;
        this.connector = new ThreadPoolExecutor(0, Integer.MAX_VALUE, 30, TimeUnit.SECONDS, new SynchronousQueue<>(),
                r -> {
                    Thread t = new Thread(r, "dlock-lettuce-connect-" + THREADS.incrementAndGet());
                    t.setDaemon(true);
                    return t;
                });
        Conn first = connect.get();
        this.shared.set(CompletableFuture.completedFuture(first));
        Duration t = first.timeout();
        this.timeout = t == null || t.isZero() || t.isNegative() ? Duration.ofSeconds(60) : t;
    }

    /** A transport over a standalone or sentinel {@link RedisClient}; with {@code owned}, close shuts it down. */
    public static LettuceTransport of(RedisClient client, boolean owned) {
        return new LettuceTransport(() -> Conn.single(client.connect(ByteArrayCodec.INSTANCE)),
                () -> client.connectPubSub(ByteArrayCodec.INSTANCE), false,
                owned ? client::shutdown : () -> { }, "Lettuce RedisClient");
    }

    /** A transport over a {@link RedisClusterClient}; with {@code owned}, close shuts it down. */
    public static LettuceTransport of(RedisClusterClient client, boolean owned) {
        return new LettuceTransport(() -> Conn.cluster(client.connect(ByteArrayCodec.INSTANCE)),
                () -> client.connectPubSub(ByteArrayCodec.INSTANCE), true,
                owned ? client::shutdown : () -> { }, "Lettuce RedisClusterClient");
    }

    /** A new connection, made on a thread of this transport. */
    private CompletableFuture<Conn> connectAsync() {
        try {
            return CompletableFuture.supplyAsync(connect, connector);
        } catch (java.util.concurrent.RejectedExecutionException e) {
            return CompletableFuture.failedFuture(new DlockConnectionException("the transport is closed", e));
        }
    }

    /** The shared connection, or a future one; a failed connect is tried anew. */
    private CompletableFuture<Conn> shared() {
        while (true) {
            CompletableFuture<Conn> cur = shared.get();
            if (!cur.isCompletedExceptionally()) {
                return cur;
            }
            CompletableFuture<Conn> next = connectAsync();
            if (shared.compareAndSet(cur, next)) {
                return next;
            }
        }
    }

    /**
     * The shared connection {@code c} went silent: the replies on it may be out of step with
     * its commands, so the shared connection is made anew (and {@code c} closed; commands
     * still out on it fail as on a lost connection).
     */
    private void suspect(Conn c) {
        CompletableFuture<Conn> cur = shared.get();
        if (c != null && cur.isDone() && !cur.isCompletedExceptionally() && cur.join() == c && !closed) {
            if (shared.compareAndSet(cur, connectAsync())) {
                c.close(closed);
            }
        }
    }

    /**
     * Sends {@code args} on the shared connection: at once, or as soon as a new one is up;
     * {@code sentOn} is set to the connection it went on. With {@code failFast}, a
     * connection that Lettuce is reconnecting fails the command at once; without, Lettuce
     * sends it once reconnected (the caller bounds the wait).
     */
    private CompletableFuture<Object> sendShared(byte[][] args, boolean failFast, AtomicReference<Conn> sentOn) {
        return shared().thenCompose(c -> {
            if (failFast && !c.isOpen()) {
                // Lettuce is reconnecting it: a command would wait for that (up to the
                // command timeout) rather than fail.
                return CompletableFuture.failedFuture(new DlockConnectionException(name(args) + ": not connected to "
                        + description + " (Lettuce is reconnecting)", null));
            }
            if (!c.isOpen()) {
                return sendDedicated(args); // rather than wait for Lettuce's reconnect
            }
            sentOn.set(c);
            return send(c, args).toCompletableFuture().whenComplete((v, e) -> {
                if (e != null && rootIsTimeout(e)) {
                    suspect(c); // Lettuce's own command timeout
                }
            });
        });
    }

    /** Sends {@code args} on a waiting connection of the pool (idle, or a new one), given back after its reply. */
    private CompletableFuture<Object> sendDedicated(byte[][] args) {
        return borrow().thenCompose(p -> send(p, args).toCompletableFuture().whenComplete((v, e) ->
                giveBack(p, e == null || rootIsServerError(e))));
    }

    /**
     * A caller gave up on {@code f} (sent on {@code sentOn}). Lettuce keeps the command in
     * line for the next reply; when no reply comes within {@link #STALL_MS} more (a
     * connection that lost bytes, as behind a proxy that dropped them, never sends one),
     * the shared connection is made anew, or every later reply on it would go to the
     * command before.
     */
    private void gaveUp(CompletableFuture<Object> f, AtomicReference<Conn> sentOn) {
        if (f.isDone()) {
            return;
        }
        CompletableFuture.delayedExecutor(STALL_MS, TimeUnit.MILLISECONDS).execute(() -> {
            if (!f.isDone()) {
                suspect(sentOn.get());
            }
        });
    }

    private static boolean rootIsTimeout(Throwable t) {
        Throwable c = t;
        while ((c instanceof ExecutionException || c instanceof CompletionException) && c.getCause() != null) {
            c = c.getCause();
        }
        return c instanceof io.lettuce.core.RedisCommandTimeoutException || c instanceof TimeoutException;
    }

    private record Kw(byte[] bytes, String label) implements ProtocolKeyword {
        @Override
        public byte[] getBytes() {
            return bytes;
        }

        @Override
        public String toString() {
            return label;
        }
    }

    private static String name(byte[][] args) {
        return new String(args[0], StandardCharsets.UTF_8);
    }

    private static RedisFuture<Object> send(Conn c, byte[][] a) {
        CommandArgs<byte[], byte[]> args = new CommandArgs<>(ByteArrayCodec.INSTANCE);
        boolean keyed = !java.util.Arrays.equals(a[0], WAIT);
        for (int i = 1; i < a.length; i++) {
            if (i == 1 && keyed) {
                args.addKey(a[i]);
            } else {
                args.add(a[i]);
            }
        }
        return c.dispatch(new Kw(a[0], name(a)), new AnyOutput(), args);
    }

    private static RuntimeException map(Throwable t, String command) {
        Throwable c = t;
        while ((c instanceof ExecutionException || c instanceof CompletionException) && c.getCause() != null) {
            c = c.getCause();
        }
        if (c instanceof RedisCommandExecutionException e) {
            return Errors.fromServer(e.getMessage(), command);
        }
        if (c instanceof io.dlock.DlockException d) {
            return d;
        }
        return new DlockConnectionException(command + " failed: " + c, c);
    }

    @Override
    public Object call(byte[] key, byte[][] args) {
        return call(key, args, timeout.toMillis());
    }

    /** {@link #call} bounded by {@code timeoutMs} as well as the command timeout. */
    @Override
    public Object call(byte[] key, byte[][] args, long timeoutMs) {
        long bound = Math.max(1, Math.min(timeoutMs, timeout.toMillis()));
        AtomicReference<Conn> sentOn = new AtomicReference<>();
        CompletableFuture<Object> f = sendShared(args, true, sentOn);
        try {
            return f.get(bound, TimeUnit.MILLISECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new DlockConnectionException(name(args) + " interrupted", e);
        } catch (ExecutionException e) {
            throw map(e, name(args));
        } catch (TimeoutException e) {
            gaveUp(f, sentOn);
            throw new DlockConnectionException(name(args) + ": no reply from " + description + " within " + bound
                    + " ms", e);
        }
    }

    /**
     * The command on the shared connection, without blocking; given up after
     * {@code timeoutMs}. While Lettuce reconnects the shared connection, the command goes on
     * a connection of the waiting pool: a renewal or a check right after a
     * {@code CLIENT KILL} goes through at once.
     */
    @Override
    public CompletableFuture<Object> callAsync(byte[] key, byte[][] args, long timeoutMs) {
        long bound = Math.max(1, Math.min(timeoutMs, timeout.toMillis()));
        AtomicReference<Conn> sentOn = new AtomicReference<>();
        CompletableFuture<Object> f = sendShared(args, false, sentOn);
        CompletableFuture<Object> out = new CompletableFuture<>();
        f.whenComplete((v, e) -> {
            if (e != null) {
                out.completeExceptionally(map(e, name(args)));
            } else {
                out.complete(v);
            }
        });
        out.orTimeout(bound, TimeUnit.MILLISECONDS).whenComplete((v, e) -> {
            if (e instanceof TimeoutException) {
                gaveUp(f, sentOn);
            }
        });
        return out;
    }

    /** The retry of a failed release: on a connection opened for it, then closed. */
    @Override
    public Object callFresh(byte[] key, byte[][] args) {
        Conn c;
        try {
            c = connectAsync().get(timeout.toMillis(), TimeUnit.MILLISECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new DlockConnectionException(name(args) + " interrupted", e);
        } catch (ExecutionException | TimeoutException e) {
            throw map(e, name(args));
        }
        try {
            Conn target = c.forKey(key);
            return send(target, args).get(timeout.toMillis(), TimeUnit.MILLISECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new DlockConnectionException(name(args) + " interrupted", e);
        } catch (ExecutionException e) {
            throw map(e, name(args));
        } catch (TimeoutException e) {
            throw new DlockConnectionException(name(args) + ": no reply within " + timeout, e);
        } catch (RuntimeException e) {
            throw map(e, name(args));
        } finally {
            c.close(closed);
        }
    }

    /** An idle waiting connection, or a new one (made on a thread of this transport). */
    private CompletableFuture<Conn> borrow() {
        Conn c;
        while ((c = idle.pollFirst()) != null) {
            idleCount.decrementAndGet();
            if (c.isOpen()) {
                return CompletableFuture.completedFuture(c);
            }
            c.close(closed);
        }
        return connectAsync();
    }

    private void giveBack(Conn c, boolean healthy) {
        if (!healthy || closed || !c.isOpen() || idleCount.incrementAndGet() > MAX_IDLE) {
            if (healthy && !closed && c.isOpen()) {
                idleCount.decrementAndGet();
            }
            c.close(closed);
            return;
        }
        idle.addFirst(c);
    }

    @Override
    public CompletableFuture<List<Object>> callBlocking(byte[] key, List<byte[][]> commands) {
        CompletableFuture<List<Object>> result = new CompletableFuture<>();
        borrow().whenComplete((pooled, connectError) -> {
            if (connectError != null) {
                result.completeExceptionally(map(connectError, name(commands.get(0))));
                return;
            }
            if (closed || result.isDone()) {
                giveBack(pooled, true);
                if (!result.isDone()) {
                    result.completeExceptionally(new DlockConnectionException("the transport is closed", null));
                }
                return;
            }
            Conn c;
            try {
                c = commands.size() > 1 ? pooled.forKey(key) : pooled;
            } catch (RuntimeException e) {
                giveBack(pooled, true);
                result.completeExceptionally(map(e, name(commands.get(0))));
                return;
            }
            if (commands.size() == 1) {
                // The common case (an acquire with WAIT): one future, completed on the reply.
                byte[][] a = commands.get(0);
                send(c, a).whenComplete((v, err) -> {
                    giveBack(pooled, err == null || rootIsServerError(err));
                    if (err != null) {
                        result.completeExceptionally(map(err, name(a)));
                    } else {
                        result.complete(java.util.Collections.singletonList(v));
                    }
                });
                return;
            }
            List<CompletableFuture<Object>> fs = new ArrayList<>(commands.size());
            for (byte[][] a : commands) {
                fs.add(send(c, a).toCompletableFuture());
            }
            CompletableFuture.allOf(fs.toArray(new CompletableFuture<?>[0])).whenComplete((v, err) -> {
                boolean healthy = err == null || rootIsServerError(err);
                giveBack(pooled, healthy);
                if (err != null) {
                    result.completeExceptionally(map(err, name(commands.get(0))));
                    return;
                }
                List<Object> out = new ArrayList<>(fs.size());
                for (CompletableFuture<Object> f : fs) {
                    out.add(f.join());
                }
                result.complete(out);
            });
        });
        return result;
    }

    private static boolean rootIsServerError(Throwable t) {
        Throwable c = t;
        while ((c instanceof ExecutionException || c instanceof CompletionException) && c.getCause() != null) {
            c = c.getCause();
        }
        return c instanceof RedisCommandExecutionException;
    }

    /** The connection's command timeout (Lettuce's reply timeout; 60 s by default). */
    @Override
    public long replyTimeoutMs() {
        return timeout.toMillis();
    }

    /** {@code PUBLISH}, or in a cluster {@code SPUBLISH} when the channel is in the key's slot (as the subscriber listens). */
    @Override
    public void publish(byte[] key, byte[] channel, String message) {
        boolean sharded = cluster && SlotHash.getSlot(channel) == SlotHash.getSlot(key);
        call(key, new byte[][] {(sharded ? "SPUBLISH" : "PUBLISH").getBytes(StandardCharsets.US_ASCII), channel,
            message.getBytes(StandardCharsets.UTF_8)});
    }

    /**
     * The subscriber for lock notices: one Lettuce pub/sub connection, made on a thread of
     * its own ({@code SSUBSCRIBE} through a cluster pub/sub connection in a cluster).
     */
    @Override
    public synchronized Notices notices(Notices.Listener listener, ScheduledExecutorService timer) {
        LettuceNotices n = new LettuceNotices(connectPubSub, cluster, listener, timer);
        notices = n;
        return n;
    }

    @Override
    public String describe() {
        return description;
    }

    /**
     * Closes this transport's connections (and the client, when owned), waiting up to 2 s
     * for them to be closed: a Lettuce client shut down right after would close them
     * again, and say so in its log.
     */
    @Override
    public void close() {
        closed = true;
        List<CompletableFuture<Void>> closing = new ArrayList<>();
        LettuceNotices n = notices;
        if (n != null) {
            closing.add(n.closeNow());
        }
        Conn c;
        while ((c = idle.pollFirst()) != null) {
            closing.add(c.close(true));
        }
        CompletableFuture<Conn> s = shared.get();
        if (s.isDone() && !s.isCompletedExceptionally()) {
            closing.add(s.join().close(false));
        } else {
            s.thenAccept(x -> x.close(false));
        }
        try {
            CompletableFuture.allOf(closing.toArray(new CompletableFuture<?>[0])).get(2, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        } catch (ExecutionException | TimeoutException e) {
            // closed anyway
        }
        connector.shutdown();
        shutdown.run();
    }

}
