package io.dlock;

import java.util.UUID;

/**
 * Settings of a {@link Dlock} client (fluent setters, as Redisson's {@code Config}).
 * Defaults: watchdog lease 30 s renewed every 10 s (Redisson's), server-side waits in
 * slices of at most 4 s (less on a transport whose reply timeout needs it), a random
 * client id. Each setter refuses a value out of its range; {@link Dlock#create} refuses
 * settings that do not fit together (a renew interval not below the watchdog's lease).
 */
public final class DlockConfig {
    private long lockWatchdogTimeoutMs = 30_000;
    private long renewIntervalMs = 0;
    private long waitSliceMs = io.dlock.core.Leases.DEFAULT_SLICE_MS;
    private long durableWaitSliceMs = 1_000;
    private String clientId = UUID.randomUUID().toString();
    private LockOptions lockOptions = LockOptions.DEFAULT;

    /** The lease of a hold taken without one, renewed by the watchdog (default 30000 ms). */
    public long getLockWatchdogTimeout() {
        return lockWatchdogTimeoutMs;
    }

    /** Sets the watchdog's lease in ms (Redisson's {@code lockWatchdogTimeout}). */
    public DlockConfig setLockWatchdogTimeout(long ms) {
        if (ms < 3 || ms > io.dlock.core.Leases.MAX_MS) {
            throw new DlockArgumentException("lockWatchdogTimeout", "lockWatchdogTimeout must be 3 ms to 2^40 ms,"
                    + " got " + ms);
        }
        this.lockWatchdogTimeoutMs = ms;
        return this;
    }

    /** How often the watchdog renews: the set value, or a third of the watchdog lease. */
    public long getRenewInterval() {
        return renewIntervalMs > 0 ? renewIntervalMs : Math.max(1, lockWatchdogTimeoutMs / 3);
    }

    /** The renew interval as set (0: not set, a third of the lease). */
    long getRenewIntervalSetting() {
        return renewIntervalMs;
    }

    /**
     * Sets the renewal interval in ms of holds with the watchdog's lease (0, the default: a
     * third of the lease). It must be below the watchdog's lease ({@link Dlock#create}
     * checks). A hold with another lease (a {@link RunOnce} with renewal, a renewed lease)
     * renews every third of its own lease.
     */
    public DlockConfig setRenewInterval(long ms) {
        if (ms < 0) {
            throw new DlockArgumentException("renewInterval", "renewInterval must be >= 0 ms (0: a third of the"
                    + " lease), got " + ms);
        }
        this.renewIntervalMs = ms;
        return this;
    }

    /** Refuses settings that do not fit together (called by {@link Dlock#create}). */
    void check() {
        if (renewIntervalMs >= lockWatchdogTimeoutMs) {
            throw new DlockArgumentException("renewInterval", "renewInterval must be below the watchdog's lease"
                    + " (lockWatchdogTimeout " + lockWatchdogTimeoutMs + " ms), got " + renewIntervalMs + " ms: the"
                    + " lease would end before its renewal");
        }
    }

    /** The longest single server-side {@code WAIT} (longer waits are sent in slices). */
    public long getWaitSlice() {
        return waitSliceMs;
    }

    /**
     * Sets the longest single server-side wait in ms (default 4000). The transport may make
     * slices shorter: each ends well within its reply timeout ({@code docs/clients.md}, rule 4).
     */
    public DlockConfig setWaitSlice(long ms) {
        if (ms < 1 || ms > io.dlock.core.Leases.MAX_MS) {
            throw new DlockArgumentException("waitSlice", "waitSlice must be 1 ms to 2^40 ms, got " + ms);
        }
        this.waitSliceMs = ms;
        return this;
    }

    /**
     * The longest server-side wait of a durable acquire (it is pipelined with {@code WAIT}
     * and must fit a client's read timeout; Jedis' default is 2 s). Default 1000 ms.
     */
    public long getDurableWaitSlice() {
        return durableWaitSliceMs;
    }

    /** Sets the longest server-side wait of a durable acquire in ms. */
    public DlockConfig setDurableWaitSlice(long ms) {
        if (ms < 1 || ms > io.dlock.core.Leases.MAX_MS) {
            throw new DlockArgumentException("durableWaitSlice", "durableWaitSlice must be 1 ms to 2^40 ms, got " + ms);
        }
        this.durableWaitSliceMs = ms;
        return this;
    }

    /** This client's id: owners are {@code clientId:threadId}. */
    public String getClientId() {
        return clientId;
    }

    /** Sets the client id (default: a random UUID). */
    public DlockConfig setClientId(String id) {
        if (id == null || id.isEmpty() || id.length() > 400) {
            throw new DlockArgumentException("clientId", "clientId must be 1 to 400 characters, got "
                    + (id == null ? "null" : "\"" + id + "\""));
        }
        this.clientId = id;
        return this;
    }

    /** The options of locks got without options of their own. */
    public LockOptions getLockOptions() {
        return lockOptions;
    }

    /** Sets the default lock options (BIND, LOCKDELAY, durable grants). */
    public DlockConfig setLockOptions(LockOptions options) {
        if (options == null) {
            throw new DlockArgumentException("options", "options must not be null (LockOptions.DEFAULT for none)");
        }
        this.lockOptions = options;
        return this;
    }
}
