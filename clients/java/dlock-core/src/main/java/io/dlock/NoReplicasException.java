package io.dlock;

/** {@code NOREPLICAS}: {@code min-replicas-to-write} is not met, so the server refuses acquires. */
public class NoReplicasException extends DlockServerException {
    private static final long serialVersionUID = 1L;

    /** An exception for the server's error text {@code message}. */
    public NoReplicasException(String message) {
        super("NOREPLICAS", message);
    }
}
