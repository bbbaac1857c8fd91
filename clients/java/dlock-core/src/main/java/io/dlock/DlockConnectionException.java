package io.dlock;

/** The command could not be sent or its reply did not arrive (connection, timeout). */
public class DlockConnectionException extends DlockException {
    private static final long serialVersionUID = 1L;

    /** An exception with a message and the transport's exception. */
    public DlockConnectionException(String message, Throwable cause) {
        super(message, cause);
    }
}
