package io.dlock;

import io.dlock.core.Commands;
import io.dlock.core.Commands.AcquireOptions;
import io.dlock.core.Kind;
import io.dlock.core.Leases;
import io.dlock.core.Replies;
import io.dlock.spi.Transport;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.SynchronousQueue;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The dlock client: Redisson's {@code RedissonClient} shapes ({@link #getLock},
 * {@link #getFairLock}, {@link #getReadWriteLock}, {@link #getSemaphore},
 * {@link #getCountDownLatch}) over a {@link Transport}. Build one with
 * {@code DlockJedis.create(unifiedJedis)} or {@code DlockLettuce.create(redisClient)}.
 *
 * <p>Thread-safe; one per application is enough. Owners are {@code clientId:threadId},
 * as in Redisson, so a lock is held by a thread and is reentrant on that thread.
 *
 * <p>It keeps the client contract of {@code docs/clients.md}: each hold has a lease clock
 * whose loss signal a timer fires (no call in flight can hold it up), the locks' channels
 * tell it at once of a hold the server ended, an unlock ends the hold whatever happens,
 * waits are sliced to fit the transport's timeout and keep their deadline, and every
 * thread it starts is a daemon that ends with {@link #close()}.
 */
public final class Dlock implements AutoCloseable {
    private static final AtomicLong THREADS = new AtomicLong();
    /** How late after its deadline a wait may still take a reply (the contract allows 250 ms in all). */
    static final long GRACE_NANOS = 150_000_000L;
    /** The bound of one try without a wait, on transports whose own timeout is longer. */
    private static final long ONE_TRY_MS = 2_000;
    /** The least a renewal's call may wait for its reply on the transport (its clock is kept apart). */
    private static final long RENEW_FLOOR_MS = 1_000;
    /** The longest an acquire waits for the subscription to its lock's channel. */
    private static final long SUBSCRIBE_WAIT_MS = 1_000;
    /** The pause between tries of a wait whose connection failed. */
    private static final long RETRY_PAUSE_MS = 100;

    private final Transport transport;
    private final DlockConfig config;
    private final boolean closeTransport;
    final ConcurrentHashMap<String, Hold> holds = new ConcurrentHashMap<>();
    private final CopyOnWriteArrayList<LostListener> listeners = new CopyOnWriteArrayList<>();
    /** Timers only (lease clocks, renewals' sending, the notice sweep): never waits on a reply. */
    final ScheduledThreadPoolExecutor scheduler;
    /** Runs user code of loss signals (listeners, lost futures' stages), so it never delays a timer. */
    private final ExecutorService signals;
    /** Runs the blocking calls of the async methods ({@code lockAsync}, …): daemon threads, one per call out. */
    private final ExecutorService asyncCalls;
    final Subscriptions subscriptions;
    private final CopyOnWriteArrayList<AutoCloseable> closeables = new CopyOnWriteArrayList<>();
    private final AtomicBoolean closed = new AtomicBoolean();
    private volatile boolean cancelSupported = true;
    private final AtomicLong permitIds = new AtomicLong();
    private volatile DlockObserver observer = DlockObserver.NONE;

    private Dlock(Transport transport, DlockConfig config, boolean closeTransport) {
        this.transport = Objects.requireNonNull(transport, "transport");
        this.config = Objects.requireNonNull(config, "config");
        config.check();
        this.closeTransport = closeTransport;
        long n = THREADS.incrementAndGet();
        this.scheduler = new ScheduledThreadPoolExecutor(1, r -> daemon(r, "dlock-watchdog-" + n));
        this.scheduler.setRemoveOnCancelPolicy(true);
        // One thread stands ready (a loss signal is then one hand-over away, not a new
        // thread's start: that took tens of ms on a loaded machine); more are made while
        // one runs a slow listener.
        ThreadPoolExecutor sig = new ThreadPoolExecutor(1, Integer.MAX_VALUE, 30, TimeUnit.SECONDS,
                new SynchronousQueue<>(), r -> daemon(r, "dlock-signal-" + n));
        sig.prestartCoreThread();
        this.signals = sig;
        this.asyncCalls = new ThreadPoolExecutor(0, Integer.MAX_VALUE, 30, TimeUnit.SECONDS, new SynchronousQueue<>(),
                r -> daemon(r, "dlock-async-" + n));
        this.subscriptions = new Subscriptions(this, transport, scheduler);
        // A standing task at the head of the queue: a hold's task (its renewal, 10 s away by
        // default) then never becomes the head, and only a new head wakes the scheduler's
        // thread. Without it every grant woke that thread and every release raced it for the
        // queue's lock: 1.1 more context switches per grant at 64 threads (make bench-java).
        // It also lets go of channels no hold has used for a second.
        this.scheduler.scheduleWithFixedDelay(subscriptions::sweep, 1, 1, TimeUnit.SECONDS);
        this.subscriptions.warmUp();
    }

    private static Thread daemon(Runnable r, String name) {
        Thread t = new Thread(r, name);
        t.setDaemon(true);
        return t;
    }

    /** A client over {@code transport} with default settings; {@link #close()} closes the transport too. */
    public static Dlock create(Transport transport) {
        return new Dlock(transport, new DlockConfig(), true);
    }

    /**
     * A client over {@code transport}; {@link #close()} closes the transport too.
     *
     * @throws DlockArgumentException when the settings do not fit together (a renew interval
     *     not below the watchdog's lease)
     */
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

    /**
     * A counting semaphore of {@code permits} permits in the shape of Redisson's
     * {@code RSemaphore}: {@code acquire(n)}, {@code tryAcquire(…)}, {@code release(n)},
     * {@code availablePermits()} (each grant leased by the watchdog; see
     * {@link DCountingSemaphore}).
     */
    public DCountingSemaphore getCountingSemaphore(String name, int permits) {
        return new DCountingSemaphore(this, name, permits, config.getLockOptions());
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

    /**
     * Stops the watchdog (holds are no longer renewed), the notice subscriber and every
     * thread of this client, and closes the transport. Holds still held report
     * {@link LostReason#UNREACHABLE} (their leases end on the server). Idempotent.
     */
    @Override
    public void close() {
        if (!closed.compareAndSet(false, true)) {
            return;
        }
        scheduler.shutdownNow();
        subscriptions.close();
        for (AutoCloseable c : closeables) {
            try {
                c.close();
            } catch (Exception e) {
                // closing anyway
            }
        }
        closeables.clear();
        for (Hold h : holds.values()) {
            if (h.end()) {
                signalNow(h, LostReason.UNREACHABLE);
            }
        }
        holds.clear();
        asyncCalls.shutdownNow();
        signals.shutdown();
        if (closeTransport) {
            transport.close();
        }
    }

    /** Redisson's name for {@link #close()}. */
    public void shutdown() {
        close();
    }

    /** Whether {@link #close()} was called. */
    public boolean isClosed() {
        return closed.get();
    }

    // ------------------------------------------------------------------------------
    // The engine shared by every lock kind.

    void ensureOpen() {
        if (closed.get()) {
            throw new IllegalStateException("this dlock client is closed");
        }
    }

    /** Closes {@code c} with this client (an election observer). */
    void closeWith(AutoCloseable c) {
        closeables.add(c);
        if (closed.get()) {
            closeables.remove(c);
            try {
                c.close();
            } catch (Exception e) {
                // closed anyway
            }
        }
    }

    void forget(AutoCloseable c) {
        closeables.remove(c);
    }

    /** Runs {@code r} on a daemon thread of this client (false when closed). */
    boolean runInBackground(Runnable r) {
        try {
            asyncCalls.execute(r);
            return true;
        } catch (RejectedExecutionException e) {
            return false;
        }
    }

    String threadOwner() {
        return config.getClientId() + ":" + Thread.currentThread().getId();
    }

    String threadOwner(long threadId) {
        return config.getClientId() + ":" + threadId;
    }

    /**
     * Runs {@code call} on a daemon thread of this client; the future completes with
     * {@code value} of its result, and cancelling it interrupts the call ({@code undo} takes
     * back a result that came after the cancellation).
     */
    <R, T> CompletableFuture<T> async(AsyncTask.Call<R> call, java.util.function.Function<R, T> value,
            java.util.function.Consumer<R> undo) {
        AsyncTask<R, T> task = new AsyncTask<>(call, value, undo);
        try {
            ensureOpen();
            asyncCalls.execute(task);
        } catch (RuntimeException e) {
            task.completeExceptionally(e);
        }
        return task;
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

    /** The longest server-side wait slice on this transport ({@code docs/clients.md}, rule 4). */
    @SuppressWarnings("deprecation")
    long sliceMs() {
        return Math.min(Leases.slice(config.getWaitSlice(), transport.replyTimeoutMs()), transport.maxBlockingMs());
    }

    /** The slice of a durable acquire, whose reply also waits {@code replicasTimeoutMs} for replicas. */
    @SuppressWarnings("deprecation")
    private long durableSliceMs(long replicasTimeoutMs) {
        long t = transport.replyTimeoutMs();
        long room = t == Long.MAX_VALUE ? t : Math.max(1, t - replicasTimeoutMs);
        return Math.min(Leases.slice(config.getDurableWaitSlice(), room), transport.maxBlockingMs());
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
    void observeEnd(Hold h, LostReason reason) {
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

    /**
     * As above, with the lease and whether the watchdog renews it given apart.
     *
     * <p>Each try is bounded: by the slice and the transport's own timeout when the wait has
     * no end, else by the deadline (and {@link #GRACE_NANOS}). A connection failure of a
     * wait with a deadline is tried again until the deadline, which then ends it with
     * {@link DlockTimeoutException} carrying the last failure; a wait without a deadline,
     * or a try without a wait, throws the failure at once. Giving up sends
     * {@code DLOCK.CANCEL} in the background.
     */
    Hold acquire(String name, byte[] key, Kind kind, String owner, long waitMs, long lease, boolean watchdog,
            long limit, long permits, LockOptions options, boolean interruptible) throws InterruptedException {
        ensureOpen();
        long start = System.nanoTime();
        awaitSubscription(subscriptions.prepare(key), waitMs, interruptible);
        AcquireOptions opts = new AcquireOptions(limit, permits, options.bind(), options.lockDelayMs());
        boolean durable = options.replicas() > 0;
        long sliceMax = durable ? durableSliceMs(options.replicasTimeoutMs()) : sliceMs();
        long deadline = waitMs < 0 ? 0 : start + waitMs * 1_000_000L;
        boolean interrupted = false;
        DlockException lastError = null;
        try {
            boolean first = true;
            while (true) {
                if (interruptible && Thread.interrupted()) {
                    if (!first) {
                        cancelInBackground(key, owner);
                    }
                    throw new InterruptedException("interrupted while waiting for " + name);
                }
                long now = System.nanoTime();
                long remaining = waitMs < 0 ? Long.MAX_VALUE : Math.max(0, (deadline - now) / 1_000_000L);
                if (!first && remaining == 0 && lastError != null) {
                    cancelInBackground(key, owner);
                    throw new DlockTimeoutException("no grant of " + name + " within " + waitMs + " ms: the server"
                            + " could not be reached (" + lastError.getMessage() + ")", lastError);
                }
                first = false;
                long slice = Math.min(sliceMax, remaining);
                byte[][] args = Commands.acquire(kind, key, owner, lease, slice, opts);
                long sent = System.nanoTime();
                Object reply;
                long acked = -1;
                try {
                    if (slice == 0 && !durable) {
                        long bound = waitMs == 0 ? Math.min(ONE_TRY_MS, transport.replyTimeoutMs())
                                : Math.max(1, (deadline + (lastError == null ? GRACE_NANOS : 0) - sent) / 1_000_000L);
                        reply = transport.call(key, args, bound);
                    } else {
                        List<byte[][]> cmds = durable
                                ? List.of(args, Commands.waitReplicas(options.replicas(), options.replicasTimeoutMs()))
                                : Collections.singletonList(args);
                        // A wait nothing interrupts may run on this thread when the transport can.
                        CompletableFuture<List<Object>> call = interruptible || durable || waitMs >= 0 ? null
                                : transport.callBlockingOnCaller(key, args, slice);
                        // A durable grant's reply also waits for the replicas, as long as asked
                        // (WAIT n ms), and a second more for its pipeline's way back.
                        // The grace is for a slice's nil that the server sends at the deadline;
                        // after a connection failure there is none to wait for.
                        long bound = waitMs < 0
                                ? sent + (slice + options.replicasTimeoutMs() + replyBoundMs()) * 1_000_000L
                                : deadline + (durable ? (options.replicasTimeoutMs() + 1_000L) * 1_000_000L : 0)
                                        + (lastError == null ? GRACE_NANOS : 0);
                        List<Object> replies;
                        try {
                            replies = await(call != null ? call : transport.callBlocking(key, cmds), bound, name, key,
                                    kind, owner, permits, interruptible);
                        } catch (UninterruptedWait e) {
                            interrupted = true;
                            replies = e.replies;
                        }
                        reply = replies.get(0);
                        if (durable) {
                            acked = replies.size() > 1 && replies.get(1) instanceof Long l ? l : 0;
                        }
                    }
                } catch (NoReply e) {
                    // The deadline passed with no reply (the wait was given up, DLOCK.CANCEL sent):
                    // not granted, unless the connection had failed before.
                    if (waitMs < 0) {
                        throw e;
                    }
                    if (lastError != null) {
                        throw new DlockTimeoutException("no grant of " + name + " within " + waitMs + " ms: the"
                                + " server could not be reached (" + lastError.getMessage() + ")", lastError);
                    }
                    return null;
                } catch (DlockConnectionException e) {
                    // A try whose reply was lost may have been granted: a later try is then a
                    // reentrant grant, which the last unlock takes back with it; without one,
                    // that grant ends at its lease.
                    if (waitMs <= 0) {
                        throw e;
                    }
                    lastError = e;
                    long left = (deadline - System.nanoTime()) / 1_000_000L;
                    if (left > 0) {
                        pause(Math.min(RETRY_PAUSE_MS, left), interruptible);
                    }
                    continue;
                }
                Long token = Replies.token(reply);
                if (token != null) {
                    if (durable && acked < options.replicas()) {
                        releaseQuietly(key, kind, owner, permits);
                        throw new NotDurableException(name, options.replicas(), acked);
                    }
                    return register(name, key, kind, owner, token, permits, lease, watchdog, sent);
                }
                lastError = null;
                if (waitMs >= 0 && System.nanoTime() - deadline >= 0) {
                    if (kind.keepsQueuePlace()) {
                        cancelInBackground(key, owner);
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

    /**
     * Waits for the subscription to the lock's channel before its first acquire there (one
     * round trip, once per channel while it is in use): a hold granted after it cannot end
     * unheard. Bounded by {@link #SUBSCRIBE_WAIT_MS} and the wait's own time (at least 100
     * ms); past that the acquire goes on, and its hold is checked once the subscription is
     * confirmed.
     */
    private static void awaitSubscription(CompletableFuture<Void> ready, long waitMs, boolean interruptible)
            throws InterruptedException {
        if (ready.isDone()) {
            return;
        }
        long bound = waitMs < 0 ? SUBSCRIBE_WAIT_MS : Math.min(SUBSCRIBE_WAIT_MS, Math.max(100, waitMs));
        try {
            ready.get(bound, TimeUnit.MILLISECONDS);
        } catch (InterruptedException e) {
            if (interruptible) {
                throw e;
            }
            Thread.currentThread().interrupt(); // kept for later, as the wait keeps it
        } catch (ExecutionException | TimeoutException e) {
            // go on: the hold is checked when the subscription is confirmed
        }
    }

    /** How long past its slice a wait without a deadline waits for a reply: the transport's timeout, and a second. */
    long replyBoundMs() {
        long t = transport.replyTimeoutMs();
        return t == Long.MAX_VALUE ? 60_000L : t + 1_000L;
    }

    private static void pause(long ms, boolean interruptible) throws InterruptedException {
        if (interruptible) {
            Thread.sleep(ms);
            return;
        }
        long until = System.nanoTime() + ms * 1_000_000L;
        long left;
        while ((left = until - System.nanoTime()) > 0) {
            java.util.concurrent.locks.LockSupport.parkNanos(left);
        }
    }

    /** No reply by a wait's bound: the call was given up (a wait with a deadline: not granted). */
    private static final class NoReply extends DlockConnectionException {
        private static final long serialVersionUID = 1L;

        NoReply(String message, Throwable cause) {
            super(message, cause);
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
     * The replies of a blocking call, waited for until {@code boundNanos} at most. An
     * interrupt of an interruptible wait gives the place up ({@code DLOCK.CANCEL}, in the
     * background, which also takes back a grant that raced with it) and throws; a call with
     * no reply by the bound is given up the same way and throws {@link NoReply}.
     */
    private List<Object> await(CompletableFuture<List<Object>> f, long boundNanos, String name, byte[] key, Kind kind,
            String owner, long permits, boolean interruptible) throws InterruptedException, UninterruptedWait {
        boolean sawInterrupt = false;
        while (true) {
            try {
                long left = boundNanos - System.nanoTime();
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
                giveUp(f, key, kind, owner, permits);
                throw e;
            } catch (ExecutionException e) {
                throw unwrap(e.getCause());
            } catch (CancellationException e) {
                throw new DlockConnectionException("the wait for " + name + " was cancelled", e);
            } catch (TimeoutException e) {
                giveUp(f, key, kind, owner, permits);
                throw new NoReply("no reply from " + transport.describe() + " to the wait for " + name
                        + " in time (the server may be unreachable)", e);
            }
        }
    }

    /**
     * Gives a wait up without waiting for anything: a call not sent yet is taken back;
     * otherwise {@code DLOCK.CANCEL} goes out in the background, and a grant that raced with
     * it (the call's late reply) is released in the background. (That release cannot take
     * from a later hold of the same owner: a later grant is reentrant on the raced one, so
     * the server counts both.)
     */
    private void giveUp(CompletableFuture<List<Object>> f, byte[] key, Kind kind, String owner, long permits) {
        if (f instanceof io.dlock.spi.BlockingCall b && b.abandonIfUnsent()) {
            return; // never sent: nothing can have been granted
        }
        cancelInBackground(key, owner);
        f.whenComplete((r, e) -> {
            if (e == null && r != null && !r.isEmpty() && r.get(0) instanceof Long t && t > 0) {
                releaseInBackground(key, kind, owner, permits);
            }
        });
    }

    static RuntimeException unwrap(Throwable t) {
        if (t instanceof java.util.concurrent.CompletionException && t.getCause() != null) {
            t = t.getCause();
        }
        if (t instanceof DlockException d) {
            return d;
        }
        if (t instanceof TimeoutException) {
            return new DlockConnectionException("no reply in time", t);
        }
        if (t instanceof RuntimeException r && !(t instanceof CancellationException)) {
            return r;
        }
        return new DlockConnectionException(String.valueOf(t.getMessage()), t);
    }

    /** A bound for a background call: the transport's timeout, at most 5 s. */
    private long backgroundMs() {
        return Math.min(5_000L, transport.replyTimeoutMs());
    }

    /** {@code DLOCK.CANCEL key owner}, sent in the background (the caller never waits for it). */
    void cancelInBackground(byte[] key, String owner) {
        if (!cancelSupported || closed.get()) {
            return;
        }
        try {
            transport.callAsync(key, Commands.cancel(key, owner), backgroundMs()).whenComplete((r, e) -> {
                if (e != null && unwrap(e) instanceof UnknownCommandException) {
                    cancelSupported = false; // an older module: its places time out on the server
                }
            });
        } catch (RuntimeException e) {
            // best effort: the place times out on the server
        }
    }

    private void releaseInBackground(byte[] key, Kind kind, String owner, long permits) {
        if (closed.get()) {
            return;
        }
        try {
            transport.callAsync(key, Commands.release(kind, key, owner, permits), backgroundMs());
        } catch (RuntimeException e) {
            // best effort: the hold ends at its lease
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
            if (old != null && old.live() && old.token == token) {
                old.count.incrementAndGet();
                old.confirm(sentNanos, lease); // a reentrant grant restarts the lease
                if (watchdog && !old.watchdog) {
                    old.renewLeaseMs = lease;
                    old.watchdog = true;
                }
                return old;
            }
            if (old != null) {
                old.end();
            }
            created[0] = new Hold(mk, name, key, kind, owner, token, permits, lease, watchdog, sentNanos);
            return created[0];
        });
        if (created[0] == null) {
            reschedule(h);
            return h;
        }
        subscriptions.add(h);
        // A grant that took long to arrive (a long server-side wait) is re-anchored with a
        // RENEW, so the lease clock (started when the request was sent) keeps its lease.
        if ((System.nanoTime() - sentNanos) / 1_000_000L > lease / 4) {
            long s = System.nanoTime();
            try {
                long bound = Math.max(1, (h.validUntilNanos() - s) / 1_000_000L);
                if (Replies.integer(transport.call(key, Commands.renew(key, owner, lease), bound),
                        "DLOCK.RENEW") == 1) {
                    h.confirm(s, lease);
                }
            } catch (DlockException e) {
                // the watchdog tries again; the lease clock runs from the grant's request
            }
        }
        if (subscriptions.noticedSince(h, sentNanos)) {
            check(h, null); // a notice came while the grant was on its way: it may have been about it
        }
        h.nextRenewNanos = h.confirmedNanos() + renewIntervalNanos(h);
        reschedule(h);
        return h;
    }

    private long renewIntervalNanos(Hold h) {
        return Leases.renewInterval(h.renewLeaseMs, config.getLockWatchdogTimeout(), config.getRenewIntervalSetting())
                * 1_000_000L;
    }

    /** Schedules the hold's one task at its next renewal or its lease clock's end, whichever is first. */
    private void reschedule(Hold h) {
        h.guard.lock();
        try {
            if (!h.live() || scheduler.isShutdown()) {
                return;
            }
            long until = h.validUntilNanos();
            long at = h.watchdog && !h.releasing && !h.renewing && h.nextRenewNanos - until < 0 ? h.nextRenewNanos
                    : until;
            if (h.task != null) {
                h.task.cancel(false);
            }
            h.task = scheduler.schedule(() -> tick(h), Math.max(0, at - System.nanoTime()), TimeUnit.NANOSECONDS);
        } catch (RejectedExecutionException e) {
            // closing
        } finally {
            h.guard.unlock();
        }
    }

    /** The hold's task, on the scheduler's thread: fires the lease clock, or sends a renewal. Never blocks. */
    private void tick(Hold h) {
        if (!h.live()) {
            return;
        }
        long now = System.nanoTime();
        if (now - h.validUntilNanos() >= 0) {
            lose(h, h.watchdog ? LostReason.UNREACHABLE : LostReason.EXPIRED);
            return;
        }
        if (h.watchdog && !h.releasing && !h.renewing && now - h.nextRenewNanos >= 0) {
            renewInBackground(h, now);
        }
        reschedule(h);
    }

    private void renewInBackground(Hold h, long sent) {
        h.renewing = true;
        long lease = h.renewLeaseMs;
        // The renewal has failed when it is not answered by the clock's end (renewed() then
        // lets the clock fire, whatever comes later); the transport may wait a little longer
        // before it counts its connection as stalled.
        long bound = Math.max(RENEW_FLOOR_MS, (h.validUntilNanos() - sent) / 1_000_000L);
        CompletableFuture<Object> f;
        try {
            f = transport.callAsync(h.key, Commands.renew(h.key, h.owner, lease), bound);
        } catch (RuntimeException e) {
            f = CompletableFuture.failedFuture(e);
        }
        f.whenComplete((r, e) -> {
            try {
                scheduler.execute(() -> renewed(h, sent, lease, r, e));
            } catch (RejectedExecutionException closing) {
                // closed meanwhile
            }
        });
    }

    /** A renewal's outcome, on the scheduler's thread. */
    private void renewed(Hold h, long sent, long lease, Object reply, Throwable error) {
        h.renewing = false;
        if (!h.live() || h.releasing) {
            return; // ended, or its owner's release says what becomes of it
        }
        long now = System.nanoTime();
        Long answer = null;
        if (error == null) {
            answer = reply instanceof Long l ? l : null;
        } else if (unwrap(error) instanceof NotHeldException) {
            answer = 0L;
        }
        if (answer != null && answer == 1) {
            if (now - h.validUntilNanos() >= 0) {
                lose(h, LostReason.UNREACHABLE); // too late: the signal fires at the clock's end whatever comes after
                return;
            }
            h.confirm(sent, lease);
            h.nextRenewNanos = sent + renewIntervalNanos(h);
        } else if (answer != null && answer == 0) {
            LostReason n = h.notice;
            lose(h, n != null ? n : LostReason.NOT_HELD);
            return;
        } else {
            long interval = renewIntervalNanos(h);
            long retry = Math.min(Math.max(h.renewLeaseMs * 100_000L, 20_000_000L), interval);
            h.nextRenewNanos = now + retry;
        }
        reschedule(h);
    }

    /**
     * Checks {@code h} after a notice ({@code why}: what the notice said, or null after a
     * (re)subscription): {@code DLOCK.CHECK key token} at once; one check at a time per
     * hold, and one more when notices came while it was out.
     */
    void check(Hold h, LostReason why) {
        if (!h.live() || h.releasing || closed.get()) {
            return;
        }
        if (why != null) {
            h.notice = why;
        }
        synchronized (h) {
            if (h.checking) {
                h.recheck = true;
                return;
            }
            h.checking = true;
        }
        sendCheck(h, 0);
    }

    /**
     * One check. A check that failed on its connection is tried again after 50, 100, 200,
     * 400 and 800 ms (a notice often comes right after the connections went: a BIND hold's
     * connection killed with the others, while the transport makes new ones); the lease
     * clock stays the backstop.
     */
    private void sendCheck(Hold h, int attempt) {
        long bound = backgroundMs(); // a late answer changes nothing: the lease clock fires by itself
        CompletableFuture<Object> f;
        try {
            f = transport.callAsync(h.key, Commands.check(h.key, h.token), bound);
        } catch (RuntimeException e) {
            f = CompletableFuture.failedFuture(e);
        }
        f.whenComplete((r, e) -> {
            if (e != null && attempt < 5 && h.live() && !closed.get()
                    && unwrap(e) instanceof DlockConnectionException) {
                try {
                    scheduler.schedule(() -> sendCheck(h, attempt + 1), 50L << attempt, TimeUnit.MILLISECONDS);
                    return;
                } catch (RejectedExecutionException closing) {
                    // closed meanwhile: the check ends here
                }
            }
            boolean again;
            synchronized (h) {
                again = h.recheck;
                h.recheck = false;
                h.checking = again;
            }
            // While its owner releases it, a 0 is that release's (its message may come before
            // its reply): the release says what became of the hold.
            if (e == null && r instanceof Long l && l == 0 && h.live() && !h.releasing) {
                LostReason n = h.notice;
                lose(h, n != null ? n : LostReason.NOT_HELD);
                return;
            }
            if (again) {
                if (h.live() && !closed.get()) {
                    sendCheck(h, 0);
                } else {
                    synchronized (h) {
                        h.checking = false;
                    }
                }
            }
        });
    }

    /** Ends {@code h} as lost (when it was still live) and fires its loss signal. */
    void lose(Hold h, LostReason reason) {
        if (!h.end()) {
            return;
        }
        subscriptions.remove(h);
        signal(h, reason);
    }

    /** Fires {@code h}'s loss signal once: listeners and the lost future run off the timers' thread. */
    void signal(Hold h, LostReason reason) {
        if (!h.signalled.compareAndSet(false, true)) {
            return;
        }
        h.reason = reason;
        observeEnd(h, reason);
        try {
            signals.execute(() -> runSignal(h, reason));
        } catch (RejectedExecutionException e) {
            runSignal(h, reason);
        }
    }

    private void signalNow(Hold h, LostReason reason) {
        if (h.signalled.compareAndSet(false, true)) {
            h.reason = reason;
            subscriptions.remove(h);
            observeEnd(h, reason);
            runSignal(h, reason);
        }
    }

    private void runSignal(Hold h, LostReason reason) {
        for (LostListener l : listeners) {
            try {
                l.onLost(h.name, h.owner, h.token, reason);
            } catch (RuntimeException e) {
                // a listener's failure must not stop the others
            }
        }
        h.lost.complete(reason);
    }

    /**
     * Takes one hold of {@code owner} back ({@code docs/clients.md}, rule 3). The release of
     * the last count stops the watchdog before it is sent; a release that fails on its
     * connection is retried once on a fresh connection.
     *
     * @throws IllegalMonitorStateException when this client has no hold of {@code owner} there
     */
    UnlockResult release(String name, byte[] key, Kind kind, String owner) {
        String mk = mapKey(kind, name, owner);
        Hold h = holds.get(mk);
        if (h == null) {
            throw new IllegalMonitorStateException("attempt to unlock lock \"" + name + "\", not locked by current"
                    + " thread (owner " + owner + ")");
        }
        boolean last = h.count.get() <= 1 || !h.live();
        if (last) {
            h.releasing = true;
        }
        byte[][] cmd = Commands.release(kind, key, owner, h.permits);
        Object reply;
        try {
            reply = releaseOnce(key, cmd);
            if (last) {
                // The server counted more grants than this client (a grant whose reply was
                // lost and that was asked again): the last unlock takes them all back.
                for (int i = 0; i < 64 && Long.valueOf(0).equals(reply); i++) {
                    reply = releaseOnce(key, cmd);
                }
            }
        } catch (NotHeldException e) {
            holds.remove(mk, h);
            h.end();
            subscriptions.remove(h);
            LostReason n = h.notice;
            signal(h, n != null ? n : LostReason.NOT_HELD);
            return new UnlockResult(UnlockResult.Status.LOST, e);
        } catch (DlockException e) {
            if (last) {
                holds.remove(mk, h);
                h.end();
                subscriptions.remove(h);
                observeEnd(h, null); // ended by its owner's unlock, whatever the server did
            } else {
                h.count.decrementAndGet();
            }
            return new UnlockResult(UnlockResult.Status.UNKNOWN, e);
        }
        boolean gone = Replies.released(reply);
        if (gone || h.count.decrementAndGet() <= 0) {
            holds.remove(mk, h);
            h.end();
            subscriptions.remove(h);
            observeEnd(h, null);
            return UnlockResult.RELEASED;
        }
        h.releasing = false;
        return UnlockResult.STILL_HELD;
    }

    /**
     * Gives back {@code n} of the permits of semaphore grant {@code owner}
     * ({@code DLOCK.RELEASE … PERMITS n}); the grant stays (and stays renewed) while it has
     * permits left.
     *
     * @throws IllegalMonitorStateException when this client has no such grant
     */
    UnlockResult releasePermits(String name, Kind kind, String owner, long n) {
        String mk = mapKey(kind, name, owner);
        Hold h = holds.get(mk);
        if (h == null) {
            throw new IllegalMonitorStateException("permit " + owner + " of semaphore \"" + name + "\" is not held");
        }
        if (n >= h.permits) {
            return release(name, h.key, kind, owner);
        }
        Object reply;
        try {
            reply = releaseOnce(h.key, Commands.release(kind, h.key, owner, n));
        } catch (NotHeldException e) {
            holds.remove(mk, h);
            h.end();
            subscriptions.remove(h);
            LostReason why = h.notice;
            signal(h, why != null ? why : LostReason.NOT_HELD);
            return new UnlockResult(UnlockResult.Status.LOST, e);
        } catch (DlockException e) {
            return new UnlockResult(UnlockResult.Status.UNKNOWN, e);
        }
        boolean gone = Replies.released(reply);
        if (gone) {
            holds.remove(mk, h);
            h.end();
            subscriptions.remove(h);
            observeEnd(h, null);
            return UnlockResult.RELEASED;
        }
        h.permits -= n;
        return UnlockResult.STILL_HELD;
    }

    /** One RELEASE, and on a connection failure one more on a fresh connection. */
    private Object releaseOnce(byte[] key, byte[][] cmd) {
        try {
            return transport.call(key, cmd);
        } catch (DlockConnectionException first) {
            try {
                return transport.callFresh(key, cmd);
            } catch (DlockConnectionException second) {
                second.addSuppressed(first);
                throw new DlockConnectionException(Replies.text(cmd[0]) + " failed, and again on a fresh connection ("
                        + second.getMessage() + "); the hold is no longer renewed and ends at its lease at the latest",
                        second);
            }
        }
    }

    /** The live hold of {@code owner}, valid by its lease clock, or null. */
    Hold hold(Kind kind, String name, String owner) {
        Hold h = holds.get(mapKey(kind, name, owner));
        return h == null || !h.valid() ? null : h;
    }

    /** The hold of {@code owner} as long as this client has it, lost or not (for its lost signal), or null. */
    Hold anyHold(Kind kind, String name, String owner) {
        return holds.get(mapKey(kind, name, owner));
    }

    Map<String, Object> info(byte[] key) {
        return Replies.info(transport.call(key, Commands.info(key)));
    }

    CompletableFuture<List<Object>> blocking(byte[] key, byte[][] args) {
        return transport.callBlocking(key, Collections.singletonList(args));
    }

    /**
     * Renews {@code owner}'s hold to {@code leaseMs} from now ({@code DLOCK.RENEW}) and moves
     * its lease clock on; a watchdog keeps renewing with the new lease.
     *
     * @return false when the server no longer has the hold (its lost signal completes)
     * @throws IllegalMonitorStateException when this client has no such hold
     */
    boolean renew(String name, byte[] key, Kind kind, String owner, long leaseMs) {
        Leases.checkLease("leaseTime", leaseMs, leaseMs + " ms");
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
            LostReason n = h.notice;
            lose(h, n != null ? n : LostReason.NOT_HELD);
            return false;
        }
        h.renewLeaseMs = leaseMs;
        h.confirm(sent, leaseMs);
        h.nextRenewNanos = sent + renewIntervalNanos(h);
        reschedule(h);
        return true;
    }

    /** The signal executor, for completing the futures of async calls off the transport's threads. */
    java.util.concurrent.Executor signalExecutor() {
        return signals;
    }
}
