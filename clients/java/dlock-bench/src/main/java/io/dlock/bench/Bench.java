package io.dlock.bench;

import io.dlock.Dlock;
import io.dlock.jedis.JedisTransport;
import io.dlock.lettuce.LettuceTransport;
import io.dlock.spring.DlockLockRegistry;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.locks.Lock;
import java.util.concurrent.locks.LockSupport;
import java.util.function.Function;
import org.apache.commons.pool2.impl.GenericObjectPoolConfig;
import org.redisson.Redisson;
import org.redisson.api.RedissonClient;
import org.redisson.config.Config;
import org.springframework.data.redis.connection.RedisStandaloneConfiguration;
import org.springframework.data.redis.connection.lettuce.LettuceConnectionFactory;
import org.springframework.integration.redis.util.RedisLockRegistry;

/**
 * 64 threads on one lock with 0 ms and 1 ms holds, then single-thread acquire+release
 * latency: dlock on Jedis and on Lettuce (plain and through DlockLockRegistry) against the
 * real Redisson RLock and RFairLock and Spring's RedisLockRegistry, on one server with the
 * dlock module started here, in one run; with each library's floor ({@link Floor}: a token
 * handed over with BLPOP/RPUSH, no lock at all) beside them.
 *
 * <p>Options: {@code --seconds S} per contended run (1.5), {@code --rounds R} (3: the clients
 * take turns R times and each row pools its rounds), {@code --warmup-rounds W} (1: rounds
 * run first and discarded, so that every client is compiled by the JIT before any round
 * counts), {@code --warmup-ms M} (2000: a run before each measured one, on a fresh client),
 * {@code --threads N} (64), {@code --holds 0,1} (ms), {@code --uncontended N} (2000),
 * {@code --only name,...} (substrings of contender names), {@code --out FILE} (markdown).
 */
public final class Bench {
    private Bench() {
    }

    private static final String LOAD = loadAverage();

    private static String loadAverage() {
        try {
            String[] f = Files.readString(Path.of("/proc/loadavg")).trim().split(" ");
            return f[0] + " " + f[1] + " " + f[2];
        } catch (IOException | RuntimeException e) {
            return "unknown";
        }
    }

    /** One client library under test: a lock object per key, shared by the threads. */
    record Contender(String name, Function<String, Lock> lockOf, AutoCloseable closer)
            implements AutoCloseable {
        @Override
        public void close() {
            try {
                closer.close();
            } catch (Exception e) {
                System.err.println(name + ": close failed: " + e);
            }
        }
    }

    private record Result(String contender, long holdMs, long grants, double seconds, long p50Nanos, long p99Nanos,
            double commandsPerGrant, double jain, long errors, String topCommands, Usage client, Usage server) {
        double grantsPerSecond() {
            return grants / seconds;
        }

        /** Client CPU µs, server CPU µs, client and server context switches per grant. */
        String costs() {
            double g = Math.max(1, grants);
            return String.format(Locale.ROOT, "%.0f | %.0f | %.1f | %.1f", client.cpuNanos() / 1e3 / g,
                    server.cpuNanos() / 1e3 / g, client.switches() / g, server.switches() / g);
        }
    }

    private record Latency(String contender, long p50Nanos, long p99Nanos, double commandsPerOp) {
    }

