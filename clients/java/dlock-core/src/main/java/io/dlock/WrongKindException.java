package io.dlock;

/** {@code WRONGKIND}: the key holds a lock of another kind (the message names it). */
public class WrongKindException extends DlockServerException {
    private static final long serialVersionUID = 1L;

    /** An exception for the server's error text {@code message}. */
    public WrongKindException(String message) {
        super("WRONGKIND", message);
    }
}
