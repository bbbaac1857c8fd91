package io.dlock.jedis;

import io.dlock.spi.Notices;
import java.nio.charset.StandardCharsets;
import java.util.HashSet;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Supplier;
import redis.clients.jedis.BinaryJedisPubSub;
import redis.clients.jedis.BinaryJedisShardedPubSub;
import redis.clients.jedis.Connection;
import redis.clients.jedis.UnifiedJedis;
import redis.clients.jedis.util.JedisClusterCRC16;

/**
 * The notice subscriber of a {@link JedisTransport}: one connection of its own (made by
 * the client's connection factory, so with its settings, and outside its pool) and one
 * daemon thread reading it; in a cluster, one per node, with {@code SSUBSCRIBE}. A
 * connection that fails is made anew and every channel subscribed again (each
 * confirmation tells the listener, whose holds are then checked). A {@code PING} every
 * few seconds finds a standalone subscriber whose connection went silent.
 */
final class JedisNotices implements Notices {
    private static final AtomicLong THREADS = new AtomicLong();
    private static final long PING_NANOS = 5_000_000_000L;

    /** Where a subscriber's connection comes from, for a channel's routing key. */
    interface Connector {
        /** The node that a subscription for {@code slotKey} goes to (one subscriber per node). */
        String node(byte[] slotKey);

        /** A new connection to {@code node}, or null when this connector cannot make one (then {@link #subscribe} is used). */
        Connection connect(String node);

        /** Subscribes {@code pubsub} to {@code channels} through the client itself (blocks until unsubscribed). */
        void subscribe(BinaryJedisPubSub pubsub, byte[][] channels);
    }

    private final Connector connector;
    private final boolean cluster;
    private final Listener listener;
    private final ScheduledFuture<?> pinger;
    private final Map<String, Subscriber> subscribers = new ConcurrentHashMap<>();
    /** channel → the subscriber it was given to. */
    private final Map<String, Subscriber> byChannel = new ConcurrentHashMap<>();
    private volatile boolean closed;

    JedisNotices(Connector connector, boolean cluster, Listener listener, ScheduledExecutorService timer) {
        this.connector = connector;
        this.cluster = cluster;
        this.listener = listener;
        ScheduledFuture<?> p = null;
        try {
            p = timer.scheduleWithFixedDelay(this::ping, PING_NANOS, PING_NANOS, TimeUnit.NANOSECONDS);
        } catch (java.util.concurrent.RejectedExecutionException e) {
            // the client is closing
        }
        this.pinger = p;
    }

    static Connector standalone(UnifiedJedis jedis, Supplier<Connection> connect) {
        return new Connector() {
            @Override
            public String node(byte[] slotKey) {
                return "";
            }

            @Override
            public Connection connect(String node) {
                return connect == null ? null : connect.get();
            }

            @Override
            public void subscribe(BinaryJedisPubSub pubsub, byte[][] channels) {
                jedis.subscribe(pubsub, channels);
            }
        };
    }

    private static String text(byte[] b) {
        return new String(b, StandardCharsets.ISO_8859_1);
    }

    @Override
    public void subscribe(byte[] channel, byte[] key) {
        if (closed) {
            return;
        }
        // In a cluster the module publishes with SPUBLISH when the channel hashes to the
        // key's slot, and with PUBLISH (seen on every node) for the odd key whose channel does not.
        boolean sharded = cluster && JedisClusterCRC16.getSlot(channel) == JedisClusterCRC16.getSlot(key);
        String node;
        try {
            node = connector.node(key);
        } catch (RuntimeException e) {
            node = "?"; // retried when the subscriber connects
        }
        String id = (sharded ? "s:" : "c:") + node;
        Subscriber s = subscribers.computeIfAbsent(id, n -> new Subscriber(n, key, sharded));
        byChannel.put(text(channel), s);
        s.add(channel);
    }

    @Override
    public void unsubscribe(byte[] channel) {
        Subscriber s = byChannel.remove(text(channel));
        if (s != null) {
            s.remove(channel);
        }
    }

    @Override
    public void close() {
        closed = true;
        if (pinger != null) {
            pinger.cancel(false);
        }
        for (Subscriber s : subscribers.values()) {
            s.close();
        }
        subscribers.clear();
        byChannel.clear();
    }

    private void ping() {
        for (Subscriber s : subscribers.values()) {
            s.ping();
        }
    }

    /** One subscriber connection and the daemon thread that reads it. */
    private final class Subscriber implements Runnable {
        final String id;
        final byte[] slotKey;
        final boolean sharded;
        final Set<String> want = ConcurrentHashMap.newKeySet();
        final Map<String, byte[]> raw = new ConcurrentHashMap<>();
        /** Guarded by this: channels asked for on the current connection. */
        final Set<String> requested = new HashSet<>();
        final Thread thread;
        volatile Object pubsub;
        volatile Connection conn;
        volatile long pingSent;
        volatile long pongSeen;

        Subscriber(String id, byte[] slotKey, boolean sharded) {
            this.id = id;
            this.slotKey = slotKey;
            this.sharded = sharded;
            this.thread = new Thread(this, "dlock-jedis-notices-" + THREADS.incrementAndGet());
            thread.setDaemon(true);
            thread.start();
        }

