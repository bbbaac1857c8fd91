package io.dlock;

import io.dlock.core.Kind;
import io.dlock.core.Leases;
import java.util.Iterator;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentLinkedDeque;
import java.util.concurrent.TimeUnit;

/**
 * A counting semaphore in the shape of Redisson's {@code RSemaphore} (and
 * {@link java.util.concurrent.Semaphore}): {@link #acquire(int)}, {@link #tryAcquire},
 * {@link #release(int)}, {@link #availablePermits()}, and their async forms. Beside
 * {@link DSemaphore}, whose grants are named by permit ids.
 *
 * <p>On the server each acquire is one grant of {@code DLOCK.SEMACQUIRE}, leased with the
 * watchdog's lease and renewed while it is held, FIFO with every other waiter; this object
 * keeps the grants of this client and {@link #release(int)} gives back permits of them,
 * oldest first, from any thread of the client. Unlike Redisson's, permits belong to the
 * client that acquired them (a crashed process's permits come back at their lease), so a
 * release gives back only permits this object holds: releasing more is refused.
 */
public final class DCountingSemaphore {
    private final DSemaphore permits;
    private final Dlock client;
    /** This object's grants: permit id and how many permits it still has, oldest first. */
    private final ConcurrentLinkedDeque<Grant> grants = new ConcurrentLinkedDeque<>();

    private static final class Grant {
        final String id;
        int count;

        Grant(String id, int count) {
            this.id = id;
            this.count = count;
        }
    }

    DCountingSemaphore(Dlock client, String name, int limit, LockOptions options) {
        this.client = client;
        this.permits = new DSemaphore(client, name, limit, options);
    }

    /** The semaphore's name (its key). */
    public String getName() {
        return permits.getName();
    }

    /** The number of permits (fixed when the key is created). */
    public int getLimit() {
        return permits.getLimit();
    }

    private boolean took(String id, int n) {
        if (id == null) {
            return false;
        }
        grants.addLast(new Grant(id, n));
        return true;
    }

    /** Waits for one permit. */
    public void acquire() throws InterruptedException {
        acquire(1);
    }

    /** Waits for {@code n} permits (taken together: FIFO, never starved by smaller requests). */
    public void acquire(int n) throws InterruptedException {
        took(permits.acquire(n, -1, TimeUnit.MILLISECONDS), n);
    }

    /** One permit if available now. */
    public boolean tryAcquire() {
        return tryAcquire(1);
    }

    /** {@code n} permits if available now. */
    public boolean tryAcquire(int n) {
        try {
            return took(permits.tryAcquire(n, 0, -1, TimeUnit.MILLISECONDS), n);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return false;
        }
    }

    /** Waits up to {@code waitTime} for one permit. */
    public boolean tryAcquire(long waitTime, TimeUnit unit) throws InterruptedException {
        return tryAcquire(1, waitTime, unit);
    }

    /** Waits up to {@code waitTime} for {@code n} permits. */
    public boolean tryAcquire(int n, long waitTime, TimeUnit unit) throws InterruptedException {
        return took(permits.tryAcquire(n, waitTime, -1, unit), n);
    }

    /** Gives one permit back. */
    public void release() {
        release(1);
    }

    /**
     * Gives {@code n} permits back, from this object's oldest grants (a grant with more
     * gives back part of its permits: {@code DLOCK.RELEASE … PERMITS n}). Permits whose
     * grant was lost meanwhile (lease, force-release) count as given back.
     *
     * @throws DlockArgumentException when {@code n} is below 1 or above the permits this
     *     object holds (nothing is sent)
     */
    public void release(int n) {
        int held = heldPermits();
        if (n < 1 || n > held) {
            throw new DlockArgumentException("permits", "permits to release must be 1 to the " + held + " this"
                    + " client holds of semaphore \"" + getName() + "\", got " + n);
        }
        int left = n;
        DlockException failure = null;
        while (left > 0) {
            Grant g = grants.peekFirst();
            if (g == null) {
                break;
            }
            int give;
            boolean whole;
            synchronized (g) {
                give = Math.min(left, g.count);
                whole = give == g.count;
                g.count -= give;
            }
            if (whole) {
                grants.remove(g);
            }
            left -= give;
            UnlockResult r;
            try {
                r = whole ? permits.releaseAndGetResult(g.id)
                        : client.releasePermits(getName(), Kind.SEMAPHORE, g.id, give);
            } catch (IllegalMonitorStateException e) {
                continue; // lost and forgotten already
            }
            if (r.status() == UnlockResult.Status.UNKNOWN && failure == null) {
                failure = r.error();
            }
        }
        if (failure != null) {
            throw failure;
        }
    }

