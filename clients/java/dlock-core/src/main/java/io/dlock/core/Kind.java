package io.dlock.core;

/** The kind of hold a request asks for, and the command that asks for it. */
public enum Kind {
    /** A reentrant mutex ({@code DLOCK.ACQUIRE}). */
    MUTEX("DLOCK.ACQUIRE", null),
    /** The shared mode of a read-write lock ({@code DLOCK.RWACQUIRE … READ}). */
    READ("DLOCK.RWACQUIRE", "READ"),
    /** The exclusive mode of a read-write lock ({@code DLOCK.RWACQUIRE … WRITE}). */
    WRITE("DLOCK.RWACQUIRE", "WRITE"),
    /** A fair (FIFO) mutex ({@code DLOCK.FAIRACQUIRE}). */
    FAIR("DLOCK.FAIRACQUIRE", null),
    /** Permits of a counting semaphore ({@code DLOCK.SEMACQUIRE}). */
    SEMAPHORE("DLOCK.SEMACQUIRE", null);

    private final String command;
    private final String mode;

    Kind(String command, String mode) {
        this.command = command;
        this.mode = mode;
    }

    /** The acquire command of this kind. */
    public String command() {
        return command;
    }

    /** {@code READ} or {@code WRITE} for the modes of a read-write lock, else null. */
    public String mode() {
        return mode;
    }

    /**
     * Whether a request that is not granted at once keeps a queue place between polls
     * (a fair lock does, for {@code dlock.fair-queue-timeout-ms}); such a place must be
     * given up with {@code DLOCK.CANCEL} when the caller gives up.
     */
    public boolean keepsQueuePlace() {
        return this == FAIR;
    }
}
