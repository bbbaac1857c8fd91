package io.dlock.core;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

/**
 * Builds the argument vectors of the DLOCK.* commands (the command name first). No I/O:
 * every transport sends what these return.
 */
public final class Commands {
    /** The largest lease or wait the module accepts, in milliseconds (2^40). */
    public static final long MAX_MS = 1L << 40;

    private Commands() {}

    /** UTF-8 bytes of a string. */
    public static byte[] bytes(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    private static byte[] num(long n) {
        return bytes(Long.toString(n));
    }

    /** Options of an acquire beyond lease and wait. */
    public record AcquireOptions(long limit, long permits, boolean bind, long lockDelayMs) {
        /** No limit (not a semaphore), one permit, no BIND, no LOCKDELAY. */
        public static final AcquireOptions NONE = new AcquireOptions(0, 1, false, 0);
    }

    /**
     * {@code <KIND COMMAND> key owner [READ|WRITE] [LIMIT n [PERMITS k]] PX lease WAIT ms
     * [BIND] [LOCKDELAY ms]}.
     *
     * @param leaseMs the lease, clamped to 1..2^40
     * @param waitMs how long the server may block the connection, clamped to 0..2^40
     */
    public static byte[][] acquire(Kind kind, byte[] key, String owner, long leaseMs, long waitMs,
            AcquireOptions opts) {
        List<byte[]> a = new ArrayList<>(14);
        a.add(bytes(kind.command()));
        a.add(key);
        a.add(bytes(owner));
        if (kind.mode() != null) {
            a.add(bytes(kind.mode()));
        }
        if (kind == Kind.SEMAPHORE) {
            a.add(bytes("LIMIT"));
            a.add(num(opts.limit()));
            if (opts.permits() != 1) {
                a.add(bytes("PERMITS"));
                a.add(num(opts.permits()));
            }
        }
        a.add(bytes("PX"));
        a.add(num(clamp(leaseMs, 1)));
        a.add(bytes("WAIT"));
        a.add(num(clamp(waitMs, 0)));
        if (opts.bind()) {
            a.add(bytes("BIND"));
        }
        if (opts.lockDelayMs() > 0) {
            a.add(bytes("LOCKDELAY"));
            a.add(num(clamp(opts.lockDelayMs(), 0)));
        }
        return a.toArray(new byte[0][]);
    }

    static long clamp(long ms, long min) {
        return Math.max(min, Math.min(ms, MAX_MS));
    }

    /** {@code DLOCK.RELEASE key owner [READ|WRITE] [PERMITS k]}. */
    public static byte[][] release(Kind kind, byte[] key, String owner, long permits) {
        List<byte[]> a = new ArrayList<>(6);
        a.add(bytes("DLOCK.RELEASE"));
        a.add(key);
        a.add(bytes(owner));
        if (kind.mode() != null) {
            a.add(bytes(kind.mode()));
        }
        if (kind == Kind.SEMAPHORE && permits != 1) {
            a.add(bytes("PERMITS"));
            a.add(num(permits));
        }
        return a.toArray(new byte[0][]);
    }

    /** {@code DLOCK.RENEW key owner PX lease}. */
    public static byte[][] renew(byte[] key, String owner, long leaseMs) {
        return new byte[][] {bytes("DLOCK.RENEW"), key, bytes(owner), bytes("PX"), num(clamp(leaseMs, 1))};
    }

    /** {@code DLOCK.CANCEL key owner}. */
    public static byte[][] cancel(byte[] key, String owner) {
        return new byte[][] {bytes("DLOCK.CANCEL"), key, bytes(owner)};
    }

    /** {@code DLOCK.INFO key}. */
    public static byte[][] info(byte[] key) {
        return new byte[][] {bytes("DLOCK.INFO"), key};
    }

    /** {@code DLOCK.FORCERELEASE key}. */
    public static byte[][] forceRelease(byte[] key) {
        return new byte[][] {bytes("DLOCK.FORCERELEASE"), key};
    }

    /** {@code DLOCK.CHECK key token}. */
    public static byte[][] check(byte[] key, long token) {
        return new byte[][] {bytes("DLOCK.CHECK"), key, num(token)};
    }

    /** {@code DLOCK.LATCHSET key count}. */
    public static byte[][] latchSet(byte[] key, long count) {
        return new byte[][] {bytes("DLOCK.LATCHSET"), key, num(count)};
    }

    /** {@code DLOCK.COUNTDOWN key}. */
    public static byte[][] countDown(byte[] key) {
        return new byte[][] {bytes("DLOCK.COUNTDOWN"), key};
    }

    /** {@code DLOCK.AWAIT key WAIT ms}. */
    public static byte[][] await(byte[] key, long waitMs) {
        return new byte[][] {bytes("DLOCK.AWAIT"), key, bytes("WAIT"), num(clamp(waitMs, 0))};
    }

    /** {@code WAIT replicas timeout} (sent on the connection of a grant, for durable grants). */
    public static byte[][] waitReplicas(int replicas, long timeoutMs) {
        return new byte[][] {bytes("WAIT"), num(replicas), num(Math.max(0, timeoutMs))};
    }

    /**
     * The channel on which the module publishes {@code released}, {@code expired},
     * {@code deleted} and {@code disconnected} for {@code key}: {@code dlock:} + key when
     * the key has a Redis Cluster hash tag, else {@code dlock:{} + key + {@code }}.
     */
    public static byte[] channel(byte[] key) {
        boolean tagged = false;
        int open = indexOf(key, (byte) '{', 0);
        if (open >= 0) {
            int close = indexOf(key, (byte) '}', open + 1);
            tagged = close > open + 1;
        }
        byte[] prefix = bytes(tagged ? "dlock:" : "dlock:{");
        byte[] out = new byte[prefix.length + key.length + (tagged ? 0 : 1)];
        System.arraycopy(prefix, 0, out, 0, prefix.length);
        System.arraycopy(key, 0, out, prefix.length, key.length);
        if (!tagged) {
            out[out.length - 1] = '}';
        }
        return out;
    }

    private static int indexOf(byte[] b, byte c, int from) {
        for (int i = from; i < b.length; i++) {
            if (b[i] == c) {
                return i;
            }
        }
        return -1;
    }
}
