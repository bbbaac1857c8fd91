package io.dlock.spi;

import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * The future of {@link Transport#callBlocking} for a transport that may queue a call before
 * sending it (e.g. waiting for a pooled connection): a caller that gives up can take back a
 * call that was not sent yet, so no request reaches the server for it.
 */
public class BlockingCall extends CompletableFuture<List<Object>> {
    private static final int QUEUED = 0;
    private static final int SENT = 1;
    private static final int ABANDONED = 2;
    private final AtomicInteger state = new AtomicInteger(QUEUED);

    /** Called by the transport just before it sends; false when the caller gave the call up. */
    public boolean markSent() {
        return state.compareAndSet(QUEUED, SENT) || state.get() == SENT;
    }

    /**
     * Called by a caller that gives up: true when the call had not been sent (then it never
     * will be, and this future completes with a cancellation).
     */
    public boolean abandonIfUnsent() {
        if (state.compareAndSet(QUEUED, ABANDONED)) {
            cancel(false);
            return true;
        }
        return false;
    }
}
