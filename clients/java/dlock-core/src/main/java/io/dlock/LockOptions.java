package io.dlock;

/**
 * Per-lock options beyond what Redisson has.
 *
 * @param bind {@code BIND}: the hold ends when the connection that took it closes
 *     (with pooled connections that is the pooled connection, not your thread)
 * @param lockDelayMs {@code LOCKDELAY ms}: a hold that ends other than by release keeps
 *     excluding others for this long (Chubby's lock-delay); 0 for none
 * @param replicas durable grants: after each grant, {@code WAIT replicas replicasTimeoutMs}
 *     on the same connection; fewer acks release the grant and throw
 *     {@link NotDurableException}; 0 for none
 * @param replicasTimeoutMs how long to wait for the replicas
 */
public record LockOptions(boolean bind, long lockDelayMs, int replicas, long replicasTimeoutMs) {
    /** No BIND, no LOCKDELAY, no durable grants. */
    public static final LockOptions DEFAULT = new LockOptions(false, 0, 0, 1000);

    /** Checks the values. */
    public LockOptions {
        if (lockDelayMs < 0 || lockDelayMs > io.dlock.core.Leases.MAX_MS) {
            throw new DlockArgumentException("lockDelayMs", "lockDelayMs must be 0 to 2^40 ms, got " + lockDelayMs);
        }
        if (replicas < 0) {
            throw new DlockArgumentException("replicas", "replicas must be >= 0, got " + replicas);
        }
        if (replicasTimeoutMs < 0) {
            throw new DlockArgumentException("replicasTimeoutMs", "replicasTimeoutMs must be >= 0, got "
                    + replicasTimeoutMs);
        }
    }

    /** These options with {@code BIND} on or off. */
    public LockOptions withBind(boolean on) {
        return new LockOptions(on, lockDelayMs, replicas, replicasTimeoutMs);
    }

    /** These options with a lock-delay. */
    public LockOptions withLockDelay(long ms) {
        return new LockOptions(bind, ms, replicas, replicasTimeoutMs);
    }

    /** These options with durable grants: {@code n} replicas within {@code timeoutMs}. */
    public LockOptions withReplicas(int n, long timeoutMs) {
        return new LockOptions(bind, lockDelayMs, n, timeoutMs);
    }
}
