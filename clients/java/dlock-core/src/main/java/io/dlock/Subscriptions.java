package io.dlock;

import io.dlock.spi.Notices;
import io.dlock.spi.Transport;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Iterator;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ScheduledExecutorService;

/**
 * Prompt notice ({@code docs/clients.md}, rule 2): the channels this client listens on
 * (one per lock it holds or watches), on the transport's one subscriber, and what a
 * message on one of them starts — a check of each hold there ({@code DLOCK.CHECK}).
 *
 * <p>A channel stays subscribed while it has holds or watchers, and a second after the
 * last one left (a lock taken over and over by one client's threads is not subscribed
 * anew for every grant).
 *
 * <p>Every message is checked, also the {@code released} of this client's own releases
 * (a hold being released is not checked: its release says what became of it). Pairing
 * those with the own releases to skip their checks saved almost nothing in
 * {@code make bench-java} (3.08 against 3.10-3.21 commands per grant at 64 threads), as
 * a message usually comes before its release's reply, and it could not be made exact:
 * a notice does not say which hold ended.
 */
final class Subscriptions implements Notices.Listener {
    /** How long a channel stays subscribed after its last hold left. */
    static final long LINGER_NANOS = 1_000_000_000L;

    /** A watcher of a channel (an election observer): told of every message and (re)subscription. */
    interface Watcher {
        void changed();
    }

    private static final class Channel {
        final byte[] channel;
        final byte[] key;
        final Set<Hold> holds = ConcurrentHashMap.newKeySet();
        final CopyOnWriteArrayList<Watcher> watchers = new CopyOnWriteArrayList<>();
        /** Guarded by this: the subscriber confirmed the subscription. */
        boolean confirmed;
        /** Completed when the subscription is first confirmed. */
        final java.util.concurrent.CompletableFuture<Void> ready = new java.util.concurrent.CompletableFuture<>();
        /** When the last message that was checked (not paired) arrived. */
        volatile long lastCheckedNanos;
        /** Guarded by Subscriptions.this: when the last hold or watcher left (0: in use). */
        long idleSince;

        Channel(byte[] channel, byte[] key) {
            this.channel = channel;
            this.key = key;
        }

        boolean unused() {
            return holds.isEmpty() && watchers.isEmpty();
        }
    }

    private final Dlock client;
    private final Transport transport;
    private final ScheduledExecutorService timer;
    private final Map<String, Channel> channels = new HashMap<>();
    private final ConcurrentHashMap<String, Channel> byName = new ConcurrentHashMap<>();
    private Notices notices;
    private boolean unsupported;
    private boolean closed;

    Subscriptions(Dlock client, Transport transport, ScheduledExecutorService timer) {
        this.client = client;
        this.transport = transport;
        this.timer = timer;
    }

    private static String name(byte[] channel) {
        return new String(channel, StandardCharsets.ISO_8859_1);
    }

    /** Whether the transport can subscribe (false once it said it cannot). */
    synchronized boolean supported() {
        return !unsupported;
    }

    private Channel channel(byte[] channel, byte[] key) {
        String n = name(channel);
        Channel c = channels.get(n);
        if (c == null) {
            c = new Channel(channel, key);
            channels.put(n, c);
            byName.put(n, c);
            Notices ns = notices();
            if (ns != null) {
                ns.subscribe(channel, key);
            }
        }
        c.idleSince = 0;
        return c;
    }

    private Notices notices() {
        if (notices == null && !unsupported && !closed) {
            notices = transport.notices(this, timer);
            unsupported = notices == null;
        }
        return notices;
    }

    /** Makes the transport's subscriber now, so that it is ready for the first hold. */
    synchronized void warmUp() {
        notices();
    }

    private static final java.util.concurrent.CompletableFuture<Void> READY =
            java.util.concurrent.CompletableFuture.completedFuture(null);

