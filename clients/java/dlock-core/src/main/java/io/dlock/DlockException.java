package io.dlock;

/** Base class of every exception this library throws (unchecked, as Redisson's). */
public class DlockException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    /** An exception with a message. */
    public DlockException(String message) {
        super(message);
    }

    /** An exception with a message and a cause. */
    public DlockException(String message, Throwable cause) {
        super(message, cause);
    }
}
