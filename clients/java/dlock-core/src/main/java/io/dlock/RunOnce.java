package io.dlock;

import io.dlock.core.Commands;
import io.dlock.core.Kind;
import io.dlock.core.Replies;
import java.time.Duration;
import java.util.Objects;
import java.util.concurrent.CompletionStage;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Runs a job unless another process runs it now — ShedLock's {@code @SchedulerLock}
 * semantics as a recipe: one try ({@code DLOCK.ACQUIRE name owner PX atMostFor WAIT 0});
 * when someone holds the name the job is skipped, not waited for. {@code atMostFor} is
 * the lease (a process that dies mid-job holds it no longer), unless {@code renew} keeps
 * renewing it while the job runs. After a job that finished sooner than
 * {@code atLeastFor}, the hold is kept (RENEW to the rest) rather than released.
 */
public final class RunOnce {
    private static final AtomicLong RUNS = new AtomicLong();

    private RunOnce() {}

    /** What a run did. */
    public enum Outcome {
        /** The job ran and the hold lasted to its end. */
        RAN,
        /** Someone else held the name: the job did not run. */
        SKIPPED,
        /** The job ran but the hold ended before it finished (see {@link Result#reason()}). */
        LOST
    }

    /** The outcome, the job's value, the run's fencing token and why it was lost. */
    public record Result<T>(Outcome outcome, T value, Long token, LostReason reason) {
        /** Whether the job ran. */
        public boolean ran() {
            return outcome != Outcome.SKIPPED;
        }
    }

    /** What the job can ask about its run. */
    public static final class Context {
        private final Dlock client;
        private final byte[] key;
        private final long token;
        private final CompletionStage<LostReason> lost;

        Context(Dlock client, byte[] key, long token, CompletionStage<LostReason> lost) {
            this.client = client;
            this.key = key;
            this.token = token;
            this.lost = lost;
        }

        /** The run's fencing token. */
        public long token() {
            return token;
        }

        /** Completes when the run's hold ends before the job does. */
        public CompletionStage<LostReason> lost() {
            return lost;
        }

        /** Whether the hold is still live on the server ({@code DLOCK.CHECK}). */
        public boolean check() {
            return Replies.integer(client.call(key, Commands.check(key, token)), "DLOCK.CHECK") == 1;
        }

        /**
         * {@code DLOCK.FENCED name token command…}: runs {@code command} only while this
         * run's hold lives ({@link FencedException} otherwise); returns its reply.
         */
        public Object fenced(String... command) {
            byte[][] args = new byte[command.length + 3][];
            args[0] = Commands.bytes("DLOCK.FENCED");
            args[1] = key;
            args[2] = Commands.bytes(Long.toString(token));
            for (int i = 0; i < command.length; i++) {
                args[i + 3] = Commands.bytes(command[i]);
            }
            return client.call(key, args);
        }
    }

    /** The job of a run. */
    @FunctionalInterface
    public interface Job<T> {
        /** Does the work. */
        T run(Context context) throws Exception;
    }

    /**
     * Runs {@code job} unless {@code name} is held.
     *
     * @param atMostFor the lease (positive)
     * @param atLeastFor how long the hold lasts at least from the start (0..atMostFor)
     * @param renew whether to renew the lease while the job runs (every third of it)
     * @throws Exception what the job threw, after the hold was handled as for a return
     */
    public static <T> Result<T> run(Dlock client, String name, Duration atMostFor, Duration atLeastFor, boolean renew,
            Job<T> job) throws Exception {
        Objects.requireNonNull(job, "job");
        if (atMostFor == null) {
            throw new DlockArgumentException("atMostFor", "atMostFor must be a positive duration, got null");
        }
        long most = io.dlock.core.Leases.lease("atMostFor", atMostFor);
        io.dlock.core.Leases.checkName("name", name);
        long least = atLeastFor == null ? -1 : atLeastFor.toMillis();
        if (least < 0 || least > most) {
            throw new DlockArgumentException("atLeastFor", "atLeastFor must be between 0 and atMostFor (" + atMostFor
                    + "), got " + atLeastFor);
        }
        String owner = client.getId() + ":run" + RUNS.incrementAndGet();
        byte[] key = Commands.bytes(name);
        long start = System.nanoTime();
        Hold h;
        try {
            h = client.acquire(name, key, Kind.MUTEX, owner, 0, most, renew, 0, 1, LockOptions.DEFAULT, false);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw e;
        }
        if (h == null) {
            return new Result<>(Outcome.SKIPPED, null, null, null);
        }
        Context ctx = new Context(client, key, h.token, h.lost.minimalCompletionStage());
        T value;
        try {
            value = job.run(ctx);
        } finally {
            finish(client, name, key, owner, h, least - (System.nanoTime() - start) / 1_000_000L);
        }
        LostReason why = h.reason;
        return why != null ? new Result<>(Outcome.LOST, value, h.token, why)
                : new Result<>(Outcome.RAN, value, h.token, null);
    }

    private static void finish(Dlock client, String name, byte[] key, String owner, Hold h, long leftMs) {
        client.holds.remove(Dlock.mapKey(Kind.MUTEX, name, owner), h);
        boolean wasLost = !h.end();
        client.subscriptions.remove(h);
        if (wasLost) {
            client.releaseQuietly(key, Kind.MUTEX, owner, 1);
            return;
        }
        try {
            if (leftMs > 0) {
                if (Replies.integer(client.call(key, Commands.renew(key, owner, leftMs)), "DLOCK.RENEW") != 1) {
                    client.signal(h, LostReason.NOT_HELD);
                }
            } else {
                client.call(key, Commands.release(Kind.MUTEX, key, owner, 1));
            }
            if (!h.signalled.get()) {
                client.observeEnd(h, null);
            }
        } catch (NotHeldException e) {
            client.signal(h, LostReason.NOT_HELD);
        }
    }
}
