package io.dlock;

import io.dlock.core.Commands;
import io.dlock.core.Kind;
import io.dlock.core.Leases;
import io.dlock.core.Replies;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionStage;
import java.util.concurrent.TimeUnit;

/**
 * A counting semaphore whose grants are leased and named by a permit id (Redisson's
 * {@code RPermitExpirableSemaphore}): {@code acquire} returns the id, {@code release(id)}
 * gives the permits back, and a permit whose lease ends returns by itself. A grant without
 * a lease takes the watchdog's lease and is renewed until released.
 */
public final class DSemaphore {
    private final Dlock client;
    private final String name;
    private final byte[] key;
    private final int limit;
    private final LockOptions options;

    DSemaphore(Dlock client, String name, int limit, LockOptions options) {
        if (limit < 1) {
            throw new DlockArgumentException("permits", "a semaphore needs at least 1 permit, got " + limit);
        }
        this.client = client;
        this.name = Leases.checkName("name", name);
        this.key = Commands.bytes(name);
        this.limit = limit;
        this.options = options;
    }

    /** The semaphore's name (its key). */
    public String getName() {
        return name;
    }

    /** The number of permits (fixed when the key is created). */
    public int getLimit() {
        return limit;
    }

    private String take(int permits, long waitMs, long leaseMs, boolean interruptible) throws InterruptedException {
        if (permits < 1 || permits > limit) {
            throw new DlockArgumentException("permits", "permits must be 1.." + limit + ", got " + permits);
        }
        String id = client.newPermitId();
        Hold h = client.acquire(name, key, Kind.SEMAPHORE, id, waitMs, leaseMs, limit, permits, options,
                interruptible);
        return h == null ? null : id;
    }

    private static long ms(long t, TimeUnit unit) {
        return Leases.waitOrForever("waitTime", t, unit);
    }

    private static long lease(long t, TimeUnit unit) {
        return Leases.leaseOrWatchdog("leaseTime", t, unit);
    }

    /** Waits for one permit (watchdog lease); returns its id. */
    public String acquire() throws InterruptedException {
        return take(1, -1, -1, true);
    }

    /** Waits for one permit held for {@code leaseTime} (0 or less: the watchdog's lease); returns its id. */
    public String acquire(long leaseTime, TimeUnit unit) throws InterruptedException {
        return take(1, -1, lease(leaseTime, unit), true);
    }

    /** Waits for {@code permits} permits under one id, held for {@code leaseTime} (negative: watchdog). */
    public String acquire(int permits, long leaseTime, TimeUnit unit) throws InterruptedException {
        return take(permits, -1, lease(leaseTime, unit), true);
    }

    /** One permit if available now; its id, or null. */
    public String tryAcquire() {
        try {
            return take(1, 0, -1, false);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return null;
        }
    }

    /** Waits up to {@code waitTime} for one permit; its id, or null. */
    public String tryAcquire(long waitTime, TimeUnit unit) throws InterruptedException {
        return take(1, ms(waitTime, unit), -1, true);
    }

    /** Waits up to {@code waitTime} for one permit held for {@code leaseTime}; its id, or null. */
    public String tryAcquire(long waitTime, long leaseTime, TimeUnit unit) throws InterruptedException {
        return take(1, ms(waitTime, unit), lease(leaseTime, unit), true);
    }

    /** Waits up to {@code waitTime} for {@code permits} permits under one id; the id, or null. */
    public String tryAcquire(int permits, long waitTime, long leaseTime, TimeUnit unit) throws InterruptedException {
        return take(permits, ms(waitTime, unit), lease(leaseTime, unit), true);
    }

    /**
     * Waits up to {@code waitTime} ({@code null}: without end; zero: one try) for
     * {@code permits} permits under one id, held for {@code leaseTime} ({@code null}: the
     * watchdog's lease); the id, or null.
     *
     * @throws DlockArgumentException when the lease is zero, negative or above 2^40 ms, the
     *     wait negative or above 2^40 ms, or {@code permits} not 1 to the limit
     */
    public String tryAcquire(int permits, java.time.Duration waitTime, java.time.Duration leaseTime)
            throws InterruptedException {
        long lease = Leases.lease("leaseTime", leaseTime);
        return take(permits, Leases.waitTime("waitTime", waitTime), lease, true);
    }

    /**
     * Gives the permits of {@code permitId} back; false when it no longer holds any (never
     * did, or its hold had ended).
     *
     * @throws DlockConnectionException when the release failed, and again on a fresh
     *     connection: the permit is no longer renewed and returns at its lease
     */
    public boolean tryRelease(String permitId) {
        UnlockResult r;
        try {
            r = releaseAndGetResult(permitId);
        } catch (IllegalMonitorStateException e) {
            return false;
        }
        if (r.status() == UnlockResult.Status.UNKNOWN) {
            throw r.error();
        }
        return r.status() != UnlockResult.Status.LOST;
    }

