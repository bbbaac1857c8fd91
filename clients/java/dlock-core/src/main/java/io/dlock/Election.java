package io.dlock;

import io.dlock.core.Commands;
import io.dlock.core.Kind;
import io.dlock.core.Replies;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.CompletionStage;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Consumer;

/**
 * Leader election on one fair lock (etcd's {@code concurrency.Election}, Curator's
 * {@code LeaderLatch}): {@link #campaign} waits on the server, FIFO among candidates,
 * and returns a {@link Term} (watchdog-renewed, with a lost signal); {@link Term#proclaim}
 * publishes a value under the term's fencing token ({@code DLOCK.FENCED … HSET}), so only
 * the current leader can write it; {@link #leader()} reads who leads and what it
 * proclaimed; {@link #observe} reports every change.
 *
 * <p>The proclaimed value lives in the hash {@code {name}:proclaimed} (or
 * {@code name:proclaimed} when the name has a hash tag), in the lock's slot.
 */
public final class Election {
    private static final AtomicLong CANDIDATES = new AtomicLong();

    private final Dlock client;
    private final String name;
    private final byte[] key;
    private final byte[] valueKey;
    private final String owner;
    private final LockOptions options;
    private volatile Term term;

    /** Who leads a term, its token and what it proclaimed in it (null: nothing yet). */
    public record Leader(String owner, long token, String value) {}

    Election(Dlock client, String name, LockOptions options) {
        this.client = client;
        this.name = io.dlock.core.Leases.checkName("name", name);
        this.key = Commands.bytes(name);
        boolean tagged = name.matches("(?s).*\\{[^}]+}.*");
        this.valueKey = Commands.bytes(tagged ? name + ":proclaimed" : "{" + name + "}:proclaimed");
        this.owner = client.getId() + ":election" + CANDIDATES.incrementAndGet();
        this.options = options;
    }

    /** This candidate's owner id. */
    public String owner() {
        return owner;
    }

    /** Waits until this candidate leads. */
    public Term campaign() throws InterruptedException {
        return campaign(-1, TimeUnit.MILLISECONDS);
    }

    /** Waits up to {@code timeout} (negative: without end) to lead; the term, or null. */
    public Term campaign(long timeout, TimeUnit unit) throws InterruptedException {
        Term t = term;
        if (t != null && !t.isOver()) {
            return t;
        }
        Hold h = client.acquire(name, key, Kind.FAIR, owner, io.dlock.core.Leases.waitOrForever("timeout", timeout,
                unit), -1, 0, 1, options, true);
        if (h == null) {
            return null;
        }
        t = new Term(h);
        term = t;
        publish("elected");
        return t;
    }

    /** Tells the observers (a message on the lock's channel); best effort. */
    private void publish(String message) {
        try {
            client.getTransport().publish(key, Commands.channel(key), message);
        } catch (DlockException e) {
            // observers also re-read on every release and at their (re)subscription
        }
    }

    /** Resigns the current term of this candidate; false when it had none. */
    public boolean resign() {
        Term t = term;
        return t != null && t.resign();
    }

    /** Proclaims a value in the current term ({@link NotHeldException} when not leading). */
    public void proclaim(String value) {
        Term t = term;
        if (t == null || t.isOver()) {
            throw new NotHeldException("NOTHELD " + owner + " does not lead election \"" + name + "\": campaign first");
        }
        t.proclaim(value);
    }

    /** Who leads now and what it proclaimed in this term; null when nobody leads. */
    public Leader leader() {
        Map<String, Object> info = client.info(key);
        for (Map<String, Object> h : Replies.holders(info)) {
            if (h.get("delayed") != null) {
                continue;
            }
            long token = h.get("token") instanceof Long l ? l : 0;
            Object raw = client.call(valueKey, new byte[][] {Commands.bytes("HGETALL"), valueKey});
            String value = null;
            if (raw instanceof List<?> l) {
                String tok = null;
                String val = null;
                for (int i = 0; i + 1 < l.size(); i += 2) {
                    String f = Replies.text(l.get(i));
                    if ("token".equals(f)) {
                        tok = Replies.text(l.get(i + 1));
                    } else if ("value".equals(f)) {
                        val = Replies.text(l.get(i + 1));
                    }
                }
                if (tok != null && tok.equals(Long.toString(token))) {
                    value = val;
                }
            }
            return new Leader(String.valueOf(h.get("owner")), token, value);
        }
        return null;
    }

    /**
     * Calls {@code callback} with the current leader (null: nobody) and then on every
     * change of leader or value, by notification: the election's lock channel tells of
     * every release, force-release, lease end and new term, and a proclaim publishes there
     * too; each message, and each (re)subscription of the client's subscriber, re-reads
     * {@link #leader()}. A leader is first seen without its value when it proclaims after
     * its campaign. Callbacks run one at a time on a daemon thread of the client; close the
     * returned handle to stop (the client's {@code close()} stops it too). On a transport
     * that cannot subscribe it polls every second.
     */
    public AutoCloseable observe(Consumer<Leader> callback) {
        return observe(callback, 1000, true);
    }