    public static void main(String[] args) throws Exception {
        if (System.getProperty("org.slf4j.simpleLogger.defaultLogLevel") == null) {
            System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
        }
        Map<String, String> opt = new HashMap<>();
        for (int i = 0; i + 1 < args.length; i += 2) {
            if (!args[i].startsWith("--")) {
                throw new IllegalArgumentException("expected --option value pairs, got " + Arrays.toString(args));
            }
            opt.put(args[i].substring(2), args[i + 1]);
        }
        double seconds = Double.parseDouble(opt.getOrDefault("seconds", "1.5"));
        int rounds = Integer.parseInt(opt.getOrDefault("rounds", "3"));
        int warmupRounds = Integer.parseInt(opt.getOrDefault("warmup-rounds", "1"));
        long warmupMs = Long.parseLong(opt.getOrDefault("warmup-ms", "2000"));
        int threads = Integer.parseInt(opt.getOrDefault("threads", "64"));
        long[] holds = Arrays.stream(opt.getOrDefault("holds", "0,1").split(",")).mapToLong(Long::parseLong).toArray();
        int uncontended = Integer.parseInt(opt.getOrDefault("uncontended", "2000"));
        List<String> only = opt.containsKey("only") ? List.of(opt.get("only").split(",")) : List.of();
        String out = opt.get("out");
        lettuceIoThreads = Integer.parseInt(opt.getOrDefault("lettuce-io-threads", "0"));

        try (Server server = Server.start()) {
            String version = server.version();
            System.out.printf("server: %s (%s), module %s, port %d%n", server.binary, version, server.module,
                    server.port);
            Map<String, List<Raw>> raws = new LinkedHashMap<>();
            List<Latency> latencies = new ArrayList<>();
            List<String> names = new ArrayList<>();
            for (String name : List.of("dlock Jedis", "Jedis BLPOP floor", "dlock Lettuce", "Lettuce BLPOP floor",
                    "Redisson RLock", "dlock Jedis fair", "Redisson RFairLock", "RedisLockRegistry",
                    "DlockLockRegistry")) {
                if (only.isEmpty() || only.stream().anyMatch(name::contains)) {
                    names.add(name);
                }
            }
            // Rounds interleave the clients, so that a change of the machine's load during the
            // run weighs on all of them alike; each row pools its rounds.
            // Warm-up rounds (negative numbers) run every client at every hold as a measured
            // round does and are discarded: the JIT compiles each client's paths before any
            // round counts, so that compilation pauses do not land in one client's tail.
            for (int round = 1 - warmupRounds; round <= rounds; round++) {
                for (String name : names) {
                    try (Contender ct = open(name, server.port, threads)) {
                        if (warmupMs > 0) {
                            run(server, ct, threads, 0, warmupMs / 1000.0, "warm");
                        }
                        for (long hold : holds) {
                            Raw raw = run(server, ct, threads, hold, seconds, "h" + hold);
                            if (round < 1) {
                                System.out.printf(Locale.ROOT, "warm-up %-20s hold %d ms: %9.0f grants/s%n", name, hold,
                                        raw.grantsPerSecond());
                                continue;
                            }
                            raws.computeIfAbsent(name + "\u0000" + hold, k -> new ArrayList<>()).add(raw);
                            Result r = summarize(List.of(raw), threads);
                            System.out.printf(Locale.ROOT,
                                    "round %d %-20s hold %d ms: %9.0f grants/s  p50 wait %8.2f ms  p99 wait %8.2f ms"
                                            + "  %5.2f cmds/grant  Jain %.4f  errors %d  [%s]  per grant: client"
                                            + " µs | server µs | client switches | server switches = %s%n",
                                    round, r.contender, hold, r.grantsPerSecond(), r.p50Nanos / 1e6, r.p99Nanos / 1e6,
                                    r.commandsPerGrant, r.jain, r.errors, r.topCommands, r.costs());
                        }
                        if (uncontended > 0 && round == rounds) {
                            Latency l = latency(server, ct, uncontended);
                            latencies.add(l);
                            System.out.printf(Locale.ROOT, "%-20s uncontended acquire+release: p50 %.3f ms, p99 %.3f"
                                    + " ms, %.2f cmds/op%n", l.contender, l.p50Nanos / 1e6, l.p99Nanos / 1e6,
                                    l.commandsPerOp);
                        }
                    }
                }
            }
            List<Result> results = new ArrayList<>();
            for (List<Raw> rs : raws.values()) {
                results.add(summarize(rs, threads));
            }
            String md = markdown(results, raws, latencies, version, threads, seconds, rounds, warmupRounds);
            System.out.println();
            System.out.println(md);
            if (out != null) {
                Files.writeString(Path.of(out), md, StandardCharsets.UTF_8);
                System.out.println("written to " + out);
            }
        }
        System.exit(0); // client libraries may leave non-daemon threads behind
    }

    private static int lettuceIoThreads;

