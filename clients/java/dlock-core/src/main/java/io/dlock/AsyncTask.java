package io.dlock;

import java.util.concurrent.CompletableFuture;
import java.util.function.Consumer;
import java.util.function.Function;

/**
 * The future of an async method ({@code lockAsync}, {@code tryAcquireAsync}, …): the
 * blocking call runs on a daemon thread of the client, and cancelling the future
 * interrupts it — a wait then gives its place up ({@code DLOCK.CANCEL}) as an interrupted
 * {@code lockInterruptibly} does. What the call got when the future was cancelled before
 * it could complete with it (a grant that raced with the cancellation) is taken back by
 * {@code undo}.
 *
 * @param <R> what the blocking call returns (a hold, a permit id)
 * @param <T> the future's value
 */
final class AsyncTask<R, T> extends CompletableFuture<T> implements Runnable {
    /** The blocking call. */
    @FunctionalInterface
    interface Call<R> {
        R run() throws Exception;
    }

    private final Call<R> call;
    private final Function<R, T> value;
    private final Consumer<R> undo;
    /** Guarded by this: the thread running the call (null before and after). */
    private Thread runner;

    AsyncTask(Call<R> call, Function<R, T> value, Consumer<R> undo) {
        this.call = call;
        this.value = value;
        this.undo = undo;
    }

    @Override
    public void run() {
        synchronized (this) {
            if (isDone()) {
                return;
            }
            runner = Thread.currentThread();
        }
        try {
            R got = call.run();
            if (!complete(value.apply(got)) && got != null && undo != null) {
                undo.accept(got);
            }
        } catch (Throwable e) {
            completeExceptionally(e);
        } finally {
            synchronized (this) {
                runner = null;
            }
            Thread.interrupted(); // a cancellation's interrupt is not the next task's
        }
    }

    /** Cancels the call: a running wait is interrupted and gives up. */
    @Override
    public boolean cancel(boolean mayInterruptIfRunning) {
        boolean cancelled = super.cancel(mayInterruptIfRunning);
        if (cancelled) {
            synchronized (this) {
                if (runner != null) {
                    runner.interrupt();
                }
            }
        }
        return cancelled;
    }
}
