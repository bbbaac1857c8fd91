package io.dlock;

/** {@code QUEUEFULL}: the lock's queue has {@code dlock.max-queue} places already. */
public class QueueFullException extends DlockServerException {
    private static final long serialVersionUID = 1L;

    /** An exception for the server's error text {@code message}. */
    public QueueFullException(String message) {
        super("QUEUEFULL", message);
    }
}
