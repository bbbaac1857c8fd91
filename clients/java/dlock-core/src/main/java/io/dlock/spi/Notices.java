package io.dlock.spi;

/**
 * The subscriber connection of one client for the lock notices ({@code released},
 * {@code expired}, {@code deleted}, {@code disconnected}) on the locks' channels
 * ({@link io.dlock.core.Commands#channel}): one connection per client (one per shard in
 * a cluster, where it subscribes with {@code SSUBSCRIBE}), resubscribed after it
 * reconnects. Every method returns at once; the work happens on the subscriber's side.
 */
public interface Notices extends AutoCloseable {
    /** Subscribes to {@code channel}, the notice channel of lock {@code key}; idempotent. */
    void subscribe(byte[] channel, byte[] key);

    /** Unsubscribes from {@code channel}. */
    void unsubscribe(byte[] channel);

    /** Stops listening and closes the subscriber connection(s); idempotent. */
    @Override
    void close();

    /** What a subscriber tells its client. Both are called on a subscriber thread: return quickly. */
    interface Listener {
        /** A message arrived on {@code channel}. */
        void onMessage(byte[] channel, String message);

        /**
         * {@code channel} is subscribed: the first time, or again after the connection was
         * lost and made anew (messages may have been missed meanwhile).
         */
        void onSubscribed(byte[] channel);
    }
}