        void add(byte[] channel) {
            String c = text(channel);
            raw.put(c, channel);
            if (want.add(c)) {
                synchronized (this) {
                    if (subscribedNow() && requested.add(c)) {
                        send(true, channel);
                    }
                    notifyAll();
                }
            }
        }

        void remove(byte[] channel) {
            String c = text(channel);
            if (want.remove(c)) {
                raw.remove(c);
                synchronized (this) {
                    if (subscribedNow() && requested.remove(c)) {
                        send(false, channel);
                    }
                }
            }
        }

        private boolean subscribedNow() {
            Object p = pubsub;
            return p instanceof BinaryJedisPubSub b ? b.isSubscribed()
                    : p instanceof BinaryJedisShardedPubSub s && s.isSubscribed();
        }

        /** (Un)subscribes on the current connection; a failure ends that connection (the loop makes a new one). */
        private void send(boolean on, byte[] channel) {
            try {
                Object p = pubsub;
                if (p instanceof BinaryJedisPubSub b) {
                    if (on) {
                        b.subscribe(channel);
                    } else {
                        b.unsubscribe(channel);
                    }
                } else if (p instanceof BinaryJedisShardedPubSub s) {
                    if (on) {
                        s.ssubscribe(channel);
                    } else {
                        s.sunsubscribe(channel);
                    }
                }
            } catch (RuntimeException e) {
                drop();
            }
        }

        /** After the first confirmation on a connection: asks for what was added while it connected. */
        private synchronized void reconcile() {
            for (String c : want) {
                if (requested.add(c)) {
                    byte[] ch = raw.get(c);
                    if (ch != null) {
                        send(true, ch);
                    }
                }
            }
        }

        void ping() {
            Object p = pubsub;
            if (!(p instanceof BinaryJedisPubSub b) || !b.isSubscribed()) {
                return;
            }
            long now = System.nanoTime();
            if (pingSent != 0 && pongSeen - pingSent < 0 && now - pingSent >= PING_NANOS) {
                drop(); // no PONG for a whole period: a silent connection
                return;
            }
            synchronized (this) {
                try {
                    pingSent = now;
                    b.ping();
                } catch (RuntimeException e) {
                    drop();
                }
            }
        }

        /** Ends the current connection: the read fails and the loop connects anew. */
        void drop() {
            Connection c = conn;
            if (c != null) {
                try {
                    c.forceDisconnect();
                } catch (java.io.IOException | RuntimeException e) {
                    // gone already
                }
            }
        }

        void close() {
            synchronized (this) {
                notifyAll();
            }
            drop();
            thread.interrupt();
        }

        @Override
        public void run() {
            long backoff = 50;
            while (!closed) {
                byte[][] first;
                synchronized (this) {
                    while (!closed && want.isEmpty()) {
                        try {
                            wait();
                        } catch (InterruptedException e) {
                            return;
                        }
                    }
                    if (closed) {
                        return;
                    }
                    requested.clear();
                    requested.addAll(want);
                    first = requested.stream().map(raw::get).filter(java.util.Objects::nonNull)
                            .toArray(byte[][]::new);
                }
                if (first.length == 0) {
                    continue;
                }
                boolean healthy = false;
                Connection c = null;
                try {
                    String node = id.substring(2);
                    if ("?".equals(node)) {
                        node = connector.node(slotKey);
                    }
                    c = connector.connect(node);
                    conn = c;
                    pingSent = 0;
                    if (sharded) {
                        Sharded p = new Sharded();
                        pubsub = p;
                        p.proceed(c, first);
                    } else {
                        Classic p = new Classic();
                        pubsub = p;
                        if (c != null) {
                            p.proceed(c, first);
                        } else {
                            connector.subscribe(p, first);
                        }
                    }
                    healthy = true;
                } catch (RuntimeException e) {
                    // lost the connection (or could not make one): made anew below
                } finally {
                    pubsub = null;
                    conn = null;
                    if (c != null) {
                        try {
                            c.close();
                        } catch (RuntimeException e) {
                            // closed anyway
                        }
                    }
                }
                if (closed) {
                    return;
                }
                if (healthy) {
                    backoff = 50;
                    continue; // every channel was unsubscribed: wait for the next
                }
                try {
                    Thread.sleep(backoff);
                } catch (InterruptedException e) {
                    return;
                }
                backoff = Math.min(1_000, backoff * 2);
            }
        }

        private void subscribed(byte[] channel) {
            reconcile();
            if (want.contains(text(channel))) {
                listener.onSubscribed(channel);
            }
        }

        private void message(byte[] channel, byte[] message) {
            listener.onMessage(channel, new String(message, StandardCharsets.UTF_8));
        }

        private final class Classic extends BinaryJedisPubSub {
            @Override
            public void onMessage(byte[] channel, byte[] message) {
                message(channel, message);
            }

            @Override
            public void onSubscribe(byte[] channel, int subscribedChannels) {
                subscribed(channel);
            }

            @Override
            public void onPong(byte[] pattern) {
                pongSeen = System.nanoTime();
            }
        }

        private final class Sharded extends BinaryJedisShardedPubSub {
            @Override
            public void onSMessage(byte[] channel, byte[] message) {
                message(channel, message);
            }

            @Override
            public void onSSubscribe(byte[] channel, int subscribedChannels) {
                subscribed(channel);
            }
        }
    }
}
