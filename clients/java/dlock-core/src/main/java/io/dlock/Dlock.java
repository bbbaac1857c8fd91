package io.dlock;

import io.dlock.core.Commands;
import io.dlock.core.Commands.AcquireOptions;
import io.dlock.core.Kind;
import io.dlock.core.Replies;
import io.dlock.spi.Transport;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The dlock client: Redisson's {@code RedissonClient} shapes ({@link #getLock},
 * {@link #getFairLock}, {@link #getReadWriteLock}, {@link #getSemaphore},
 * {@link #getCountDownLatch}) over a {@link Transport}. Build one with
 * {@code DlockJedis.create(unifiedJedis)} or {@code DlockLettuce.create(redisClient)}.
 *
 * <p>Thread-safe; one per application is enough. Owners are {@code clientId:threadId},
 * as in Redisson, so a lock is held by a thread and is reentrant on that thread.
 */
public final class Dlock implements AutoCloseable {
    private static final AtomicLong THREADS = new AtomicLong();

    private final Transport transport;
    private final DlockConfig config;
    private final boolean closeTransport;
    final ConcurrentHashMap<String, Hold> holds = new ConcurrentHashMap<>();
    private final CopyOnWriteArrayList<LostListener> listeners = new CopyOnWriteArrayList<>();
    final ScheduledThreadPoolExecutor scheduler;
    private volatile boolean cancelSupported = true;
    private final AtomicLong permitIds = new AtomicLong();
    private volatile DlockObserver observer = DlockObserver.NONE;

    private Dlock(Transport transport, DlockConfig config, boolean closeTransport) {
        this.transport = Objects.requireNonNull(transport, "transport");
        this.config = Objects.requireNonNull(config, "config");
        this.closeTransport = closeTransport;
        this.scheduler = new ScheduledThreadPoolExecutor(1, r -> {
            Thread t = new Thread(r, "dlock-watchdog-" + THREADS.incrementAndGet());
            t.setDaemon(true);
            return t;
        });
        this.scheduler.setRemoveOnCancelPolicy(true);
        // A standing task at the head of the queue: a hold's task (its renewal, 10 s away by
        // default) then never becomes the head, and only a new head wakes the scheduler's
        // thread. Without it every grant woke that thread and every release raced it for the
        // queue's lock: 1.1 more context switches per grant at 64 threads (make bench-java).
        this.scheduler.scheduleWithFixedDelay(() -> { }, 1, 1, TimeUnit.SECONDS);
    }

    /** A client over {@code transport} with default settings; {@link #close()} closes the transport too. */
    public static Dlock create(Transport transport) {
        return new Dlock(transport, new DlockConfig(), true);
    }

    /** A client over {@code transport}; {@link #close()} closes the transport too. */
    public static Dlock create(Transport transport, DlockConfig config) {
        return new Dlock(transport, config, true);
    }

    /** This client's id (the first part of every owner). */
    public String getId() {
        return config.getClientId();
    }

    /** The settings. */
    public DlockConfig getConfig() {
        return config;
    }

    /** The transport (for commands this API does not wrap). */
    public Transport getTransport() {
        return transport;
    }

    /** A reentrant mutex ({@code DLOCK.ACQUIRE}); Redisson's {@code getLock}. */
    public DLock getLock(String name) {
        return new DLock(this, name, Kind.MUTEX, config.getLockOptions());
    }

    /** A reentrant mutex with options (BIND, LOCKDELAY, durable grants). */
    public DLock getLock(String name, LockOptions options) {
        return new DLock(this, name, Kind.MUTEX, options);
    }

    /** A fair (FIFO) reentrant mutex ({@code DLOCK.FAIRACQUIRE}); Redisson's {@code getFairLock}. */
    public DLock getFairLock(String name) {
        return new DLock(this, name, Kind.FAIR, config.getLockOptions());
    }

    /** A fair mutex with options. */
    public DLock getFairLock(String name, LockOptions options) {
        return new DLock(this, name, Kind.FAIR, options);
    }

    /** A read-write lock ({@code DLOCK.RWACQUIRE}); Redisson's {@code getReadWriteLock}. */
    public DReadWriteLock getReadWriteLock(String name) {
        return new DReadWriteLock(this, name, config.getLockOptions());
    }

    /** A read-write lock with options. */
    public DReadWriteLock getReadWriteLock(String name, LockOptions options) {
        return new DReadWriteLock(this, name, options);
    }

    /**
     * A semaphore of {@code permits} permits, each grant leased and named by a permit id
     * (Redisson's {@code RPermitExpirableSemaphore}; the limit is fixed when the key is
     * created, where Redisson has {@code trySetPermits}).
     */
    public DSemaphore getSemaphore(String name, int permits) {
        return new DSemaphore(this, name, permits, config.getLockOptions());
    }

    /** A countdown latch ({@code DLOCK.LATCHSET/COUNTDOWN/AWAIT}); Redisson's {@code getCountDownLatch}. */
    public DCountDownLatch getCountDownLatch(String name) {
        return new DCountDownLatch(this, name);
    }

    /**
     * Locks taken together, all or none, in a fixed order (so two multi-locks over the
     * same locks cannot deadlock); Redisson's {@code getMultiLock}. The locks may come
     * from different clients.
     */
    public DMultiLock getMultiLock(DLock... locks) {
        return new DMultiLock(locks);
    }

    /**
     * A RedLock over locks of independent servers (one {@link Dlock} client each): held when
     * a majority granted within the lease, less the time taken and a drift margin.
     */
    public DRedLock getRedLock(DLock... locks) {
        return new DRedLock(locks);
    }

    /** A leader election on the fair lock {@code name} (one candidate per call). */
    public Election getElection(String name) {
        return new Election(this, name, config.getLockOptions());
    }

    /** A leader election with options (BIND, LOCKDELAY). */
    public Election getElection(String name, LockOptions options) {
        return new Election(this, name, options);
    }

    /** Adds a listener told of every lost hold of this client. */
    public void addLostListener(LostListener listener) {
        listeners.add(Objects.requireNonNull(listener, "listener"));
    }

    /** Removes a listener. */
    public void removeLostListener(LostListener listener) {
        listeners.remove(listener);
    }

    /**
     * Sets the observer told of every wait, release and loss of this client's holds (for
     * metrics: wait and hold times, lost holds); null for none.
     */
    public void setObserver(DlockObserver observer) {
        this.observer = observer == null ? DlockObserver.NONE : observer;
    }

    /** The observer ({@link DlockObserver#NONE} when none was set). */
    public DlockObserver getObserver() {
        return observer;
    }

    /** Stops the watchdog (holds are no longer renewed) and closes the transport. */
    @Override
    public void close() {
        scheduler.shutdownNow();
        for (Hold h : holds.values()) {
            h.finish();
        }
        holds.clear();
        if (closeTransport) {
            transport.close();
        }
    }

    /** Redisson's name for {@link #close()}. */
    public void shutdown() {
        close();
    }

    // ------------------------------------------------------------------------------
    // The engine shared by every lock kind.

    String threadOwner() {
        return config.getClientId() + ":" + Thread.currentThread().getId();
    }

    String newPermitId() {
        return config.getClientId() + ":p" + permitIds.incrementAndGet();
    }

    static String mapKey(Kind kind, String name, String owner) {
        return kind.name() + '\u0000' + name + '\u0000' + owner;
    }

    Object call(byte[] key, byte[][] args) {
        return transport.call(key, args);
    }

    /**
     * Asks for a hold until granted or {@code waitMs} passes ({@code < 0}: forever).
     *
     * @param leaseMs the lease; {@code <= 0} for the watchdog's
     * @param interruptible whether an interrupt gives up (else it is kept for later)
     * @return the hold, or null when not granted in time
     */
    Hold acquire(String name, byte[] key, Kind kind, String owner, long waitMs, long leaseMs, long limit,
            long permits, LockOptions options, boolean interruptible) throws InterruptedException {
        boolean watchdog = leaseMs <= 0;
        long start = System.nanoTime();
        DlockObserver.WaitOutcome outcome = DlockObserver.WaitOutcome.FAILED;
        try {
            Hold h = acquire(name, key, kind, owner, waitMs, watchdog ? config.getLockWatchdogTimeout() : leaseMs,
                    watchdog, limit, permits, options, interruptible);
            outcome = h != null ? DlockObserver.WaitOutcome.ACQUIRED : DlockObserver.WaitOutcome.TIMED_OUT;
            return h;
        } finally {
            observeWait(kind, name, start, outcome);
        }
    }

    private void observeWait(Kind kind, String name, long startNanos, DlockObserver.WaitOutcome outcome) {
        DlockObserver o = observer;
        if (o != DlockObserver.NONE) {
            try {
                o.waited(kind, name, System.nanoTime() - startNanos, outcome);
            } catch (RuntimeException e) {
                // an observer's failure must not fail the acquire
            }
        }
    }

    /** Tells the observer of a latch's wait. */
    void observeAwait(String name, long startNanos, DlockObserver.WaitOutcome outcome) {
        DlockObserver o = observer;
        if (o != DlockObserver.NONE) {
            try {
                o.awaited(name, System.nanoTime() - startNanos, outcome);
            } catch (RuntimeException e) {
                // an observer's failure must not fail the wait
            }
        }
    }

    /** Tells the observer that {@code h} ended: released, or lost for {@code reason}. */
    private void observeEnd(Hold h, LostReason reason) {
        DlockObserver o = observer;
        if (o != DlockObserver.NONE) {
            try {
                long held = System.nanoTime() - h.grantedNanos;
                if (reason == null) {
                    o.released(h.kind, h.name, held);
                } else {
                    o.lost(h.kind, h.name, held, reason);
                }
            } catch (RuntimeException e) {
                // an observer's failure must not stop the release or the loss signal
            }
        }
    }

    /** As above, with the lease and whether the watchdog renews it given apart. */
    Hold acquire(String name, byte[] key, Kind kind, String owner, long waitMs, long lease, boolean watchdog,
            long limit, long permits, LockOptions options, boolean interruptible) throws InterruptedException {
        AcquireOptions opts = new AcquireOptions(limit, permits, options.bind(), options.lockDelayMs());
        boolean durable = options.replicas() > 0;
        long sliceMax = Math.min(durable ? config.getDurableWaitSlice() : config.getWaitSlice(),
                transport.maxBlockingMs());
        long start = System.nanoTime();
        boolean interrupted = false;
        try {
            boolean first = true;
            while (true) {
                if (interruptible && Thread.interrupted()) {
                    if (!first) {
                        cancelQuietly(key, owner);
                    }
                    throw new InterruptedException("interrupted while waiting for " + name);
                }
                first = false;
                long remaining = waitMs < 0 ? sliceMax : waitMs - (System.nanoTime() - start) / 1_000_000L;
                long slice = Math.max(0, Math.min(sliceMax, remaining));
                byte[][] args = Commands.acquire(kind, key, owner, lease, slice, opts);
                long sent = System.nanoTime();
                Object reply;
                long acked = -1;
                if (slice == 0 && !durable) {
                    reply = transport.call(key, args);
                } else {
                    List<byte[][]> cmds = durable
                            ? List.of(args, Commands.waitReplicas(options.replicas(), options.replicasTimeoutMs()))
                            : java.util.Collections.singletonList(args);
                    List<Object> replies;
                    // A wait nothing interrupts may run on this thread when the transport can.
                    CompletableFuture<List<Object>> call = interruptible || durable ? null
                            : transport.callBlockingOnCaller(key, args, slice);
                    try {
                        replies = await(call != null ? call : transport.callBlocking(key, cmds),
                                slice + options.replicasTimeoutMs(), key, owner, kind, interruptible);
                    } catch (UninterruptedWait e) {
                        interrupted = true;
                        replies = e.replies;
                    }
                    reply = replies.get(0);
                    if (durable) {
                        acked = replies.size() > 1 && replies.get(1) instanceof Long l ? l : 0;
                    }
                }
                Long token = Replies.token(reply);
                if (token != null) {
                    if (durable && acked < options.replicas()) {
                        releaseQuietly(key, kind, owner, permits);
                        throw new NotDurableException(name, options.replicas(), acked);
                    }
                    return register(name, key, kind, owner, token, permits, lease, watchdog, sent);
                }
                if (waitMs >= 0 && (System.nanoTime() - start) / 1_000_000L >= waitMs) {
                    if (kind.keepsQueuePlace()) {
                        cancelQuietly(key, owner);
                    }
                    return null;
                }
            }
        } finally {
            if (interrupted) {
                Thread.currentThread().interrupt();
            }
        }
    }

    /** Thrown inside {@link #await} when an uninterruptible wait saw an interrupt. */
    private static final class UninterruptedWait extends Exception {
        private static final long serialVersionUID = 1L;
        final transient List<Object> replies;

        UninterruptedWait(List<Object> replies) {
            super(null, null, false, false);
            this.replies = replies;
        }
    }

    /**
     * The replies of a blocking call. An interrupt of an interruptible wait gives the
     * place up ({@code DLOCK.CANCEL}), takes back a grant that raced with it, and throws.
     */
    private List<Object> await(CompletableFuture<List<Object>> f, long expectedMs, byte[] key, String owner, Kind kind,
            boolean interruptible) throws InterruptedException, UninterruptedWait {
        long bound = expectedMs + 30_000L;
        boolean sawInterrupt = false;
        long deadline = System.nanoTime() + bound * 1_000_000L;
        while (true) {
            try {
                long left = deadline - System.nanoTime();
                List<Object> r = f.get(Math.max(1, left), TimeUnit.NANOSECONDS);
                if (sawInterrupt) {
                    throw new UninterruptedWait(r);
                }
                return r;
            } catch (InterruptedException e) {
                if (!interruptible) {
                    sawInterrupt = true;
                    continue;
                }
                giveUp(f, key, owner, kind);
                throw e;
            } catch (ExecutionException e) {
                throw unwrap(e.getCause());
            } catch (CancellationException e) {
                throw new DlockConnectionException("the wait for " + Replies.show(key) + " was cancelled", e);
            } catch (TimeoutException e) {
                giveUp(f, key, owner, kind);
                throw new DlockConnectionException("no reply from " + transport.describe() + " within " + bound
                        + " ms to a wait of " + expectedMs + " ms", e);
            }
        }
    }

    private void giveUp(CompletableFuture<List<Object>> f, byte[] key, String owner, Kind kind) {
        cancelQuietly(key, owner);
        if (f instanceof io.dlock.spi.BlockingCall b && b.abandonIfUnsent()) {
            return; // never sent: nothing can have been granted
        }
        List<Object> r = null;
        boolean again = false;
        try {
            // DLOCK.CANCEL answers the blocked wait at once; an older module lets it run out.
            long deadline = System.nanoTime() + (config.getWaitSlice() + 30_000L) * 1_000_000L;
            while (r == null) {
                try {
                    r = f.get(Math.max(1, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
                } catch (InterruptedException ie) {
                    again = true;
                }
            }
        } catch (ExecutionException | TimeoutException | CancellationException ignored) {
            return;
        } finally {
            if (again) {
                Thread.currentThread().interrupt();
            }
        }
        try {
            Long token = Replies.token(r.get(0));
            if (token != null) {
                // The grant raced with the interrupt: take this one grant back.
                releaseQuietly(key, kind, owner, 1);
            }
        } catch (DlockException ignored) {
            // nothing was granted
        }
    }

    static RuntimeException unwrap(Throwable t) {
        if (t instanceof DlockException d) {
            return d;
        }
        return new DlockConnectionException(String.valueOf(t.getMessage()), t);
    }

    void cancelQuietly(byte[] key, String owner) {
        if (!cancelSupported) {
            return;
        }
        try {
            transport.call(key, Commands.cancel(key, owner));
        } catch (UnknownCommandException e) {
            cancelSupported = false; // an older module: its places time out on the server
        } catch (DlockException e) {
            // best effort: the place times out on the server
        }
    }

    void releaseQuietly(byte[] key, Kind kind, String owner, long permits) {
        try {
            transport.call(key, Commands.release(kind, key, owner, permits));
        } catch (DlockException e) {
            // best effort
        }
    }

    private Hold register(String name, byte[] key, Kind kind, String owner, long token, long permits, long lease,
            boolean watchdog, long sentNanos) {
        String mk = mapKey(kind, name, owner);
        Hold[] created = new Hold[1];
        Hold h = holds.compute(mk, (k, old) -> {
            if (old != null && !old.ended && old.token == token) {
                old.count.incrementAndGet();
                return old;
            }
            if (old != null) {
                old.finish();
            }
            created[0] = new Hold(mk, name, key, kind, owner, token, permits, lease, watchdog, sentNanos);
            return created[0];
        });
        if (created[0] != null) {
            // A grant that took long to arrive (a long server-side wait) is re-anchored with a
            // RENEW, so the lost clock (started when the request was sent) keeps its lease.
            if ((System.nanoTime() - sentNanos) / 1_000_000L > lease / 4) {
                long s = System.nanoTime();
                try {
                    if (Replies.integer(transport.call(key, Commands.renew(key, owner, lease)), "DLOCK.RENEW") == 1) {
                        h.confirmedNanos = s;
                    }
                } catch (DlockException e) {
                    // the watchdog tries again
                }
            }
            schedule(h, watchdog ? h.confirmedNanos + config.getRenewInterval() * 1_000_000L : h.lostAtNanos());
        }
        return h;
    }

    private void schedule(Hold h, long atNanos) {
        h.guard.lock();
        try {
            if (h.ended || scheduler.isShutdown()) {
                return;
            }
            h.nextRenewNanos = atNanos;
            long wake = Math.min(atNanos, h.lostAtNanos());
            h.task = scheduler.schedule(() -> tick(h), Math.max(0, wake - System.nanoTime()), TimeUnit.NANOSECONDS);
        } catch (java.util.concurrent.RejectedExecutionException e) {
            // closing
        } finally {
            h.guard.unlock();
        }
    }

    private void tick(Hold h) {
        if (h.ended) {
            return;
        }
        long now = System.nanoTime();
        if (!h.watchdog) {
            if (now >= h.lostAtNanos()) {
                lose(h, LostReason.LEASE_ENDED);
            } else {
                schedule(h, h.lostAtNanos());
            }
            return;
        }
        if (now < h.nextRenewNanos && now >= h.lostAtNanos()) {
            lose(h, LostReason.UNREACHABLE);
            return;
        }
        long interval = config.getRenewInterval() * 1_000_000L;
        try {
            long answer = Replies.integer(transport.call(h.key, Commands.renew(h.key, h.owner, h.leaseMs)),
                    "DLOCK.RENEW");
            if (answer == 1) {
                h.confirmedNanos = now;
                schedule(h, now + interval);
            } else {
                lose(h, LostReason.NOT_HELD);
            }
        } catch (DlockException e) {
            long after = System.nanoTime();
            if (after >= h.lostAtNanos()) {
                lose(h, LostReason.UNREACHABLE);
            } else {
                long retry = Math.min(Math.max(h.leaseMs * 100_000L, 20_000_000L), interval);
                schedule(h, after + retry);
            }
        }
    }

    void lose(Hold h, LostReason reason) {
        h.finish();
        if (h.signalled.compareAndSet(false, true)) {
            observeEnd(h, reason);
            for (LostListener l : listeners) {
                try {
                    l.onLost(h.name, h.owner, h.token, reason);
                } catch (RuntimeException e) {
                    // a listener's failure must not stop the others
                }
            }
            h.lost.complete(reason);
        }
    }

    /**
     * Takes one hold of {@code owner} back.
     *
     * @return true when the hold is gone, false when an outer (reentrant) hold remains
     */
    boolean release(String name, byte[] key, Kind kind, String owner) {
        String mk = mapKey(kind, name, owner);
        Hold h = holds.get(mk);
        if (h == null) {
            throw new IllegalMonitorStateException("attempt to unlock lock \"" + name + "\", not locked by current"
                    + " thread (owner " + owner + ")");
        }
        boolean gone;
        try {
            gone = Replies.released(transport.call(key, Commands.release(kind, key, owner, h.permits)));
        } catch (NotHeldException e) {
            holds.remove(mk, h);
            lose(h, LostReason.NOT_HELD);
            IllegalMonitorStateException ex = new IllegalMonitorStateException("attempt to unlock lock \"" + name
                    + "\" held by " + owner + " (token " + h.token + "), but the server no longer has that hold:"
                    + " its lease ended or it was force-released (" + e.getMessage() + ")");
            ex.initCause(e);
            throw ex;
        }
        if (gone || h.count.decrementAndGet() <= 0) {
            holds.remove(mk, h);
            h.finish();
            observeEnd(h, null);
            return true;
        }
        return false;
    }

    Hold hold(Kind kind, String name, String owner) {
        Hold h = holds.get(mapKey(kind, name, owner));
        return h == null || h.ended ? null : h;
    }

    Map<String, Object> info(byte[] key) {
        return Replies.info(transport.call(key, Commands.info(key)));
    }

    CompletableFuture<List<Object>> blocking(byte[] key, byte[][] args) {
        return transport.callBlocking(key, java.util.Collections.singletonList(args));
    }

    /**
     * Renews {@code owner}'s hold to {@code leaseMs} from now ({@code DLOCK.RENEW}) and moves
     * its lost clock on; a watchdog keeps renewing with the new lease.
     *
     * @return false when the server no longer has the hold (its lost signal completes)
     * @throws IllegalMonitorStateException when this client has no such hold
     */
    boolean renew(String name, byte[] key, Kind kind, String owner, long leaseMs) {
        if (leaseMs <= 0) {
            throw new IllegalArgumentException("lease of a renewal must be > 0 ms, got " + leaseMs);
        }
        Hold h = hold(kind, name, owner);
        if (h == null) {
            throw new IllegalMonitorStateException("cannot renew lock \"" + name + "\": not held by " + owner);
        }
        long sent = System.nanoTime();
        long answer;
        try {
            answer = Replies.integer(transport.call(key, Commands.renew(key, owner, leaseMs)), "DLOCK.RENEW");
        } catch (NotHeldException e) {
            answer = 0;
        }
        if (answer != 1) {
            holds.remove(h.mapKey, h);
            lose(h, LostReason.NOT_HELD);
            return false;
        }
        // A lease-only hold's pending tick sees the later lost time and schedules itself again.
        h.leaseMs = leaseMs;
        h.confirmedNanos = sent;
        return true;
    }
}
