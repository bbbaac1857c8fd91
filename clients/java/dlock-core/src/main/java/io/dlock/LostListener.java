package io.dlock;

/** Told when a hold is lost (see {@link Dlock#addLostListener}). */
@FunctionalInterface
public interface LostListener {
    /**
     * Called once per lost hold, on the client's watchdog thread (return quickly).
     *
     * @param lockName the lock's name (its key)
     * @param owner the holder ({@code clientId:threadId}, or a semaphore permit id)
     * @param token the hold's fencing token
     * @param reason why it counts as lost
     */
    void onLost(String lockName, String owner, long token, LostReason reason);
}