    private static Contender open(String name, int port, int threads) {
        String host = "127.0.0.1";
        switch (name) {
            case "dlock Jedis" -> {
                Dlock d = Dlock.create(jedisTransport(host, port, threads));
                return new Contender(name, d::getLock, d);
            }
            case "dlock Jedis fair" -> {
                Dlock d = Dlock.create(jedisTransport(host, port, threads));
                return new Contender(name, d::getFairLock, d);
            }
            case "dlock Lettuce" -> {
                io.lettuce.core.RedisURI uri = io.lettuce.core.RedisURI.create(host, port);
                // --lettuce-io-threads N: the client's netty event loops (0: Lettuce's default).
                io.lettuce.core.RedisClient client = lettuceIoThreads > 0
                        ? io.lettuce.core.RedisClient.create(io.lettuce.core.resource.DefaultClientResources.builder()
                                .ioThreadPoolSize(lettuceIoThreads).build(), uri)
                        : io.lettuce.core.RedisClient.create(uri);
                Dlock d = Dlock.create(LettuceTransport.of(client, true));
                return new Contender(name, d::getLock, d);
            }
            case "Redisson RLock", "Redisson RFairLock" -> {
                Config cfg = new Config();
                cfg.useSingleServer().setAddress("redis://" + host + ":" + port);
                RedissonClient r = Redisson.create(cfg);
                boolean fair = name.endsWith("RFairLock");
                return new Contender(name, k -> fair ? r.getFairLock(k) : r.getLock(k), r::shutdown);
            }
            case "RedisLockRegistry" -> {
                LettuceConnectionFactory cf = new LettuceConnectionFactory(new RedisStandaloneConfiguration(host, port));
                cf.afterPropertiesSet();
                cf.start();
                RedisLockRegistry reg = new RedisLockRegistry(cf, "bench");
                return new Contender(name, reg::obtain, () -> {
                    reg.destroy();
                    cf.destroy();
                });
            }
            case "DlockLockRegistry" -> {
                Dlock d = Dlock.create(jedisTransport(host, port, threads));
                DlockLockRegistry reg = new DlockLockRegistry(d, "bench");
                return new Contender(name, reg::obtain, () -> {
                    reg.destroy();
                    d.close();
                });
            }
            case "Jedis BLPOP floor" -> {
                return Floor.jedis(name, host, port, threads);
            }
            case "Lettuce BLPOP floor" -> {
                return Floor.lettuce(name, host, port);
            }
            default -> throw new IllegalArgumentException("unknown contender " + name);
        }
    }

    private static JedisTransport jedisTransport(String host, int port, int threads) {
        return new JedisTransport(jedisClient(host, port, threads), true);
    }

    /** Jedis' pool must hold a connection for every thread that waits on the server, plus releases. */
    static redis.clients.jedis.RedisClient jedisClient(String host, int port, int threads) {
        GenericObjectPoolConfig<redis.clients.jedis.Connection> pool = new GenericObjectPoolConfig<>();
        pool.setMaxTotal(threads + 8);
        pool.setMaxIdle(threads + 8);
        return redis.clients.jedis.RedisClient.builder().hostAndPort(host, port).poolConfig(pool).build();
    }

