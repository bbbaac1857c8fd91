package io.dlock;

import java.util.UUID;

/**
 * Settings of a {@link Dlock} client (fluent setters, as Redisson's {@code Config}).
 * Defaults: watchdog lease 30 s renewed every 10 s (Redisson's), server-side waits in
 * slices of 5 s, a random client id.
 */
public final class DlockConfig {
    private long lockWatchdogTimeoutMs = 30_000;
    private long renewIntervalMs = 0;
    private long waitSliceMs = 5_000;
    private long durableWaitSliceMs = 1_000;
    private String clientId = UUID.randomUUID().toString();
    private LockOptions lockOptions = LockOptions.DEFAULT;

    /** The lease of a hold taken without one, renewed by the watchdog (default 30000 ms). */
    public long getLockWatchdogTimeout() {
        return lockWatchdogTimeoutMs;
    }

    /** Sets the watchdog's lease in ms (Redisson's {@code lockWatchdogTimeout}). */
    public DlockConfig setLockWatchdogTimeout(long ms) {
        if (ms < 3) {
            throw new IllegalArgumentException("lockWatchdogTimeout must be at least 3 ms, got " + ms);
        }
        this.lockWatchdogTimeoutMs = ms;
        return this;
    }

    /** How often the watchdog renews: the set value, or a third of the watchdog lease. */
    public long getRenewInterval() {
        return renewIntervalMs > 0 ? renewIntervalMs : Math.max(1, lockWatchdogTimeoutMs / 3);
    }

    /** Sets the renewal interval in ms (0: a third of the watchdog lease). */
    public DlockConfig setRenewInterval(long ms) {
        if (ms < 0) {
            throw new IllegalArgumentException("renewInterval must be >= 0 ms, got " + ms);
        }
        this.renewIntervalMs = ms;
        return this;
    }

    /** The longest single server-side {@code WAIT} (longer waits are sent in slices). */
    public long getWaitSlice() {
        return waitSliceMs;
    }

    /** Sets the longest single server-side wait in ms (default 5000). */
    public DlockConfig setWaitSlice(long ms) {
        if (ms < 1) {
            throw new IllegalArgumentException("waitSlice must be at least 1 ms, got " + ms);
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
        if (ms < 1) {
            throw new IllegalArgumentException("durableWaitSlice must be at least 1 ms, got " + ms);
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
            throw new IllegalArgumentException("clientId must be 1 to 400 characters, got " + id);
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
        this.lockOptions = java.util.Objects.requireNonNull(options, "options");
        return this;
    }
}
