package io.dlock.conformance;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.dlock.DLock;
import io.dlock.DMultiLock;
import io.dlock.DSemaphore;
import io.dlock.DeadlockException;
import io.dlock.Dlock;
import io.dlock.DlockArgumentException;
import io.dlock.DlockConfig;
import io.dlock.DlockConnectionException;
import io.dlock.DlockTimeoutException;
import io.dlock.Election;
import io.dlock.LockOptions;
import io.dlock.LostReason;
import io.dlock.NoReplicasException;
import io.dlock.NotDurableException;
import io.dlock.NotHeldException;
import io.dlock.QueueFullException;
import io.dlock.UnknownCommandException;
import io.dlock.UnlockResult;
import io.dlock.WrongKindException;
import io.dlock.jedis.DlockJedis;
import io.dlock.lettuce.DlockLettuce;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletionStage;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * The conformance driver of the Java client ({@code conformance/README.md}): JSON Lines
 * requests on stdin, replies and {@code lost} events on stdout, each request on a thread
 * of its own. It drives only the client's public API, as a user would: the transport
 * made from the request's url with the library's defaults (except what {@code options}
 * names), {@code DlockJedis.create}/{@code DlockLettuce.create}, the locks' {@code Duration}
 * methods, {@code lostSignal()} for the loss signal, {@code unlockAndGetResult()}.
 *
 * <p>Each handle has a thread of its own (Java holds belong to a thread), on which its
 * acquire and unlock run. Usage: {@code Driver jedis|lettuce}.
 */
public final class Driver {
    private static final ObjectMapper JSON = new ObjectMapper();

    private final String flavour;
    private final PrintStream out;
    private final ExecutorService requests = Executors.newCachedThreadPool(daemon("driver-request"));
    private final Map<String, Handle> handles = new ConcurrentHashMap<>();
    /** The thread of each named owner: handles with the same owner are the same Java owner. */
    private final Map<String, Lane> owners = new ConcurrentHashMap<>();
    private volatile Dlock dlock;
    private volatile Runnable closeDriver = () -> { };
    private final AtomicBoolean closed = new AtomicBoolean();
    private volatile LockOptions options = LockOptions.DEFAULT;

    /** A thread of the client's: a Java hold belongs to the thread that took it (its owner). */
    private static final class Lane {
        final ExecutorService thread;
        final long threadId;

        Lane(String name) {
            long[] id = new long[1];
            this.thread = Executors.newSingleThreadExecutor(r -> {
                Thread t = new Thread(r, "driver-" + name);
                t.setDaemon(true);
                id[0] = t.getId();
                return t;
            });
            try {
                thread.submit(() -> { }).get();
            } catch (Exception e) {
                throw new IllegalStateException(e);
            }
            this.threadId = id[0];
        }
    }

    /** One handle: its thread, and what it holds. */
    private static final class Handle {
        final ExecutorService thread;
        final long threadId;
        final AtomicBoolean told = new AtomicBoolean();
        volatile DLock lock;
        volatile DSemaphore semaphore;
        volatile String permit;
        volatile DMultiLock multi;
        volatile Election.Term term;

        Handle(Lane lane) {
            this.thread = lane.thread;
            this.threadId = lane.threadId;
        }

        boolean held() {
            if (lock != null) {
                return lock.isHeldByThread(threadId);
            }
            if (semaphore != null) {
                return semaphore.isHeld(permit);
            }
            if (multi != null) {
                return multi.getLocks().stream().allMatch(l -> l.isHeldByThread(threadId));
            }
            return term != null && !term.isLost();
        }
    }

    private Driver(String flavour, PrintStream out) {
        this.flavour = flavour;
        this.out = out;
    }

    private static java.util.concurrent.ThreadFactory daemon(String name) {
        return r -> {
            Thread t = new Thread(r, name);
            t.setDaemon(true);
            return t;
        };
    }

