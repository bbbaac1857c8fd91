package io.dlock;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionStage;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * A RedLock: one lock name on N independent servers (one {@link Dlock} client and one
 * {@link DLock} each). An attempt asks every server once (no waiting there); it holds
 * when a majority ({@code N/2+1}) granted and the lease less the time taken and a drift
 * margin (1 % + 2 ms) is still positive; otherwise it lets go of what it got and retries
 * after a random pause until the wait runs out. Without a lease, each server's hold is
 * renewed by its client's watchdog; {@link #lostSignal()} completes with
 * {@link LostReason#NO_QUORUM} once fewer than a majority of holds remain.
 */
public final class DRedLock extends GroupLock {
    private final int quorum;
    private final ThreadLocal<List<DLock>> held = new ThreadLocal<>();
    private final ThreadLocal<CompletableFuture<LostReason>> lost = new ThreadLocal<>();

    DRedLock(DLock... locks) {
        super(List.of(nonEmpty(locks)));
        this.quorum = locks.length / 2 + 1;
    }

    private static DLock[] nonEmpty(DLock... locks) {
        if (locks.length == 0) {
            throw new IllegalArgumentException("a RedLock needs at least one lock");
        }
        return locks;
    }

    /** How many servers must grant. */
    public int quorum() {
        return quorum;
    }

    @Override
    boolean take(long waitMs, long leaseMs, boolean interruptible) throws InterruptedException {
        long start = System.nanoTime();
        long lease = leaseMs > 0 ? leaseMs : locks.get(0).client().getConfig().getLockWatchdogTimeout();
        long drift = lease / 100 + 2;
        while (true) {
            if (interruptible && Thread.interrupted()) {
                throw new InterruptedException("interrupted while taking a RedLock");
            }
            long sent = System.nanoTime();
            List<DLock> got = new ArrayList<>();
            for (DLock l : locks) {
                try {
                    if (l.tryLockUninterruptibly(0, leaseMs)) {
                        got.add(l);
                    }
                } catch (DlockException e) {
                    // that server is unreachable or refused: counts as not granted
                }
            }
            long elapsed = (System.nanoTime() - sent) / 1_000_000L;
            if (got.size() >= quorum && lease - elapsed - drift > 0) {
                held.set(got);
                watch(got);
                return true;
            }
            for (DLock l : got) {
                try {
                    l.unlock();
                } catch (RuntimeException e) {
                    // nothing to give back
                }
            }
            long left = waitMs < 0 ? Long.MAX_VALUE : waitMs - (System.nanoTime() - start) / 1_000_000L;
            if (left <= 0) {
                return false;
            }
            long pause = Math.min(left, ThreadLocalRandom.current().nextLong(5, 50));
            if (interruptible) {
                Thread.sleep(pause);
            } else {
                long until = System.nanoTime() + pause * 1_000_000L;
                while (System.nanoTime() < until) {
                    java.util.concurrent.locks.LockSupport.parkNanos(until - System.nanoTime());
                }
            }
        }
    }

    private void watch(List<DLock> got) {
        CompletableFuture<LostReason> f = new CompletableFuture<>();
        lost.set(f);
        AtomicInteger remaining = new AtomicInteger(got.size());
        for (DLock l : got) {
            l.lostSignal().thenAccept(r -> {
                if (remaining.decrementAndGet() < quorum) {
                    f.complete(LostReason.NO_QUORUM);
                }
            });
        }
    }

    /** Completes when the current thread's RedLock has fewer than a majority of holds left. */
    public CompletionStage<LostReason> lostSignal() {
        CompletableFuture<LostReason> f = lost.get();
        if (f == null || held.get() == null) {
            throw new IllegalMonitorStateException("this RedLock is not held by the current thread");
        }
        return f.minimalCompletionStage();
    }

    /** Releases the holds of the current thread on every server. */
    @Override
    public void unlock() {
        List<DLock> got = held.get();
        if (got == null) {
            throw new IllegalMonitorStateException("this RedLock is not held by the current thread");
        }
        held.remove();
        lost.remove();
        int released = 0;
        for (DLock l : got) {
            try {
                l.unlock();
                released++;
            } catch (RuntimeException e) {
                // that hold was lost or the server is unreachable
            }
        }
        if (released < quorum) {
            throw new IllegalMonitorStateException("the RedLock had lost its majority: " + released + " of "
                    + got.size() + " holds released, " + quorum + " needed");
        }
    }
}
