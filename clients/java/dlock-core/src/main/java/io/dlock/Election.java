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
        return t;
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
     * change of leader or value, from a daemon thread polling every {@code pollMillis};
     * close the returned handle to stop.
     */
    public AutoCloseable observe(Consumer<Leader> callback, long pollMillis) {
        Objects.requireNonNull(callback, "callback");
        long every = Math.max(10, pollMillis);
        Thread t = new Thread(() -> {
            Object last = new Object();
            while (!Thread.currentThread().isInterrupted()) {
                try {
                    Leader now = leader();
                    if (!Objects.equals(now, last)) {
                        last = now;
                        callback.accept(now);
                    }
                } catch (DlockException e) {
                    // try again at the next poll
                }
                try {
                    Thread.sleep(every);
                } catch (InterruptedException e) {
                    return;
                }
            }
        }, "dlock-election-observer-" + name);
        t.setDaemon(true);
        t.start();
        return t::interrupt;
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