    /** Reads requests until {@code exit} or the end of stdin. */
    public static void main(String[] args) throws Exception {
        if (args.length != 1 || !(args[0].equals("jedis") || args[0].equals("lettuce"))) {
            System.err.println("usage: Driver jedis|lettuce");
            System.exit(2);
        }
        PrintStream out = new PrintStream(new java.io.FileOutputStream(java.io.FileDescriptor.out), false,
                StandardCharsets.UTF_8);
        Driver d = new Driver(args[0], out);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            JsonNode req;
            try {
                req = JSON.readTree(line);
            } catch (Exception e) {
                System.err.println("driver: not JSON: " + line);
                continue;
            }
            if ("exit".equals(req.path("op").asText())) {
                d.send(d.ok(req));
                return; // without closing anything: the process must end by itself
            }
            d.requests.execute(() -> d.handle(req));
        }
    }

    private synchronized void send(ObjectNode msg) {
        try {
            out.println(JSON.writeValueAsString(msg));
            out.flush();
        } catch (Exception e) {
            System.err.println("driver: cannot write " + msg + ": " + e);
        }
    }

    private ObjectNode ok(JsonNode req) {
        ObjectNode r = JSON.createObjectNode();
        r.set("id", req.get("id"));
        r.put("ok", true);
        return r;
    }

    private void handle(JsonNode req) {
        ObjectNode reply;
        try {
            reply = switch (req.path("op").asText()) {
                case "open" -> open(req);
                case "acquire" -> onHandle(req, () -> acquire(req));
                case "acquire_multi" -> onHandle(req, () -> acquireMulti(req));
                case "campaign" -> onHandle(req, () -> campaign(req));
                case "unlock" -> unlock(req);
                case "held" -> held(req);
                case "close" -> close(req);
                default -> error(req, "unsupported", "no such request: " + req.path("op").asText(), null);
            };
        } catch (Throwable e) {
            reply = failure(req, e);
        }
        send(reply);
    }

    private interface Step {
        ObjectNode run() throws Exception;
    }

    /**
     * Runs {@code step} on the thread of the request's handle (made for it on its first
     * request; the thread of its {@code owner} when the request names one: in Java the
     * owner of a hold is the client and the thread, so two handles of one owner share it).
     */
    private ObjectNode onHandle(JsonNode req, Step step) throws Throwable {
        String name = req.path("handle").asText();
        Handle h = handles.computeIfAbsent(name, n -> new Handle(req.hasNonNull("owner")
                ? owners.computeIfAbsent(req.get("owner").asText(), o -> new Lane("owner-" + o))
                : new Lane("handle-" + n)));
        try {
            return h.thread.submit(step::run).get();
        } catch (java.util.concurrent.ExecutionException e) {
            throw e.getCause();
        }
    }

    // ------------------------------------------------------------------ requests

    private ObjectNode open(JsonNode req) {
        JsonNode o = req.path("options");
        for (String f : List.of("wait_mode")) {
            if (o.has(f) && !"server".equals(o.get(f).asText())) {
                return error(req, "unsupported", "the Java client waits on the server only (wait_mode "
                        + o.get(f).asText() + ")", null);
            }
        }
        DlockConfig config = new DlockConfig();
        if (o.has("watchdog_lease_ms")) {
            config.setLockWatchdogTimeout(o.get("watchdog_lease_ms").asLong());
        }
        if (o.has("renew_interval_ms")) {
            config.setRenewInterval(o.get("renew_interval_ms").asLong());
        }
        LockOptions lo = LockOptions.DEFAULT;
        if (o.has("replicas")) {
            lo = lo.withReplicas(o.get("replicas").asInt(), 1000);
        }
        if (o.path("bind").asBoolean(false)) {
            lo = lo.withBind(true);
        }
        config.setLockOptions(lo);
        options = lo;
        URI url = URI.create(req.path("url").asText());
        long timeout = o.path("transport_timeout_ms").asLong(0);
        if (flavour.equals("jedis")) {
            redis.clients.jedis.RedisClient.Builder b = redis.clients.jedis.RedisClient.builder();
            b.hostAndPort(url.getHost(), url.getPort());
            if (timeout > 0) {
                b.clientConfig(redis.clients.jedis.DefaultJedisClientConfig.builder().timeoutMillis((int) timeout)
                        .build());
            }
            redis.clients.jedis.RedisClient jedis = b.build();
            try {
                dlock = DlockJedis.create(jedis, config);
            } catch (RuntimeException e) {
                jedis.close();
                throw e;
            }
            closeDriver = jedis::close;
        } else {
            io.lettuce.core.RedisURI uri = io.lettuce.core.RedisURI.create(url);
            if (timeout > 0) {
                uri.setTimeout(Duration.ofMillis(timeout));
            }
            io.lettuce.core.RedisClient lettuce = io.lettuce.core.RedisClient.create(uri);
            try {
                dlock = DlockLettuce.create(lettuce, config);
            } catch (RuntimeException e) {
                lettuce.shutdown();
                throw e;
            }
            closeDriver = lettuce::shutdown;
        }
        return ok(req);
    }

    private Dlock client() {
        Dlock d = dlock;
        if (d == null) {
            throw new IllegalStateException("no open before this request");
        }
        return d;
    }

    private static Duration lease(JsonNode req) {
        return req.has("lease_ms") && !req.get("lease_ms").isNull() ? Duration.ofMillis(req.get("lease_ms").asLong())
                : null;
    }

    private static Duration waitTime(JsonNode req) {
        return Duration.ofMillis(req.path("wait_ms").asLong(0));
    }

    private LockOptions optionsOf(JsonNode req) {
        LockOptions lo = options;
        if (req.has("bind")) {
            lo = lo.withBind(req.get("bind").asBoolean());
        }
        return lo;
    }

    /** Reports the handle's loss signal as its (one) {@code lost} event. */
    private void watch(String handle, Handle h, CompletionStage<LostReason> signal) {
        signal.thenAccept(reason -> {
            if (h.told.compareAndSet(false, true)) {
                ObjectNode ev = JSON.createObjectNode();
                ev.put("event", "lost");
                ev.put("handle", handle);
                ev.put("reason", reason.contractName());
                send(ev);
            }
        });
    }

    private ObjectNode acquire(JsonNode req) throws Exception {
        String name = req.path("handle").asText();
        Handle h = handles.get(name);
        String key = req.path("key").asText();
        String kind = req.path("kind").asText("mutex");
        LockOptions lo = optionsOf(req);
        Dlock d = client();
        ObjectNode r = ok(req);
        if (kind.equals("semaphore")) {
            DSemaphore s = d.getSemaphore(key, req.path("limit").asInt(1));
            String permit = s.tryAcquire(req.path("permits").asInt(1), waitTime(req), lease(req));
            if (permit == null) {
                return error(req, "timeout", "not granted within " + waitTime(req).toMillis() + " ms", null);
            }
            h.semaphore = s;
            h.permit = permit;
            h.told.set(false);
            r.put("token", s.getToken(permit));
            watch(name, h, s.lostSignal(permit));
            return r;
        }
        DLock lock = switch (kind) {
            case "mutex" -> d.getLock(key, lo);
            case "fair" -> d.getFairLock(key, lo);
            case "read" -> d.getReadWriteLock(key, lo).readLock();
            case "write" -> d.getReadWriteLock(key, lo).writeLock();
            default -> throw new UnsupportedOperationException("no lock kind " + kind);
        };
        if (!lock.tryLock(waitTime(req), lease(req))) {
            return error(req, "timeout", "not granted within " + waitTime(req).toMillis() + " ms", null);
        }
        h.lock = lock;
        h.told.set(false);
        r.put("token", lock.getToken());
        watch(name, h, lock.lostSignal());
        return r;
    }

    private ObjectNode acquireMulti(JsonNode req) throws Exception {
        String name = req.path("handle").asText();
        Handle h = handles.get(name);
        Dlock d = client();
        LockOptions lo = optionsOf(req);
        List<DLock> locks = new ArrayList<>();
        for (JsonNode k : req.path("keys")) {
            locks.add(d.getLock(k.asText(), lo));
        }
        DMultiLock multi = d.getMultiLock(locks.toArray(new DLock[0]));
        if (!multi.tryLock(waitTime(req), lease(req))) {
            return error(req, "timeout", "not granted within " + waitTime(req).toMillis() + " ms", null);
        }
        h.multi = multi;
        h.told.set(false);
        ObjectNode r = ok(req);
        ArrayNode tokens = r.putArray("tokens");
        for (Long t : multi.getTokens()) {
            tokens.add(t);
        }
        watch(name, h, multi.lostSignal());
        return r;
    }

    private ObjectNode campaign(JsonNode req) throws Exception {
        String name = req.path("handle").asText();
        Handle h = handles.get(name);
        String election = req.path("name").asText();
        Election e = client().getElection(election, optionsOf(req));
        long wait = req.path("wait_ms").asLong(0);
        Election.Term t = e.campaign(wait, TimeUnit.MILLISECONDS);
        if (t == null) {
            return error(req, "timeout", "not leader within " + wait + " ms", null);
        }
        if (req.hasNonNull("value")) {
            t.proclaim(req.get("value").asText());
        }
        h.term = t;
        h.told.set(false);
        ObjectNode r = ok(req);
        r.put("key", election);
        watch(name, h, t.lostSignal());
        return r;
    }

    private ObjectNode unlock(JsonNode req) throws Throwable {
        Handle h = handles.get(req.path("handle").asText());
        if (h == null || (h.lock == null && h.semaphore == null && h.multi == null && h.term == null)) {
            return error(req, "other", "handle " + req.path("handle").asText() + " never held", null);
        }
        return onHandle(req, () -> {
            ObjectNode r = ok(req);
            UnlockResult u;
            if (h.lock != null) {
                u = h.lock.unlockAndGetResult();
            } else if (h.semaphore != null) {
                u = h.semaphore.releaseAndGetResult(h.permit);
            } else if (h.multi != null) {
                u = h.multi.unlockAndGetResult();
            } else {
                try {
                    u = h.term.resign() ? UnlockResult.RELEASED
                            : new UnlockResult(UnlockResult.Status.LOST, null);
                } catch (DlockConnectionException e) {
                    u = new UnlockResult(UnlockResult.Status.UNKNOWN, e);
                }
            }
            r.put("result", u.status().name().toLowerCase(java.util.Locale.ROOT));
            if (u.status() == UnlockResult.Status.UNKNOWN && u.error() != null) {
                r.put("error", String.valueOf(u.error().getMessage()));
            }
            return r;
        });
    }

    private ObjectNode held(JsonNode req) {
        Handle h = handles.get(req.path("handle").asText());
        ObjectNode r = ok(req);
        r.put("held", h != null && h.held());
        return r;
    }

    private ObjectNode close(JsonNode req) {
        Dlock d = dlock;
        if (d != null) {
            d.close();
        }
        if (closed.compareAndSet(false, true)) {
            closeDriver.run();
        }
        return ok(req);
    }

    // ------------------------------------------------------------------ errors

    private ObjectNode error(JsonNode req, String kind, String message, ObjectNode extra) {
        ObjectNode r = JSON.createObjectNode();
        r.set("id", req.get("id"));
        r.put("ok", false);
        ObjectNode e = extra != null ? extra : JSON.createObjectNode();
        e.put("kind", kind);
        e.put("message", message == null ? "" : message);
        r.set("error", e);
        return r;
    }

    /** The contract's kind of what the client threw. */
    private ObjectNode failure(JsonNode req, Throwable t) {
        ObjectNode extra = JSON.createObjectNode();
        String kind;
        if (t instanceof DlockArgumentException a) {
            kind = "invalid_argument";
            extra.put("argument", a.argument());
        } else if (t instanceof IllegalArgumentException) {
            kind = "invalid_argument";
        } else if (t instanceof DlockTimeoutException) {
            kind = "timeout";
        } else if (t instanceof UnknownCommandException) {
            kind = "module_not_loaded";
        } else if (t instanceof WrongKindException) {
            kind = "wrong_kind";
        } else if (t instanceof DeadlockException dl) {
            kind = "deadlock";
            ArrayNode cycle = extra.putArray("cycle");
            for (DeadlockException.Step s : dl.cycle()) {
                cycle.addArray().add(s.key()).add(s.owner());
            }
        } else if (t instanceof QueueFullException) {
            kind = "queue_full";
        } else if (t instanceof NotDurableException || t instanceof NoReplicasException) {
            kind = "not_durable";
        } else if (t instanceof NotHeldException) {
            kind = "lost";
            extra.put("reason", "not_held");
        } else if (t instanceof DlockConnectionException || t instanceof io.lettuce.core.RedisConnectionException
                || t instanceof redis.clients.jedis.exceptions.JedisConnectionException) {
            kind = "connection";
        } else if (t instanceof UnsupportedOperationException) {
            kind = "unsupported";
        } else {
            kind = "other";
        }
        return error(req, kind, t.getClass().getSimpleName() + ": " + t.getMessage(), extra);
    }
}
