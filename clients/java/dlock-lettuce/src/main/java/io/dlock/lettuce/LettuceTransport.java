package io.dlock.lettuce;

import io.dlock.DlockConnectionException;
import io.dlock.core.Errors;
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
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ConcurrentLinkedDeque;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * A {@link Transport} over Lettuce: a {@link RedisClient} (standalone, or sentinel through a
 * {@code redis-sentinel://} URI) or a {@link RedisClusterClient}. Quick commands share one
 * multiplexed connection; a command that waits on the server takes a connection of its own
 * from a small pool (a blocked command would stall every other user of a shared one).
 * Everything is asynchronous underneath, so a waiting thread only waits on a future.
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

        void close() {
            if (owned) {
                c.close();
            }
        }
    }

    private final java.util.function.Supplier<Conn> connect;
    private final Runnable shutdown;
    private final Conn shared;
    private final Duration timeout;
    private final ConcurrentLinkedDeque<Conn> idle = new ConcurrentLinkedDeque<>();
    private final AtomicInteger idleCount = new AtomicInteger();
    private final String description;
    private volatile boolean closed;

    private LettuceTransport(java.util.function.Supplier<Conn> connect, Runnable shutdown, String description) {
        this.connect = connect;
        this.shutdown = shutdown;
        this.description = description;
        this.shared = connect.get();
        Duration t = shared.timeout();
        this.timeout = t == null || t.isZero() || t.isNegative() ? Duration.ofSeconds(60) : t;
    }

    /** A transport over a standalone or sentinel {@link RedisClient}; with {@code owned}, close shuts it down. */
    public static LettuceTransport of(RedisClient client, boolean owned) {
        return new LettuceTransport(() -> Conn.single(client.connect(ByteArrayCodec.INSTANCE)),
                owned ? client::shutdown : () -> { }, "Lettuce RedisClient");
    }

    /** A transport over a {@link RedisClusterClient}; with {@code owned}, close shuts it down. */
    public static LettuceTransport of(RedisClusterClient client, boolean owned) {
        return new LettuceTransport(() -> Conn.cluster(client.connect(ByteArrayCodec.INSTANCE)),
                owned ? client::shutdown : () -> { }, "Lettuce RedisClusterClient");
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
        try {
            return send(shared, args).get(timeout.toMillis(), TimeUnit.MILLISECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new DlockConnectionException(name(args) + " interrupted", e);
        } catch (ExecutionException e) {
            throw map(e, name(args));
        } catch (TimeoutException e) {
            throw new DlockConnectionException(name(args) + ": no reply within " + timeout, e);
        }
    }

    private Conn borrow() {
        Conn c;
        while ((c = idle.pollFirst()) != null) {
            idleCount.decrementAndGet();
            if (c.isOpen()) {
                return c;
            }
            c.close();
        }
        return connect.get();
    }

    private void giveBack(Conn c, boolean healthy) {
        if (!healthy || closed || !c.isOpen() || idleCount.incrementAndGet() > MAX_IDLE) {
            if (healthy && !closed && c.isOpen()) {
                idleCount.decrementAndGet();
            }
            c.close();
            return;
        }
        idle.addFirst(c);
    }

    @Override
    public CompletableFuture<List<Object>> callBlocking(byte[] key, List<byte[][]> commands) {
        CompletableFuture<List<Object>> result = new CompletableFuture<>();
        Conn pooled;
        Conn c;
        try {
            pooled = borrow();
            c = commands.size() > 1 ? pooled.forKey(key) : pooled;
        } catch (RuntimeException e) {
            result.completeExceptionally(map(e, name(commands.get(0))));
            return result;
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
            return result;
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
        return result;
    }

    private static boolean rootIsServerError(Throwable t) {
        Throwable c = t;
        while ((c instanceof ExecutionException || c instanceof CompletionException) && c.getCause() != null) {
            c = c.getCause();
        }
        return c instanceof RedisCommandExecutionException;
    }

    @Override
    public long maxBlockingMs() {
        return Math.max(1, timeout.toMillis() * 3 / 4);
    }

    @Override
    public String describe() {
        return description;
    }

    @Override
    public void close() {
        closed = true;
        Conn c;
        while ((c = idle.pollFirst()) != null) {
            c.close();
        }
        shared.close();
        shutdown.run();
    }
}
