package io.dlock;

/** Why a hold reports itself lost. */
public enum LostReason {
    /** A renewal answered 0 or a release answered {@code NOTHELD}: the lease had ended or the lock was force-released. */
    NOT_HELD,
    /** The server did not confirm a renewal before the lease would end (less a drift margin). */
    UNREACHABLE,
    /** Taken with an explicit lease (no watchdog), and that lease has run out without a release. */
    LEASE_ENDED,
    /** RedLock: more holds than a quorum allows were lost. */
    NO_QUORUM
}
