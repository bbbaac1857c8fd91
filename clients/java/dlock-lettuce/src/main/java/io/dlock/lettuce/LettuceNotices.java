package io.dlock.lettuce;

import io.dlock.spi.Notices;
import io.lettuce.core.cluster.SlotHash;
import io.lettuce.core.cluster.pubsub.StatefulRedisClusterPubSubConnection;
import io.lettuce.core.pubsub.RedisPubSubAdapter;
import io.lettuce.core.pubsub.StatefulRedisPubSubConnection;
import io.lettuce.core.pubsub.api.async.RedisPubSubAsyncCommands;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Supplier;

/**
 * The notice subscriber of a {@link LettuceTransport}: one Lettuce pub/sub connection (a
 * cluster pub/sub connection in a cluster, where channels go with {@code SSUBSCRIBE} to
 * the node of their slot). Lettuce reconnects it and subscribes its channels again by
 * itself; each confirmation tells the listener, whose holds are then checked. A
 * {@code PING} every few seconds finds a connection that went silent: it is then closed
 * and made anew. Connecting and subscribing run on one daemon thread of its own, so no
 * caller waits for them.
 */
final class LettuceNotices implements Notices {
    private static final AtomicLong THREADS = new AtomicLong();
    private static final long PING_MS = 5_000;
    /** How long creating the client waits for the subscriber's connection. */
    private static final long WARM_UP_MS = 5_000;

    private final Supplier<StatefulRedisPubSubConnection<byte[], byte[]>> connect;
    private final boolean cluster;
    private final Listener listener;
    private final ScheduledExecutorService timer;
    private final ExecutorService worker;
    private final ScheduledFuture<?> pinger;
    /** channel → whether it is sharded; the channels this client wants. */
    private final Map<String, Boolean> want = new ConcurrentHashMap<>();
    private final Map<String, byte[]> raw = new ConcurrentHashMap<>();
    /** Set on the worker thread (read by close()): the connection; the channels asked for on it (worker only). */
    private volatile StatefulRedisPubSubConnection<byte[], byte[]> conn;
    private final java.util.Set<String> active = new java.util.HashSet<>();
    private boolean retrying;
    private volatile boolean closed;