    /**
     * Gives the permits of {@code permitId} back and says what became of them
     * ({@code docs/clients.md}, rule 3): released, lost (the server no longer had them) or
     * unknown (the release failed, and again on a fresh connection; they are not renewed
     * and return at their lease).
     *
     * @throws IllegalMonitorStateException when this client has no permits under that id
     */
    public UnlockResult releaseAndGetResult(String permitId) {
        return client.release(name, key, Kind.SEMAPHORE, permitId);
    }

    /**
     * Gives the permits of {@code permitId} back.
     *
     * @throws IllegalArgumentException when that id holds nothing (released, or its lease ended)
     */
    public void release(String permitId) {
        if (!tryRelease(permitId)) {
            throw new IllegalArgumentException("permit " + permitId + " of semaphore \"" + name
                    + "\" has already been released or its lease ended");
        }
    }

    /** Permits free now. */
    public int availablePermits() {
        Map<String, Object> info = client.info(key);
        if (info == null) {
            return limit;
        }
        Object a = info.get("available");
        return a instanceof Long l ? (int) (long) l : limit;
    }

    /** The fencing token of a permit id this client holds, or null. */
    public Long getToken(String permitId) {
        Hold h = client.hold(Kind.SEMAPHORE, name, permitId);
        return h == null ? null : h.token;
    }

    /**
     * Completes when the permit's hold ends without its release (the reasons of
     * {@link DLock#lostSignal()}); already complete when it was lost and not yet released.
     */
    public CompletionStage<LostReason> lostSignal(String permitId) {
        Hold h = client.anyHold(Kind.SEMAPHORE, name, permitId);
        if (h == null) {
            throw new IllegalArgumentException("permit " + permitId + " is not held by this client");
        }
        return h.lost.minimalCompletionStage();
    }

    /** Whether this client holds {@code permitId} by its lease clock (no round trip). */
    public boolean isHeld(String permitId) {
        return client.hold(Kind.SEMAPHORE, name, permitId) != null;
    }

    // ------------------------------------------------------------------ async (Redisson's RPermitExpirableSemaphoreAsync)

    /**
     * {@code take} on a daemon thread of the client: the permit id, or null. Cancelling the
     * future gives the wait up; permits that raced with the cancellation are given back.
     */
    private CompletableFuture<String> takeAsync(int permits, long waitMs, long leaseMs) {
        if (permits < 1 || permits > limit) {
            throw new DlockArgumentException("permits", "permits must be 1.." + limit + ", got " + permits);
        }
        return client.async(() -> take(permits, waitMs, leaseMs, true), id -> id, this::tryRelease);
    }

    /** {@link #acquire()} without blocking: the permit id. */
    public CompletableFuture<String> acquireAsync() {
        return takeAsync(1, -1, -1);
    }

    /** {@link #acquire(long, TimeUnit)} without blocking. */
    public CompletableFuture<String> acquireAsync(long leaseTime, TimeUnit unit) {
        return takeAsync(1, -1, lease(leaseTime, unit));
    }

    /** {@link #acquire(int, long, TimeUnit)} without blocking. */
    public CompletableFuture<String> acquireAsync(int permits, long leaseTime, TimeUnit unit) {
        return takeAsync(permits, -1, lease(leaseTime, unit));
    }

    /** {@link #tryAcquire()} without blocking: the permit id, or null. */
    public CompletableFuture<String> tryAcquireAsync() {
        return takeAsync(1, 0, -1);
    }

    /** {@link #tryAcquire(long, TimeUnit)} without blocking. */
    public CompletableFuture<String> tryAcquireAsync(long waitTime, TimeUnit unit) {
        return takeAsync(1, ms(waitTime, unit), -1);
    }

    /** {@link #tryAcquire(long, long, TimeUnit)} without blocking. */
    public CompletableFuture<String> tryAcquireAsync(long waitTime, long leaseTime, TimeUnit unit) {
        long lease = lease(leaseTime, unit);
        return takeAsync(1, ms(waitTime, unit), lease);
    }

    /** {@link #tryAcquire(int, long, long, TimeUnit)} without blocking. */
    public CompletableFuture<String> tryAcquireAsync(int permits, long waitTime, long leaseTime, TimeUnit unit) {
        long lease = lease(leaseTime, unit);
        return takeAsync(permits, ms(waitTime, unit), lease);
    }

    /** {@link #tryRelease(String)} without blocking. */
    public CompletableFuture<Boolean> tryReleaseAsync(String permitId) {
        return client.async(() -> tryRelease(permitId), b -> b, null);
    }

    /** {@link #release(String)} without blocking (fails as it throws). */
    public CompletableFuture<Void> releaseAsync(String permitId) {
        return client.async(() -> {
            release(permitId);
            return Boolean.TRUE;
        }, b -> null, null);
    }

    /** {@link #availablePermits()} without blocking. */
    public CompletableFuture<Integer> availablePermitsAsync() {
        return client.async(this::availablePermits, n -> n, null);
    }

    /** Removes the semaphore and every grant of it. */
    public boolean forceRelease() {
        return Replies.integer(client.call(key, Commands.forceRelease(key)), "DLOCK.FORCERELEASE") == 1;
    }
}
