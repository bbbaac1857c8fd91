package io.dlock;

/** Told when a hold is lost (see {@link Dlock#addLostListener}). */
@FunctionalInterface
public interface LostListener {
    /**
     * Called once per lost hold, on a thread of the client's own that never times or renews
     * a hold (a slow listener delays no loss signal of another hold, but other listeners of
     * the same loss wait for it: return quickly).
     *
     * @param lockName the lock's name (its key)
     * @param owner the holder ({@code clientId:threadId}, or a semaphore permit id)
     * @param token the hold's fencing token
     * @param reason why it counts as lost
     */
    void onLost(String lockName, String owner, long token, LostReason reason);
}
