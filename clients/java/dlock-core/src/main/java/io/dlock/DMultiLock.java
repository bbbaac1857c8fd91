package io.dlock;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionStage;
import java.util.concurrent.TimeUnit;

/**
 * Several locks held together by the current thread, all or none (Redisson's
 * {@code RedissonMultiLock}). They are taken one by one in a fixed order (client id, then
 * name, then kind), so two multi-locks over overlapping sets cannot deadlock each other,
 * and each is its own command, so keys in different cluster slots work (no CROSSSLOT).
 * A failed or timed-out attempt releases what it took.
 */
public final class DMultiLock extends GroupLock {
    DMultiLock(DLock... locks) {
        super(inOrder(locks));
    }

    private static List<DLock> inOrder(DLock... locks) {
        if (locks.length == 0) {
            throw new IllegalArgumentException("a multi-lock needs at least one lock");
        }
        List<DLock> l = new ArrayList<>(Arrays.asList(locks));
        l.sort(Comparator.comparing(DLock::clientId).thenComparing(DLock::getName)
                .thenComparing(x -> x.getKind().ordinal()));
        return List.copyOf(l);
    }

    /** The locks, in the order they are taken. */
    public List<DLock> getLocks() {
        return locks;
    }

    @Override
    boolean take(long waitMs, long leaseMs, boolean interruptible) throws InterruptedException {
        long start = System.nanoTime();
        List<DLock> taken = new ArrayList<>(locks.size());
        boolean ok = false;
        try {
            for (DLock l : locks) {
                long left = waitMs < 0 ? -1 : Math.max(0, waitMs - (System.nanoTime() - start) / 1_000_000L);
                boolean got;
                if (interruptible) {
                    got = l.tryLock(left, leaseMs, TimeUnit.MILLISECONDS);
                } else if (left < 0) {
                    l.lock(leaseMs, TimeUnit.MILLISECONDS);
                    got = true;
                } else {
                    got = l.tryLockUninterruptibly(left, leaseMs);
                }
                if (!got) {
                    return false;
                }
                taken.add(l);
            }
            ok = true;
            return true;
        } finally {
            if (!ok) {
                for (int i = taken.size() - 1; i >= 0; i--) {
                    try {
                        taken.get(i).unlock();
                    } catch (RuntimeException e) {
                        // lost meanwhile: nothing to give back
                    }
                }
            }
        }
    }

    /**
     * Releases every lock (all are tried); the first {@link IllegalMonitorStateException}
     * is thrown after that.
     */
    @Override
    public void unlock() {
        RuntimeException first = null;
        for (int i = locks.size() - 1; i >= 0; i--) {
            try {
                locks.get(i).unlock();
            } catch (RuntimeException e) {
                if (first == null) {
                    first = e;
                }
            }
        }
        if (first != null) {
            throw first;
        }
    }

    /**
     * Releases every lock (all are tried) and says what became of the multi-lock as one
     * hold: {@link UnlockResult.Status#UNKNOWN} when any release was unknown, else
     * {@link UnlockResult.Status#LOST} when any part had been lost, else released (or
     * still held, for a reentrant multi-lock). Never throws for these.
     *
     * @throws IllegalMonitorStateException when the current thread holds none of the locks
     */
    public UnlockResult unlockAndGetResult() {
        UnlockResult worst = null;
        IllegalMonitorStateException none = null;
        for (int i = locks.size() - 1; i >= 0; i--) {
            UnlockResult r;
            try {
                r = locks.get(i).unlockAndGetResult();
            } catch (IllegalMonitorStateException e) {
                none = e;
                continue;
            }
            if (worst == null || r.status().ordinal() > worst.status().ordinal()) {
                worst = r;
            }
        }
        if (worst == null) {
            throw none;
        }
        return worst;
    }

    /** Whether the current thread holds every lock (from their lease clocks). */
    public boolean isHeldByCurrentThread() {
        return locks.stream().allMatch(DLock::isHeldByCurrentThread);
    }

    /**
     * Completes with the reason of the first of the current thread's holds that is lost:
     * the multi-lock is one hold, lost when any part is.
     *
     * @throws IllegalMonitorStateException when the current thread does not hold every lock
     */
    public CompletionStage<LostReason> lostSignal() {
        CompletableFuture<?>[] parts = new CompletableFuture<?>[locks.size()];
        for (int i = 0; i < parts.length; i++) {
            parts[i] = locks.get(i).lostSignal().toCompletableFuture();
        }
        return CompletableFuture.anyOf(parts).thenApply(r -> (LostReason) r).minimalCompletionStage();
    }
}
