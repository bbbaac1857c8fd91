package io.dlock;

/**
 * Bad input, refused before anything was sent to the server: {@link #argument()} names
 * the argument (a null or empty name, a lease or wait out of range, a renew interval not
 * below the lease, …) and the message says what was expected. An
 * {@link IllegalArgumentException}, as Java code expects of bad arguments.
 */
public class DlockArgumentException extends IllegalArgumentException {
    private static final long serialVersionUID = 1L;
    private final String argument;

    /** Bad {@code argument}; {@code message} says what was expected and what came. */
    public DlockArgumentException(String argument, String message) {
        super(message);
        this.argument = argument;
    }

    /** The name of the argument that was wrong (e.g. {@code leaseTime}, {@code name}). */
    public String argument() {
        return argument;
    }
}
