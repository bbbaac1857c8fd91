package io.dlock.core;

import io.dlock.DlockArgumentException;
import java.time.Duration;

/**
 * The numbers of the client contract ({@code docs/clients.md}), in one place and without
 * I/O: the lease clock's margin, the size of a server-side wait slice, and the ranges
 * that bad input is checked against before anything is sent.
 */
public final class Leases {
    /** The largest lease or wait the module accepts, in milliseconds (2^40). */
    public static final long MAX_MS = Commands.MAX_MS;

    /** The longest server-side wait slice when the transport sets no lower limit (4 s). */
    public static final long DEFAULT_SLICE_MS = 4_000;

    /** The shortest slice the formula gives. */
    public static final long MIN_SLICE_MS = 10;

    private Leases() {}

    /**
     * The lease clock's margin: {@code min(lease / 2, lease / 100 + 50 ms)} — 1 % for clock
     * rate drift between client and server, 50 ms for a timer that fires late under load,
     * never more than half the lease.
     */
    public static long marginNanos(long leaseMs) {
        long lease = leaseMs * 1_000_000L;
        return Math.min(lease / 2, lease / 100 + 50_000_000L);
    }

    /**
     * One server-side wait slice: {@code min(defaultSlice, transportTimeout − max(100 ms,
     * transportTimeout / 5))}, at least 10 ms; a transport timeout of {@link Long#MAX_VALUE}
     * (or 0 or less) is no limit.
     */
    public static long slice(long defaultSliceMs, long transportTimeoutMs) {
        long slice = defaultSliceMs;
        if (transportTimeoutMs > 0 && transportTimeoutMs != Long.MAX_VALUE) {
            slice = Math.min(slice, transportTimeoutMs - Math.max(100, transportTimeoutMs / 5));
        }
        return Math.max(MIN_SLICE_MS, slice);
    }

    /**
     * The renew interval of a hold whose lease is {@code leaseMs}: {@code configuredMs} when
     * it was set and the lease is the watchdog's, otherwise a third of the lease (at least
     * 1 ms), so a renewal always comes before the lease ends.
     */
    public static long renewInterval(long leaseMs, long watchdogLeaseMs, long configuredMs) {
        if (configuredMs > 0 && leaseMs == watchdogLeaseMs && configuredMs < leaseMs) {
            return configuredMs;
        }
        return Math.max(1, leaseMs / 3);
    }

    /**
     * A lease given as a time and unit (Redisson's shape): negative or zero is the watchdog's
     * lease ({@code -1} is returned), anything else must come to 1 ms .. 2^40 ms.
     *
     * @throws DlockArgumentException naming {@code argument} when it does not
     */
    public static long leaseOrWatchdog(String argument, long time, java.util.concurrent.TimeUnit unit) {
        if (time <= 0) {
            return -1;
        }
        return checkLease(argument, unit.toMillis(time), time + " " + unit.name().toLowerCase(java.util.Locale.ROOT));
    }

    /**
     * A lease given as a {@link Duration}: it must be 1 ms .. 2^40 ms ({@code null} is the
     * watchdog's lease: {@code -1} is returned).
     *
     * @throws DlockArgumentException naming {@code argument} when it is zero, negative or too long
     */
    public static long lease(String argument, Duration lease) {
        if (lease == null) {
            return -1;
        }
        if (lease.isNegative() || lease.isZero()) {
            throw new DlockArgumentException(argument, argument + " must be a positive duration of 1 ms to 2^40 ms"
                    + " (or null for the watchdog's lease), got " + lease);
        }
        long ms;
        try {
            ms = lease.toMillis();
        } catch (ArithmeticException e) {
            ms = Long.MAX_VALUE;
        }
        return checkLease(argument, ms, lease.toString());
    }

    /** A lease in milliseconds: 1 .. 2^40. */
    public static long checkLease(String argument, long ms, String given) {
        if (ms < 1 || ms > MAX_MS) {
            throw new DlockArgumentException(argument, argument + " must be 1 ms to 2^40 ms (about 34.8 years),"
                    + " got " + given + (ms < 1 ? " (less than 1 ms)" : ""));
        }
        return ms;
    }

    /**
     * A wait given as a time and unit (Redisson's shape): negative is "without end"
     * ({@code -1}), anything else 0 .. 2^40 ms.
     */
    public static long waitOrForever(String argument, long time, java.util.concurrent.TimeUnit unit) {
        if (time < 0) {
            return -1;
        }
        long ms = unit.toMillis(time);
        if (ms > MAX_MS) {
            throw new DlockArgumentException(argument, argument + " must be at most 2^40 ms (or negative to wait"
                    + " without end), got " + time + " " + unit.name().toLowerCase(java.util.Locale.ROOT));
        }
        return ms;
    }

    /** A wait given as a {@link Duration}: 0 .. 2^40 ms ({@code null}: without end, {@code -1}). */
    public static long waitTime(String argument, Duration wait) {
        if (wait == null) {
            return -1;
        }
        long ms;
        try {
            ms = wait.toMillis();
        } catch (ArithmeticException e) {
            ms = Long.MAX_VALUE;
        }
        if (wait.isNegative() || ms > MAX_MS) {
            throw new DlockArgumentException(argument, argument + " must be 0 to 2^40 ms (or null to wait without"
                    + " end), got " + wait);
        }
        return ms;
    }

    /** A lock, semaphore, latch or election name: a non-empty string. */
    public static String checkName(String argument, String name) {
        if (name == null || name.isEmpty()) {
            throw new DlockArgumentException(argument, argument + " must be a non-empty string (the lock's key), got "
                    + (name == null ? "null" : "\"\""));
        }
        return name;
    }
}