    private static Raw run(Server server, Contender c, int threads, long holdMs, double seconds, String tag)
            throws Exception {
        Lock lock = c.lockOf.apply("bench:" + c.name.replace(' ', '-') + ":" + tag);
        long holdNanos = TimeUnit.MILLISECONDS.toNanos(holdMs);
        long[][] waits = new long[threads][];
        int[] counts = new int[threads];
        AtomicInteger errors = new AtomicInteger();
        AtomicReference<Throwable> firstError = new AtomicReference<>();
        CountDownLatch ready = new CountDownLatch(threads);
        CountDownLatch go = new CountDownLatch(1);
        CountDownLatch finished = new CountDownLatch(threads);
        CountDownLatch measured = new CountDownLatch(1);
        long[] startAt = new long[1];
        Thread[] ts = new Thread[threads];
        for (int i = 0; i < threads; i++) {
            int id = i;
            ts[i] = new Thread(() -> {
                long[] w = new long[1024];
                int n = 0;
                ready.countDown();
                try {
                    go.await();
                } catch (InterruptedException e) {
                    return;
                }
                long deadline = startAt[0] + (long) (seconds * 1e9);
                while (System.nanoTime() < deadline) {
                    long t0 = System.nanoTime();
                    try {
                        lock.lock();
                    } catch (RuntimeException e) {
                        errors.incrementAndGet();
                        firstError.compareAndSet(null, e);
                        continue;
                    }
                    long t1 = System.nanoTime();
                    try {
                        if (holdNanos > 0) {
                            LockSupport.parkNanos(holdNanos);
                        }
                    } finally {
                        try {
                            lock.unlock();
                        } catch (RuntimeException e) {
                            errors.incrementAndGet();
                            firstError.compareAndSet(null, e);
                        }
                    }
                    if (n == w.length) {
                        w = Arrays.copyOf(w, n * 2);
                    }
                    w[n++] = t1 - t0;
                }
                waits[id] = Arrays.copyOf(w, n);
                counts[id] = n;
                // Stay alive until the usage is read: a thread that ended takes its context
                // switches out of /proc.
                finished.countDown();
                try {
                    measured.await();
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }, "bench-" + i);
            ts[i].start();
        }
        ready.await();
        Map<String, Long> before = server.commandCalls();
        long self = ProcessHandle.current().pid();
        Usage clientBefore = Usage.of(self);
        Usage serverBefore = Usage.of(server.pid());
        startAt[0] = System.nanoTime();
        go.countDown();
        if (!finished.await(TimeUnit.SECONDS.toMillis(120) + (long) (seconds * 1000), TimeUnit.MILLISECONDS)) {
            measured.countDown();
            throw new IllegalStateException(c.name + ": threads did not finish");
        }
        double elapsed = (System.nanoTime() - startAt[0]) / 1e9;
        Usage client = Usage.of(self).minus(clientBefore);
        Usage serverUse = Usage.of(server.pid()).minus(serverBefore);
        measured.countDown();
        for (Thread t : ts) {
            t.join(TimeUnit.SECONDS.toMillis(120) + (long) (seconds * 1000));
            if (t.isAlive()) {
                throw new IllegalStateException(c.name + ": thread " + t.getName() + " did not finish");
            }
        }
        Map<String, Long> after = server.commandCalls();
        if (firstError.get() != null) {
            System.err.println(c.name + ": " + errors.get() + " errors, first: " + firstError.get());
        }
        long[] all = Arrays.stream(waits).flatMapToLong(Arrays::stream).toArray();
        return new Raw(c.name, holdMs, all, counts, elapsed, delta(before, after), errors.get(), client, serverUse);
    }

    /** One run's raw figures; {@code client} and {@code server}: what the run cost each process. */
    private record Raw(String contender, long holdMs, long[] waits, int[] counts, double seconds,
            Map<String, Long> commands, long errors, Usage client, Usage server) {
        double grantsPerSecond() {
            return seconds <= 0 ? 0 : Arrays.stream(counts).asLongStream().sum() / seconds;
        }
    }

    /** The pooled figures of one client's runs at one hold. */
    private static Result summarize(List<Raw> runs, int threads) {
        long[] counts = new long[threads];
        Map<String, Long> delta = new LinkedHashMap<>();
        double seconds = 0;
        long errors = 0;
        Usage client = new Usage(0, 0);
        Usage server = new Usage(0, 0);
        for (Raw r : runs) {
            client = client.plus(r.client);
            server = server.plus(r.server);
            for (int i = 0; i < Math.min(threads, r.counts.length); i++) {
                counts[i] += r.counts[i];
            }
            r.commands.forEach((k, v) -> delta.merge(k, v, Long::sum));
            seconds += r.seconds;
            errors += r.errors;
        }
        long[] all = runs.stream().flatMapToLong(r -> Arrays.stream(r.waits)).sorted().toArray();
        long grants = Arrays.stream(counts).sum();
        double sum = 0;
        double sq = 0;
        for (long n : counts) {
            sum += n;
            sq += (double) n * n;
        }
        double jain = sq == 0 ? 0 : sum * sum / (threads * sq);
        long commands = delta.values().stream().mapToLong(Long::longValue).sum();
        Raw first = runs.get(0);
        return new Result(first.contender, first.holdMs, grants, seconds, pct(all, 0.50), pct(all, 0.99),
                grants == 0 ? 0 : (double) commands / grants, jain, errors, top(delta, grants), client, server);
    }

    /** Calls per command between two INFO snapshots, less the first INFO itself. */
    private static Map<String, Long> delta(Map<String, Long> before, Map<String, Long> after) {
        Map<String, Long> d = new LinkedHashMap<>();
        for (Map.Entry<String, Long> e : after.entrySet()) {
            long v = e.getValue() - before.getOrDefault(e.getKey(), 0L);
            if (e.getKey().equals("info")) {
                v -= 1;
            }
            if (v > 0) {
                d.put(e.getKey(), v);
            }
        }
        return d;
    }

    private static String top(Map<String, Long> delta, long grants) {
        StringBuilder sb = new StringBuilder();
        delta.entrySet().stream().sorted((a, b) -> Long.compare(b.getValue(), a.getValue())).limit(6).forEach(e -> {
            if (sb.length() > 0) {
                sb.append(", ");
            }
            sb.append(e.getKey()).append(' ').append(String.format(Locale.ROOT, "%.2f",
                    grants == 0 ? 0.0 : (double) e.getValue() / grants));
        });
        return sb.toString();
    }

    private static long pct(long[] sorted, double p) {
        if (sorted.length == 0) {
            return 0;
        }
        int i = (int) Math.ceil(p * sorted.length) - 1;
        return sorted[Math.max(0, Math.min(sorted.length - 1, i))];
    }

    private static Latency latency(Server server, Contender c, int n) throws IOException {
        Lock lock = c.lockOf.apply("bench:" + c.name.replace(' ', '-') + ":solo");
        for (int i = 0; i < Math.max(100, n / 5); i++) {
            lock.lock();
            lock.unlock();
        }
        Map<String, Long> before = server.commandCalls();
        long[] t = new long[n];
        for (int i = 0; i < n; i++) {
            long t0 = System.nanoTime();
            lock.lock();
            lock.unlock();
            t[i] = System.nanoTime() - t0;
        }
        Map<String, Long> after = server.commandCalls();
        long commands = delta(before, after).values().stream().mapToLong(Long::longValue).sum();
        Arrays.sort(t);
        return new Latency(c.name, pct(t, 0.5), pct(t, 0.99), (double) commands / n);
    }

    private static String ratio(double v, double base) {
        return base <= 0 ? "–" : String.format(Locale.ROOT, "%.2f×", v / base);
    }

    /**
     * {@code who}'s grants/s over {@code base}'s at {@code hold}, round by round (each pair ran
     * in the same round, so a change of the machine's load weighs on both): sorted.
     */
    private static double[] perRound(Map<String, List<Raw>> raws, String who, String base, long hold) {
        List<Raw> a = raws.getOrDefault(who + "\u0000" + hold, List.of());
        List<Raw> b = raws.getOrDefault(base + "\u0000" + hold, List.of());
        double[] r = new double[Math.min(a.size(), b.size())];
        for (int i = 0; i < r.length; i++) {
            double ga = a.get(i).grantsPerSecond();
            double gb = b.get(i).grantsPerSecond();
            r[i] = gb <= 0 ? Double.NaN : ga / gb;
        }
        Arrays.sort(r);
        return r;
    }

    private static double median(double[] sorted) {
        int n = sorted.length;
        return n == 0 ? Double.NaN : n % 2 == 1 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
    }

    /** "1.93× (1.71–2.20× in 3 rounds)": the median of the per-round ratios and their range. */
    private static String spread(double[] sorted) {
        return sorted.length == 0 ? "–" : String.format(Locale.ROOT, "%.2f× (%.2f–%.2f× in %d rounds)",
                median(sorted), sorted[0], sorted[sorted.length - 1], sorted.length);
    }

    private static String markdown(List<Result> results, Map<String, List<Raw>> raws, List<Latency> latencies,
            String version, int threads, double seconds, int rounds, int warmupRounds) {
        StringBuilder sb = new StringBuilder();
        sb.append("# Java lock clients on one dlock server\n\n");
        sb.append(String.format(Locale.ROOT, "Measured %s by `make bench-java` (io.dlock.bench.Bench): %s with the"
                + " dlock module on loopback, %d platform threads on one lock, %d rounds of %.1f s per row after %d"
                + " discarded warm-up round(s) of every client (the JIT compiles them first), each run after a short"
                + " warm-up; the clients take turns within a round; a row pools its rounds,"
                + " Java %s, %d cores, load average at the start %s. Ratios are against Redisson's RLock at the"
                + " same hold.%n%n",
                Instant.now().toString().substring(0, 16).replace('T', ' ') + " UTC", version, threads, rounds, seconds,
                warmupRounds, System.getProperty("java.version"), Runtime.getRuntime().availableProcessors(), LOAD));
        sb.append("| client | hold | grants/s | vs RLock | p50 wait ms | p99 wait ms | p99 vs RLock | cmds/grant"
                + " | Jain | errors |\n");
        sb.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
        for (Result r : results) {
            Result base = results.stream().filter(x -> x.contender.equals("Redisson RLock") && x.holdMs == r.holdMs)
                    .findFirst().orElse(null);
            sb.append(String.format(Locale.ROOT, "| %s | %d ms | %.0f | %s | %.2f | %.2f | %s | %.2f | %.4f | %d |%n",
                    r.contender, r.holdMs, r.grantsPerSecond(),
                    base == null ? "–" : ratio(r.grantsPerSecond(), base.grantsPerSecond()), r.p50Nanos / 1e6,
                    r.p99Nanos / 1e6, base == null ? "–" : ratio(r.p99Nanos, base.p99Nanos), r.commandsPerGrant,
                    r.jain, r.errors));
        }
        sb.append("\nCommands per grant by command (INFO commandstats delta / grants; commands that Lua scripts"
                + " call count too):\n\n");
        for (Result r : results) {
            sb.append(String.format(Locale.ROOT, "- %s, %d ms: %s%n", r.contender, r.holdMs, r.topCommands));
        }
        sb.append("\nWhat a grant costs each process (CPU time and context switches of all its threads, from"
                + " /proc, over the measured runs / grants; the client process runs the 64 threads and the"
                + " library's own):\n\n");
        sb.append("| client | hold | client CPU µs | server CPU µs | client switches | server switches |\n");
        sb.append("|---|---:|---:|---:|---:|---:|\n");
        for (Result r : results) {
            sb.append(String.format(Locale.ROOT, "| %s | %d ms | %s |%n", r.contender, r.holdMs, r.costs()));
        }
        sb.append("\nUncontended acquire+release (one thread, one lock):\n\n");
        sb.append("| client | p50 ms | p99 ms | cmds/op |\n|---|---:|---:|---:|\n");
        for (Latency l : latencies) {
            sb.append(String.format(Locale.ROOT, "| %s | %.3f | %.3f | %.2f |%n", l.contender, l.p50Nanos / 1e6,
                    l.p99Nanos / 1e6, l.commandsPerOp));
        }
        sb.append("\nGoals (vs Redisson RLock): at 0 ms hold ≥ 2× grants/s, p99 wait ≤ 0.1×, Jain ≥ 0.99; at 1 ms"
                + " hold ≥ 1× grants/s. Grants/s are judged on the median of the per-round ratios (each round runs"
                + " both clients within seconds of each other); the pooled ratio of the table is given too. The"
                + " floor is the same library's BLPOP/RPUSH token handoff (`Floor.java`): what a FIFO lock over"
                + " that library can at best do.\n\n");
        for (String who : List.of("dlock Jedis", "dlock Lettuce")) {
            StringBuilder g = new StringBuilder();
            for (Result r : results) {
                if (!r.contender.equals(who)) {
                    continue;
                }
                Result base = results.stream().filter(x -> x.contender.equals("Redisson RLock")
                        && x.holdMs == r.holdMs).findFirst().orElse(null);
                if (base == null) {
                    continue;
                }
                double pooled = r.grantsPerSecond() / base.grantsPerSecond();
                double[] ratios = perRound(raws, who, "Redisson RLock", r.holdMs);
                double gr = ratios.length == 0 ? pooled : median(ratios);
                String grants = String.format(Locale.ROOT, "grants/s %s, pooled %.2f×", spread(ratios), pooled);
                if (r.holdMs == 0) {
                    double pr = base.p99Nanos == 0 ? Double.NaN : (double) r.p99Nanos / base.p99Nanos;
                    g.append(String.format(Locale.ROOT, "0 ms: %s (%s), p99 wait %.3f× (%s), Jain %.4f (%s); ",
                            grants, gr >= 2 ? "met" : "missed", pr, pr <= 0.1 ? "met" : "missed", r.jain,
                            r.jain >= 0.99 ? "met" : "missed"));
                } else {
                    g.append(String.format(Locale.ROOT, "%d ms: %s (%s); ", r.holdMs, grants,
                            gr >= 1 ? "met" : "missed"));
                }
            }
            if (g.length() > 0) {
                sb.append("- ").append(who).append(": ").append(g.substring(0, g.length() - 2)).append('\n');
            }
            String floor = who.substring("dlock ".length()) + " BLPOP floor";
            StringBuilder f = new StringBuilder();
            for (Result r : results) {
                if (!r.contender.equals(floor)) {
                    continue;
                }
                double[] vsBase = perRound(raws, floor, "Redisson RLock", r.holdMs);
                double need = r.holdMs == 0 ? 2 : 1;
                f.append(String.format(Locale.ROOT, "%d ms: floor %s of RLock%s, dlock %s of the floor; ", r.holdMs,
                        spread(vsBase), vsBase.length > 0 && median(vsBase) < need
                                ? String.format(Locale.ROOT, " (below the %.0f× goal: no FIFO lock over this library"
                                        + " meets it here)", need) : "",
                        spread(perRound(raws, who, floor, r.holdMs))));
            }
            if (f.length() > 0) {
                sb.append("  - ").append(floor).append(": ").append(f.substring(0, f.length() - 2)).append('\n');
            }
        }
        return sb.toString();
    }
}
