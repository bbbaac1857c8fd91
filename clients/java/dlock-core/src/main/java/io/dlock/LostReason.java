package io.dlock;

/**
 * Why a hold reports itself lost (the reasons of {@code docs/clients.md}).
 */
public enum LostReason {
    /**
     * The server ended the hold and no notice said why: a renewal answered 0, a release
     * answered {@code NOTHELD}, or a check after a (re)subscription found it gone.
     */
    NOT_HELD,
    /**
     * No renewal was acknowledged before the lease could end ({@code sent + lease − margin}:
     * the server may be unreachable or partitioned away); also every hold still held when
     * its client was closed.
     */
    UNREACHABLE,
    /**
     * The lease ended: a hold taken with an explicit lease (no watchdog) ran out without a
     * release, or the server's {@code expired} notice for the lock.
     */
    EXPIRED,
    /**
     * A {@code released} notice for a hold this client did not release:
     * {@code DLOCK.FORCERELEASE} (Redisson's {@code forceUnlock}), or the same owner
     * released it through another client.
     */
    FORCED,
    /** The lock's key was deleted ({@code DEL}, {@code FLUSHDB}, eviction). */
    DELETED,
    /** The hold was taken with {@code BIND} and its connection closed. */
    DISCONNECTED,
    /** RedLock: more holds than a quorum allows were lost. */
    NO_QUORUM;

    /**
     * The old name of {@link #EXPIRED}: an explicit lease that ran out.
     *
     * @deprecated use {@link #EXPIRED} (the same value)
     */
    @Deprecated
    public static final LostReason LEASE_ENDED = EXPIRED;

    /** The reason of a notice message ({@code released}, {@code expired}, …); null for another text. */
    public static LostReason ofNotice(String message) {
        if (message == null) {
            return null;
        }
        return switch (message) {
            case "released" -> FORCED;
            case "expired" -> EXPIRED;
            case "deleted" -> DELETED;
            case "disconnected" -> DISCONNECTED;
            default -> null;
        };
    }

    /** The contract's name of this reason ({@code forced}, {@code not_held}, …). */
    public String contractName() {
        return name().toLowerCase(java.util.Locale.ROOT);
    }
}