    /**
     * Subscribes to the channel of {@code key} before an acquire is sent (it lingers like an
     * unused channel when nothing is granted). The future completes when the subscription
     * is confirmed: an acquire sent after that cannot be ended unheard, as every notice
     * about its hold comes after the subscription.
     */
    java.util.concurrent.CompletableFuture<Void> prepare(byte[] key) {
        byte[] channel = io.dlock.core.Commands.channel(key);
        Channel c = byName.get(name(channel));
        if (c != null) {
            return c.ready;
        }
        synchronized (this) {
            if (closed || unsupported) {
                return READY;
            }
            c = channel(channel, key);
            idle(c);
            return notices == null ? READY : c.ready;
        }
    }

    /** Listens for notices of {@code h}'s lock while {@code h} is held. */
    void add(Hold h) {
        synchronized (this) {
            if (closed) {
                return;
            }
            channel(h.channel, h.key).holds.add(h);
        }
    }

    /** {@code h} is no longer held. */
    void remove(Hold h) {
        Channel c = byName.get(name(h.channel));
        if (c != null && c.holds.remove(h)) {
            idle(c);
        }
    }

    /** Calls {@code w} on every message and (re)subscription of the channel of {@code key}. */
    void watch(byte[] channel, byte[] key, Watcher w) {
        synchronized (this) {
            if (closed) {
                return;
            }
            channel(channel, key).watchers.add(w);
        }
    }

    /** Stops calling {@code w}. */
    void unwatch(byte[] channel, Watcher w) {
        Channel c = byName.get(name(channel));
        if (c != null && c.watchers.remove(w)) {
            idle(c);
        }
    }

    private synchronized void idle(Channel c) {
        if (c.unused() && c.idleSince == 0) {
            c.idleSince = System.nanoTime();
        }
    }

    /** Unsubscribes channels unused for {@link #LINGER_NANOS} (run every second). */
    void sweep() {
        long now = System.nanoTime();
        synchronized (this) {
            Iterator<Map.Entry<String, Channel>> it = channels.entrySet().iterator();
            while (it.hasNext()) {
                Channel c = it.next().getValue();
                if (c.unused() && c.idleSince != 0 && now - c.idleSince >= LINGER_NANOS) {
                    it.remove();
                    byName.remove(name(c.channel));
                    if (notices != null) {
                        notices.unsubscribe(c.channel);
                    }
                }
            }
        }
    }

    @Override
    public void onMessage(byte[] channel, String message) {
        Channel c = byName.get(name(channel));
        if (c == null) {
            return;
        }
        for (Watcher w : c.watchers) {
            w.changed();
        }
        c.lastCheckedNanos = System.nanoTime();
        for (Hold h : c.holds) {
            client.check(h, LostReason.ofNotice(message));
        }
    }

    @Override
    public void onSubscribed(byte[] channel) {
        Channel c = byName.get(name(channel));
        if (c == null) {
            return;
        }
        synchronized (c) {
            c.confirmed = true;
        }
        // Before the acquires waiting for it go: a grant sent after this is not checked.
        c.lastCheckedNanos = System.nanoTime();
        c.ready.complete(null);
        for (Watcher w : c.watchers) {
            w.changed();
        }
        for (Hold h : c.holds) {
            client.check(h, null);
        }
    }

    /**
     * Whether a notice was checked on {@code h}'s channel since {@code sinceNanos}: then a
     * hold granted in that time is checked once, as the notice may have been about it
     * before it was known here. (A hold on a channel whose subscription was not confirmed
     * yet is checked when it is.)
     */
    boolean noticedSince(Hold h, long sinceNanos) {
        Channel c = byName.get(name(h.channel));
        if (c == null) {
            return false;
        }
        return c.lastCheckedNanos - sinceNanos >= 0;
    }

    /** Stops listening. */
    void close() {
        Notices n;
        synchronized (this) {
            closed = true;
            n = notices;
            notices = null;
            channels.clear();
            byName.clear();
        }
        if (n != null) {
            n.close();
        }
    }
}
