package io.dlock;

import io.dlock.core.Commands;
import io.dlock.core.Leases;
import io.dlock.core.Replies;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * A countdown latch (Redisson's {@code RCountDownLatch}), waited for on the server in slices.
 * The latch key exists while the count is above 0.
 */
public final class DCountDownLatch {
    private final Dlock client;
    private final String name;
    private final byte[] key;

    DCountDownLatch(Dlock client, String name) {
        this.client = client;
        this.name = Leases.checkName("name", name);
        this.key = Commands.bytes(name);
    }

    /** The latch's name (its key). */
    public String getName() {
        return name;
    }

    /** Sets the count when no latch exists; true when set. */
    public boolean trySetCount(long count) {
        if (count < 1 || count > (1L << 32)) {
            throw new DlockArgumentException("count", "count must be 1 to 2^32, got " + count);
        }
        return Replies.integer(client.call(key, Commands.latchSet(key, count)), "DLOCK.LATCHSET") == 1;
    }

    /** Lowers the count by one (at 0 every waiter is let through). */
    public void countDown() {
        Replies.integer(client.call(key, Commands.countDown(key)), "DLOCK.COUNTDOWN");
    }

    /** The current count (0 when open). */
    public long getCount() {
        Map<String, Object> info = client.info(key);
        return info != null && info.get("count") instanceof Long l ? l : 0;
    }

    /** Waits until the count reaches 0. */
    public void await() throws InterruptedException {
        observed(-1);
    }

    /**
     * Waits up to {@code timeout} for the count to reach 0; true when it did. The deadline
     * holds when the server is partitioned away (false at the deadline); a connection that
     * fails throws {@link DlockConnectionException}.
     */
    public boolean await(long timeout, TimeUnit unit) throws InterruptedException {
        return observed(Math.max(0, Leases.waitOrForever("timeout", timeout, unit)));
    }

    /** {@link #awaitMs}, told to the client's {@link DlockObserver}. */
    private boolean observed(long total) throws InterruptedException {
        long start = System.nanoTime();
        DlockObserver.WaitOutcome outcome = DlockObserver.WaitOutcome.FAILED;
        try {
            boolean opened = awaitMs(total);
            outcome = opened ? DlockObserver.WaitOutcome.ACQUIRED : DlockObserver.WaitOutcome.TIMED_OUT;
            return opened;
        } finally {
            client.observeAwait(name, start, outcome);
        }
    }

    /** Waits in slices that fit the transport's timeout ({@code docs/clients.md}, rule 4); {@code < 0}: without end. */
    private boolean awaitMs(long total) throws InterruptedException {
        long start = System.nanoTime();
        long deadline = start + Math.max(0, total) * 1_000_000L;
        while (true) {
            long left = total < 0 ? Long.MAX_VALUE : Math.max(0, (deadline - System.nanoTime()) / 1_000_000L);
            long slice = Math.min(left, client.sliceMs());
            long bound = total < 0 ? System.nanoTime() + (slice + client.replyBoundMs()) * 1_000_000L
                    : deadline + Dlock.GRACE_NANOS;
            CompletableFuture<List<Object>> f = client.blocking(key, Commands.await(key, slice));
            Object r;
            try {
                r = f.get(Math.max(1, bound - System.nanoTime()), TimeUnit.NANOSECONDS).get(0);
            } catch (ExecutionException e) {
                throw Dlock.unwrap(e.getCause());
            } catch (TimeoutException e) {
                if (total >= 0) {
                    return false; // the deadline passed with no reply: not opened, as far as this caller knows
                }
                throw new DlockConnectionException("no reply to DLOCK.AWAIT on " + name + " in time (the server"
                        + " may be unreachable)", e);
            }
            if (r instanceof Long l && l == 1) {
                return true;
            }
            if (total >= 0 && left <= slice) {
                return false;
            }
        }
    }

    // ------------------------------------------------------------------ async (Redisson's RCountDownLatchAsync)

    /** {@link #trySetCount(long)} without blocking. */
    public CompletableFuture<Boolean> trySetCountAsync(long count) {
        if (count < 1 || count > (1L << 32)) {
            throw new DlockArgumentException("count", "count must be 1 to 2^32, got " + count);
        }
        return client.async(() -> trySetCount(count), b -> b, null);
    }

    /** {@link #countDown()} without blocking. */
    public CompletableFuture<Void> countDownAsync() {
        return client.async(() -> {
            countDown();
            return Boolean.TRUE;
        }, b -> null, null);
    }

    /** {@link #getCount()} without blocking. */
    public CompletableFuture<Long> getCountAsync() {
        return client.async(this::getCount, n -> n, null);
    }

    /**
     * {@link #await()} without blocking: completes when the count reaches 0. Cancelling the
     * future ends the wait (its connection stays blocked until the slice ends).
     */
    public CompletableFuture<Void> awaitAsync() {
        return client.async(() -> {
            await();
            return Boolean.TRUE;
        }, b -> null, null);
    }

    /** {@link #await(long, TimeUnit)} without blocking: true when the count reached 0 in time. */
    public CompletableFuture<Boolean> awaitAsync(long timeout, TimeUnit unit) {
        long ms = Math.max(0, Leases.waitOrForever("timeout", timeout, unit));
        return client.async(() -> observed(ms), b -> b, null);
    }
}
