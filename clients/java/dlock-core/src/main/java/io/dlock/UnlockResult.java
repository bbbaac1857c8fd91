package io.dlock;

import java.util.Objects;

/**
 * What an unlock did ({@code docs/clients.md}, rule 3). Whatever it is, the hold is no
 * longer renewed — except {@link Status#STILL_HELD}, where an outer reentrant hold stays.
 *
 * @param status the outcome
 * @param error for {@link Status#UNKNOWN}: the error of the retry (its first attempt's
 *     error is suppressed in it); for {@link Status#LOST}: the server's {@code NOTHELD};
 *     otherwise null
 */
public record UnlockResult(Status status, DlockException error) {
    /** The outcomes of an unlock. */
    public enum Status {
        /** The server ended the hold ({@code DLOCK.RELEASE} answered 1). */
        RELEASED,
        /** A reentrant count remains ({@code 0}): the hold stays, and stays renewed. */
        STILL_HELD,
        /**
         * The server said the hold was already gone ({@code NOTHELD}): it had ended before
         * (its lease, a force-release, its BIND connection, its key deleted).
         */
        LOST,
        /**
         * The release failed on the connection and its retry on a fresh connection failed
         * too: the hold is not renewed and ends at its lease at the latest.
         */
        UNKNOWN
    }

    /** {@link Status#RELEASED}. */
    public static final UnlockResult RELEASED = new UnlockResult(Status.RELEASED, null);
    /** {@link Status#STILL_HELD}. */
    public static final UnlockResult STILL_HELD = new UnlockResult(Status.STILL_HELD, null);

    /** Checks the status. */
    public UnlockResult {
        Objects.requireNonNull(status, "status");
    }

    /** Whether the server ended the hold. */
    public boolean isReleased() {
        return status == Status.RELEASED;
    }
}