    LettuceNotices(Supplier<StatefulRedisPubSubConnection<byte[], byte[]>> connect, boolean cluster,
            Listener listener, ScheduledExecutorService timer) {
        this.connect = connect;
        this.cluster = cluster;
        this.listener = listener;
        this.timer = timer;
        this.worker = new ThreadPoolExecutor(0, 1, 30, TimeUnit.SECONDS, new LinkedBlockingQueue<>(), r -> {
            Thread t = new Thread(r, "dlock-lettuce-notices-" + THREADS.incrementAndGet());
            t.setDaemon(true);
            return t;
        });
        ScheduledFuture<?> p = null;
        try {
            p = timer.scheduleWithFixedDelay(() -> run(this::ping), PING_MS, PING_MS, TimeUnit.MILLISECONDS);
        } catch (RejectedExecutionException e) {
            // the client is closing
        }
        this.pinger = p;
        // Connected now, as the client's shared connection is (a first Lettuce pub/sub
        // connection, and its first subscription, take a while in a new JVM): the first
        // hold's subscription is then one round trip. A server that cannot be reached now
        // is tried again in the background.
        try {
            worker.submit(() -> {
                if (conn == null && ensure()) {
                    warmUp(conn);
                }
            }).get(WARM_UP_MS, TimeUnit.MILLISECONDS);
        } catch (java.util.concurrent.ExecutionException | java.util.concurrent.TimeoutException e) {
            // the subscriber connects in the background
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    /**
     * Worker thread: once through the subscription path on a new connection, with a channel
     * of its own (a new JVM loads and compiles that path on first use, which took ~400 ms
     * here), waited for up to the rest of {@link #WARM_UP_MS}.
     */
    private static void warmUp(StatefulRedisPubSubConnection<byte[], byte[]> c) {
        byte[] own = ("dlock:{}:warmup:" + System.identityHashCode(c)).getBytes(StandardCharsets.UTF_8);
        try {
            c.async().subscribe(own).thenCompose(v -> c.async().unsubscribe(own)).toCompletableFuture()
                    .get(WARM_UP_MS, TimeUnit.MILLISECONDS);
        } catch (java.util.concurrent.ExecutionException | java.util.concurrent.TimeoutException e) {
            // only a warm-up
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    private static String text(byte[] b) {
        return new String(b, StandardCharsets.ISO_8859_1);
    }

    private void run(Runnable task) {
        if (closed) {
            return;
        }
        try {
            worker.execute(() -> {
                if (!closed) {
                    task.run();
                }
            });
        } catch (RejectedExecutionException e) {
            // closed
        }
    }

    @Override
    public void subscribe(byte[] channel, byte[] key) {
        // In a cluster the module publishes with SPUBLISH when the channel hashes to the key's
        // slot, and with PUBLISH (seen on every node) for the odd key whose channel does not.
        boolean sharded = cluster && SlotHash.getSlot(channel) == SlotHash.getSlot(key);
        String c = text(channel);
        raw.put(c, channel);
        if (want.put(c, sharded) == null) {
            run(() -> {
                if (conn == null) {
                    ensure(); // a new connection subscribes to every channel wanted, this one too
                } else if (want.containsKey(c) && active.add(c)) {
                    send(true, sharded, channel);
                }
            });
        }
    }

    @Override
    public void unsubscribe(byte[] channel) {
        String c = text(channel);
        Boolean sharded = want.remove(c);
        if (sharded != null) {
            raw.remove(c);
            run(() -> {
                if (conn != null && !want.containsKey(c) && active.remove(c)) {
                    send(false, sharded, channel);
                }
            });
        }
    }

    private void send(boolean on, boolean sharded, byte[] channel) {
        RedisPubSubAsyncCommands<byte[], byte[]> a = conn.async();
        if (on) {
            (sharded ? a.ssubscribe(channel) : a.subscribe(channel)).exceptionally(e -> null);
        } else {
            (sharded ? a.sunsubscribe(channel) : a.unsubscribe(channel)).exceptionally(e -> null);
        }
    }

    /** Worker thread: makes the connection when there is none; false when that failed (tried again soon). */
    private boolean ensure() {
        if (conn != null) {
            return true;
        }
        try {
            StatefulRedisPubSubConnection<byte[], byte[]> c = connect.get();
            if (closed) {
                c.closeAsync();
                return false;
            }
            if (c instanceof StatefulRedisClusterPubSubConnection<byte[], byte[]> cc) {
                cc.setNodeMessagePropagation(true); // classic messages of the odd keys come from the nodes
            }
            c.addListener(new RedisPubSubAdapter<>() {
                @Override
                public void message(byte[] channel, byte[] message) {
                    listener.onMessage(channel, new String(message, StandardCharsets.UTF_8));
                }

                @Override
                public void smessage(byte[] channel, byte[] message) {
                    listener.onMessage(channel, new String(message, StandardCharsets.UTF_8));
                }

                @Override
                public void subscribed(byte[] channel, long count) {
                    if (want.containsKey(text(channel))) {
                        listener.onSubscribed(channel);
                    }
                }

                @Override
                public void ssubscribed(byte[] channel, long count) {
                    if (want.containsKey(text(channel))) {
                        listener.onSubscribed(channel);
                    }
                }
            });
            conn = c;
            active.clear();
            for (Map.Entry<String, Boolean> e : want.entrySet()) {
                byte[] ch = raw.get(e.getKey());
                if (ch != null && active.add(e.getKey())) {
                    send(true, e.getValue(), ch);
                }
            }
            return true;
        } catch (RuntimeException e) {
            retryLater();
            return false;
        }
    }

    private void retryLater() {
        if (retrying || closed) {
            return;
        }
        retrying = true;
        try {
            timer.schedule(() -> run(() -> {
                retrying = false;
                if (!want.isEmpty()) {
                    ensure();
                }
            }), 1, TimeUnit.SECONDS);
        } catch (RejectedExecutionException e) {
            retrying = false;
        }
    }

    /** Worker thread: a PING that gets no answer within the period closes the connection, which is then made anew. */
    private void ping() {
        StatefulRedisPubSubConnection<byte[], byte[]> c = conn;
        if (c == null) {
            if (!want.isEmpty()) {
                ensure();
            }
            return;
        }
        if (!c.isOpen()) {
            return; // Lettuce is reconnecting it
        }
        c.async().ping().toCompletableFuture().orTimeout(PING_MS, TimeUnit.MILLISECONDS).whenComplete((r, e) -> {
            if (e != null && !closed) {
                run(() -> {
                    if (conn == c) {
                        conn = null;
                        active.clear();
                        c.closeAsync();
                        ensure();
                    }
                });
            }
        });
    }

    @Override
    public void close() {
        closeNow();
    }

    /** {@link #close()}, with the pub/sub connection's closing to wait for. */
    java.util.concurrent.CompletableFuture<Void> closeNow() {
        closed = true;
        if (pinger != null) {
            pinger.cancel(false);
        }
        worker.shutdown();
        // Closed here, before the transport may shut the Lettuce client down (which would
        // close it too); a connection the worker makes after this closes itself.
        StatefulRedisPubSubConnection<byte[], byte[]> c = conn;
        conn = null;
        if (c != null && c.isOpen()) {
            return c.closeAsync();
        }
        return java.util.concurrent.CompletableFuture.completedFuture(null);
    }

}