    /**
     * {@link #observe(Consumer)}; {@code pollMillis} is used only on a transport that
     * cannot subscribe.
     *
     * @deprecated observing is by notification now: use {@link #observe(Consumer)}
     */
    @Deprecated
    public AutoCloseable observe(Consumer<Leader> callback, long pollMillis) {
        return observe(callback, pollMillis, true);
    }

    private AutoCloseable observe(Consumer<Leader> callback, long pollMillis, boolean notified) {
        client.ensureOpen();
        Objects.requireNonNull(callback, "callback");
        Observer o = new Observer(callback);
        client.closeWith(o);
        byte[] channel = Commands.channel(key);
        if (notified && client.subscriptions.supported()) {
            Subscriptions.Watcher w = o::changed;
            client.subscriptions.watch(channel, key, w);
            o.unwatch = () -> client.subscriptions.unwatch(channel, w);
        }
        if (!client.subscriptions.supported()) {
            long every = Math.max(10, pollMillis);
            try {
                o.poll = client.scheduler.scheduleWithFixedDelay(o::changed, every, every, TimeUnit.MILLISECONDS);
            } catch (java.util.concurrent.RejectedExecutionException e) {
                // closed
            }
        }
        o.changed();
        return o;
    }

    /** One observer: reads {@link #leader()} after each notice, one read at a time, and calls back on a change. */
    private final class Observer implements AutoCloseable {
        private final Consumer<Leader> callback;
        private Object last = new Object();
        /** Guarded by this. */
        private boolean running;
        private boolean dirty;
        private boolean closed;
        volatile Runnable unwatch;
        volatile java.util.concurrent.ScheduledFuture<?> poll;

        Observer(Consumer<Leader> callback) {
            this.callback = callback;
        }

        void changed() {
            synchronized (this) {
                if (closed) {
                    return;
                }
                if (running) {
                    dirty = true;
                    return;
                }
                running = true;
                dirty = false;
            }
            if (!client.runInBackground(this::read)) {
                synchronized (this) {
                    running = false;
                }
            }
        }

        private void read() {
            while (true) {
                Leader now;
                try {
                    now = leader();
                } catch (DlockException e) {
                    synchronized (this) {
                        running = false;
                    }
                    retryLater();
                    return;
                }
                if (!Objects.equals(now, last)) {
                    last = now;
                    try {
                        callback.accept(now);
                    } catch (RuntimeException e) {
                        // the observer's failure stops nothing
                    }
                }
                synchronized (this) {
                    if (!dirty || closed) {
                        running = false;
                        return;
                    }
                    dirty = false;
                }
            }
        }

        /** A read that failed (the server unreachable): tried again in a second. */
        private void retryLater() {
            try {
                client.scheduler.schedule(this::changed, 1, TimeUnit.SECONDS);
            } catch (java.util.concurrent.RejectedExecutionException e) {
                // closed
            }
        }

        @Override
        public void close() {
            synchronized (this) {
                closed = true;
            }
            Runnable u = unwatch;
            if (u != null) {
                u.run();
            }
            java.util.concurrent.ScheduledFuture<?> p = poll;
            if (p != null) {
                p.cancel(false);
            }
            client.forget(this);
        }
    }

    /** A won campaign: leadership until {@link #resign()} or until it is lost. */
    public final class Term {
        private final Hold hold;
        private volatile boolean resigned;

        Term(Hold hold) {
            this.hold = hold;
        }

        /** The term's fencing token. */
        public long token() {
            return hold.token;
        }

        /** Completes when the term ends without resigning. */
        public CompletionStage<LostReason> lostSignal() {
            return hold.lost.minimalCompletionStage();
        }

        /** Whether the term was lost (by its lease clock, or the server's notice). */
        public boolean isLost() {
            return hold.signalled.get() || (!resigned && !hold.valid());
        }

        boolean isOver() {
            return resigned || isLost();
        }

        /** Proclaims {@code value} (written only while this term lives: {@link FencedException} otherwise). */
        public void proclaim(String value) {
            byte[][] args = {Commands.bytes("DLOCK.FENCED"), key, Commands.bytes(Long.toString(hold.token)),
                Commands.bytes("HSET"), valueKey, Commands.bytes("token"), Commands.bytes(Long.toString(hold.token)),
                Commands.bytes("owner"), Commands.bytes(owner), Commands.bytes("value"), Commands.bytes(value)};
            client.call(key, args);
            publish("proclaimed");
        }

        /**
         * Resigns: the next candidate in line leads at once; false when it was already lost
         * (or resigned). The term is never renewed again, whatever the reply.
         *
         * @throws DlockConnectionException when the release failed, and again on a fresh
         *     connection: the term ends at its lease
         */
        public boolean resign() {
            if (resigned) {
                return false;
            }
            resigned = true;
            UnlockResult r;
            try {
                r = client.release(name, key, Kind.FAIR, owner);
            } catch (IllegalMonitorStateException e) {
                return false;
            }
            if (r.status() == UnlockResult.Status.UNKNOWN) {
                throw r.error();
            }
            return r.status() == UnlockResult.Status.RELEASED;
        }
    }
}