    /** How many permits this object holds (its grants that were not given back). */
    public int heldPermits() {
        int n = 0;
        for (Iterator<Grant> it = grants.iterator(); it.hasNext();) {
            Grant g = it.next();
            synchronized (g) {
                n += g.count;
            }
        }
        return n;
    }

    /** Permits free now ({@code DLOCK.INFO}). */
    public int availablePermits() {
        return permits.availablePermits();
    }

    /** The permit-id semaphore underneath (loss signals of its grants, tokens). */
    public DSemaphore permitIds() {
        return permits;
    }

    // ------------------------------------------------------------------ async (Redisson's RSemaphoreAsync)

    /**
     * Takes {@code n} permits on a daemon thread of the client; {@code value} of whether
     * they were granted. Cancelling the future gives the wait up; a grant that raced with
     * the cancellation is given back.
     */
    private <T> CompletableFuture<T> takeAsync(int n, long waitTime, TimeUnit unit,
            java.util.function.Function<Boolean, T> value) {
        if (n < 1 || n > getLimit()) {
            throw new DlockArgumentException("permits", "permits must be 1.." + getLimit() + ", got " + n);
        }
        long wait = waitTime < 0 ? -1 : Leases.waitOrForever("waitTime", waitTime, unit);
        return client.async(() -> permits.tryAcquire(n, wait, -1, TimeUnit.MILLISECONDS),
                id -> value.apply(took(id, n)), id -> {
                    grants.removeIf(g -> g.id.equals(id));
                    permits.tryRelease(id);
                });
    }

    private CompletableFuture<Boolean> takeAsync(int n, long waitTime, TimeUnit unit) {
        return takeAsync(n, waitTime, unit, b -> b);
    }

    /** {@link #acquire()} without blocking; cancelling the future gives the wait up. */
    public CompletableFuture<Void> acquireAsync() {
        return acquireAsync(1);
    }

    /** {@link #acquire(int)} without blocking. */
    public CompletableFuture<Void> acquireAsync(int n) {
        return takeAsync(n, -1, TimeUnit.MILLISECONDS, b -> null);
    }

    /** {@link #tryAcquire()} without blocking. */
    public CompletableFuture<Boolean> tryAcquireAsync() {
        return takeAsync(1, 0, TimeUnit.MILLISECONDS);
    }

    /** {@link #tryAcquire(int)} without blocking. */
    public CompletableFuture<Boolean> tryAcquireAsync(int n) {
        return takeAsync(n, 0, TimeUnit.MILLISECONDS);
    }

    /** {@link #tryAcquire(long, TimeUnit)} without blocking. */
    public CompletableFuture<Boolean> tryAcquireAsync(long waitTime, TimeUnit unit) {
        return takeAsync(1, Math.max(0, waitTime), unit);
    }

    /** {@link #tryAcquire(int, long, TimeUnit)} without blocking. */
    public CompletableFuture<Boolean> tryAcquireAsync(int n, long waitTime, TimeUnit unit) {
        return takeAsync(n, Math.max(0, waitTime), unit);
    }

    /** {@link #release()} without blocking. */
    public CompletableFuture<Void> releaseAsync() {
        return releaseAsync(1);
    }

    /** {@link #release(int)} without blocking (checked at once: more than held is refused here). */
    public CompletableFuture<Void> releaseAsync(int n) {
        int held = heldPermits();
        if (n < 1 || n > held) {
            throw new DlockArgumentException("permits", "permits to release must be 1 to the " + held + " this"
                    + " client holds of semaphore \"" + getName() + "\", got " + n);
        }
        return client.async(() -> {
            release(n);
            return Boolean.TRUE;
        }, b -> null, null);
    }

    /** {@link #availablePermits()} without blocking. */
    public CompletableFuture<Integer> availablePermitsAsync() {
        return permits.availablePermitsAsync();
    }
}
