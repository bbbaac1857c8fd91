package io.dlock.spi;

import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Executor;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;

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
     * {@link #call}, giving up with a {@link io.dlock.DlockConnectionException} when no
     * reply came within {@code timeoutMs} where the transport can bound a call shorter
     * than its own timeout (the default does not: it is {@link #call}).
     */
    default Object call(byte[] key, byte[][] args, long timeoutMs) {
        return call(key, args);
    }

    /**
     * Sends a command that does not block on the server without blocking the caller: the
     * future completes with the reply, or with a {@link io.dlock.DlockConnectionException}
     * when none came within {@code timeoutMs} (a transport whose connection may then be out
     * of step with its replies lets go of it). Renewals, notice checks and
     * {@code DLOCK.CANCEL} go this way, so that one stalled call never holds up another.
     * The default runs {@link #call} on {@link #asyncExecutor()}.
     */
    default CompletableFuture<Object> callAsync(byte[] key, byte[][] args, long timeoutMs) {
        CompletableFuture<Object> f = new CompletableFuture<>();
        try {
            asyncExecutor().execute(() -> {
                try {
                    f.complete(call(key, args));
                } catch (RuntimeException e) {
                    f.completeExceptionally(e);
                }
            });
        } catch (java.util.concurrent.RejectedExecutionException e) {
            f.completeExceptionally(new io.dlock.DlockConnectionException("the transport is closed", e));
        }
        return f.orTimeout(Math.max(1, timeoutMs), TimeUnit.MILLISECONDS);
    }

    /**
     * Where the default {@link #callAsync} runs blocking calls. The default is the common
     * pool; a transport whose calls block should give threads of its own.
     */
    default Executor asyncExecutor() {
        return java.util.concurrent.ForkJoinPool.commonPool();
    }

    /**
     * Sends a command on a fresh connection — not one that may have failed with the last
     * call — for the one retry of a release whose first attempt failed on its connection.
     * The default is {@link #call}.
     */
    default Object callFresh(byte[] key, byte[][] args) {
        return call(key, args);
    }

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
     * The transport's own limit on waiting for one reply, in ms, read from its
     * configuration (Jedis' socket timeout, Lettuce's command timeout); every server-side
     * wait slice is sized to end well within it ({@link io.dlock.core.Leases#slice}).
     * {@link Long#MAX_VALUE}: no limit (the default).
     */
    default long replyTimeoutMs() {
        return Long.MAX_VALUE;
    }

    /**
     * The longest server-side wait one blocking call may ask for.
     *
     * @deprecated the client sizes slices from {@link #replyTimeoutMs()}; a value below that
     *     size is still honoured
     */
    @Deprecated
    default long maxBlockingMs() {
        return Long.MAX_VALUE;
    }

    /**
     * The subscriber for lock notices, telling {@code listener}; {@code timer} may run the
     * subscriber's periodic checks (it must not block). Null when this transport cannot
     * subscribe: then holds learn of a server-side end from their renewals and lease clock
     * alone. The default is null.
     */
    default Notices notices(Notices.Listener listener, ScheduledExecutorService timer) {
        return null;
    }

    /**
     * Publishes {@code message} on {@code channel}, the notice channel of lock {@code key},
     * so that the subscribers of {@link #notices} hear it: with {@code PUBLISH} (the
     * default), or {@code SPUBLISH} where they listen sharded (a cluster).
     */
    default void publish(byte[] key, byte[] channel, String message) {
        call(key, new byte[][] {io.dlock.core.Commands.bytes("PUBLISH"), channel, io.dlock.core.Commands.bytes(message)});
    }

    /** A short description of the server(s), for messages. */
    String describe();

    /** Lets go of connections this transport opened itself (not those it was given). */
    @Override
    void close();
}
