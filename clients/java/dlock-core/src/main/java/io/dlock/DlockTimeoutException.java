package io.dlock;

/**
 * A wait with a deadline ran out while the server could not be reached: the deadline
 * was kept, and {@link #getCause()} is the last connection error. (A wait that simply
 * was not granted in time is a {@code false} or {@code null} answer, not this.) A
 * {@link DlockConnectionException}, so code that catches connection failures of a wait
 * keeps catching it.
 */
public class DlockTimeoutException extends DlockConnectionException {
    private static final long serialVersionUID = 1L;

    /** The deadline ran out; {@code lastError} is the last connection failure seen. */
    public DlockTimeoutException(String message, Throwable lastError) {
        super(message, lastError);
    }
}
