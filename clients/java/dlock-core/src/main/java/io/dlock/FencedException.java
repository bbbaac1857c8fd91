package io.dlock;

/** {@code FENCED}: {@code DLOCK.FENCED} refused to run the command because the token is no longer live. */
public class FencedException extends DlockServerException {
    private static final long serialVersionUID = 1L;

    /** An exception for the server's error text {@code message}. */
    public FencedException(String message) {
        super("FENCED", message);
    }
}
