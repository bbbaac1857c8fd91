package io.dlock;

import io.dlock.core.Kind;

/**
 * Told of the waits and holds of a {@link Dlock} client, for metrics
 * ({@link Dlock#setObserver}); the Spring Boot starter's Micrometer meters are one. Each
 * method runs on the thread that waited or released (a loss: on the thread that noticed
 * it, often the watchdog's), inside the client's own call: return at once. What a method
 * throws is ignored.
 */
public interface DlockObserver {
    /** An observer that does nothing (the default). */
    DlockObserver NONE = new DlockObserver() { };

    /** What an acquire came to. */
    enum WaitOutcome {
        /** Granted. */
        ACQUIRED,
        /** Not granted within its wait (a try without a wait that found the lock taken, too). */
        TIMED_OUT,
        /** Ended by an interrupt or an error (connection, deadlock, wrong kind, …). */
        FAILED
    }

    /**
     * An acquire of a lock, a mode of a read-write lock or semaphore permits ended.
     *
     * @param kind the kind of hold asked for
     * @param name the lock's name
     * @param nanos from the call to its end
     * @param outcome granted, not granted in time, or failed
     */
    default void waited(Kind kind, String name, long nanos, WaitOutcome outcome) {
    }

    /**
     * A countdown latch's {@code await} ended.
     *
     * @param name the latch's name
     * @param nanos from the call to its end
     * @param outcome {@link WaitOutcome#ACQUIRED} when the count reached 0, else not in time or failed
     */
    default void awaited(String name, long nanos, WaitOutcome outcome) {
    }

    /**
     * A hold ended by its owner's release (the last release of a reentrant hold).
     *
     * @param heldNanos from its grant to its release
     */
    default void released(Kind kind, String name, long heldNanos) {
    }

    /**
     * A hold was lost (its lost signal fired).
     *
     * @param heldNanos from its grant to the moment it counted as lost
     * @param reason why
     */
    default void lost(Kind kind, String name, long heldNanos, LostReason reason) {
    }
}
