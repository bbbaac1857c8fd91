package io.dlock;

/** {@code NOTHELD}: the owner does not hold the lock (never acquired, lease ended, or force-released). */
public class NotHeldException extends DlockServerException {
    private static final long serialVersionUID = 1L;

    /** An exception for the server's error text {@code message}. */
    public NotHeldException(String message) {
        super("NOTHELD", message);
    }
}
