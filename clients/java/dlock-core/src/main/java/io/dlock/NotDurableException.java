package io.dlock;

/**
 * A durable grant ({@code replicas > 0}) reached fewer replicas than asked within the
 * timeout; the grant was released again, so nothing is held.
 */
public class NotDurableException extends DlockException {
    private static final long serialVersionUID = 1L;
    private final int wanted;
    private final long acked;

    /** {@code wanted} replicas were asked for, {@code acked} confirmed the grant. */
    public NotDurableException(String lock, int wanted, long acked) {
        super("the grant of " + lock + " reached " + acked + " replica(s) within the timeout, "
                + wanted + " wanted; it was released again");
        this.wanted = wanted;
        this.acked = acked;
    }

    /** Replicas asked for. */
    public int wanted() {
        return wanted;
    }

    /** Replicas that confirmed the grant. */
    public long acked() {
        return acked;
    }
}
