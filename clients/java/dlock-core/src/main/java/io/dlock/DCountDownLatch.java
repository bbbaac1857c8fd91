package io.dlock;

import io.dlock.core.Commands;
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
        this.name = name;
        this.key = Commands.bytes(name);
    }

    /** The latch's name (its key). */
    public String getName() {
        return name;
    }

    /** Sets the count when no latch exists; true when set. */
    public boolean trySetCount(long count) {
        if (count < 1) {
            throw new IllegalArgumentException("count must be at least 1, got " + count);
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
        long start = System.nanoTime();
        DlockObserver.WaitOutcome outcome = DlockObserver.WaitOutcome.FAILED;
        try {
            while (!awaitSlices(client.getConfig().getWaitSlice(), TimeUnit.MILLISECONDS)) {
                // next slice
            }
            outcome = DlockObserver.WaitOutcome.ACQUIRED;
        } finally {
            client.observeAwait(name, start, outcome);
        }
    }

    /** Waits up to {@code timeout} for the count to reach 0; true when it did. */
    public boolean await(long timeout, TimeUnit unit) throws InterruptedException {
        long start = System.nanoTime();
        DlockObserver.WaitOutcome outcome = DlockObserver.WaitOutcome.FAILED;
        try {
            boolean opened = awaitSlices(timeout, unit);
            outcome = opened ? DlockObserver.WaitOutcome.ACQUIRED : DlockObserver.WaitOutcome.TIMED_OUT;
            return opened;
        } finally {
            client.observeAwait(name, start, outcome);
        }
    }

    private boolean awaitSlices(long timeout, TimeUnit unit) throws InterruptedException {
        long start = System.nanoTime();
        long total = unit.toMillis(timeout);
        while (true) {
            long left = total - (System.nanoTime() - start) / 1_000_000L;
            long slice = Math.max(0, Math.min(left, Math.min(client.getConfig().getWaitSlice(),
                    client.getTransport().maxBlockingMs())));
            CompletableFuture<List<Object>> f = client.blocking(key, Commands.await(key, slice));
            Object r;
            try {
                r = f.get(slice + 30_000L, TimeUnit.MILLISECONDS).get(0);
            } catch (ExecutionException e) {
                throw Dlock.unwrap(e.getCause());
            } catch (TimeoutException e) {
                throw new DlockConnectionException("no reply to DLOCK.AWAIT on " + name, e);
            }
            if (r instanceof Long l && l == 1) {
                return true;
            }
            if (left <= slice) {
                return false;
            }
        }
    }
}
