package io.dlock.spi;

import java.util.List;
import java.util.concurrent.CompletableFuture;

/**
 * How the lock objects reach the server. A transport sends argument vectors (the command
 * name first) routed by {@code key} (for Redis Cluster) and hands replies back as
 * {@code null} (nil), {@link Long}, {@code byte[]}, {@link List} or {@link java.util.Map}.
 * An error reply becomes the exception of {@link io.dlock.core.Errors#fromServer}; a
 * connection failure a {@link io.dlock.DlockConnectionException}.
 *
 * <p>Implementations: {@code io.dlock.jedis.JedisTransport} and
 * {@code io.dlock.lettuce.LettuceTransport}.
 */
public interface Transport extends AutoCloseable {
    /** Sends a command that does not block on the server and returns its reply. */
    Object call(byte[] key, byte[][] args);

    /**
     * Sends commands that may block on the server (an acquire with {@code WAIT}, an AWAIT)
     * on a connection of their own, pipelined in order on that one connection (so a
     * {@code WAIT replicas ms} after an acquire answers for that grant). The future
     * completes with the replies, in order, or with the first error. It must be safe to
     * send other commands (such as {@code DLOCK.CANCEL}) while it is outstanding.
     */
    CompletableFuture<List<Object>> callBlocking(byte[] key, List<byte[][]> commands);

    /**
     * Sends one command that may block on the server and waits for its reply on the calling
     * thread, for a wait that nothing interrupts ({@code lock()}): the reply then wakes the
     * caller itself, not a thread that hands it over. Returns the completed future, or
     * {@code null} when this transport cannot wait here (then the caller uses
     * {@link #callBlocking}). The default never waits here.
     *
     * @param waitMs the server-side wait the command asks for (a reply comes within it)
     */
    default CompletableFuture<List<Object>> callBlockingOnCaller(byte[] key, byte[][] args, long waitMs) {
        return null;
    }

    /**
     * The longest server-side wait one blocking call may ask for, so that the reply comes
     * before the client library's own command timeout (default: no limit).
     */
    default long maxBlockingMs() {
        return Long.MAX_VALUE;
    }

    /** A short description of the server(s), for messages. */
    String describe();

    /** Lets go of connections this transport opened itself (not those it was given). */
    @Override
    void close();
}
