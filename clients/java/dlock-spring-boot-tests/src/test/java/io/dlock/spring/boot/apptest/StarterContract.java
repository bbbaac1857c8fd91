package io.dlock.spring.boot.apptest;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.dlock.DCountDownLatch;
import io.dlock.DLock;
import io.dlock.DSemaphore;
import io.dlock.Dlock;
import io.dlock.LostReason;
import io.dlock.spring.boot.DlockMeters;
import io.dlock.testing.RedisServer;
import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Timer;
import java.time.Duration;
import java.time.Instant;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.locks.Lock;
import net.javacrumbs.shedlock.core.DefaultLockingTaskExecutor;
import net.javacrumbs.shedlock.core.LockConfiguration;
import net.javacrumbs.shedlock.core.LockProvider;
import net.javacrumbs.shedlock.core.SimpleLock;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInfo;
import org.junit.jupiter.api.Timeout;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootVersion;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.ApplicationContext;
import org.springframework.integration.support.locks.LockRegistry;

/**
 * What a Spring Boot application gets from the starter with Spring Data Redis (and, where
 * named, Spring Integration, ShedLock and Actuator): a working {@link Dlock} on the app's
 * connection settings, the LockRegistry, the ShedLock provider, the meters and the health
 * indicator. Run once per client library by its subclasses, on the Boot version of the
 * module that compiles it (boot3: 3.5, boot4: 4.0).
 */
@SpringBootTest(classes = TestApp.class, properties = {
    "dlock.watchdog-lease=3s", // renewed every second: a forced release is seen within one
    "dlock.client-id=starter-app"
})
@Timeout(value = 60, unit = TimeUnit.SECONDS)
abstract class StarterContract {
    @Autowired
    ApplicationContext context;
    @Autowired
    Dlock dlock;
    @Autowired
    MeterRegistry meters;

    private final ExecutorService other = Executors.newSingleThreadExecutor();
    private String prefix;

    /** This class's server. */
    abstract RedisServer server();

    /** lettuce or jedis. */
    abstract String clientType();

    @BeforeEach
    void names(TestInfo info) {
        prefix = clientType() + ":" + info.getTestMethod().map(m -> m.getName()).orElse("t") + ":";
    }

    @AfterEach
    void stopOther() {
        other.shutdownNow();
    }

    private String key(String name) {
        return prefix + name;
    }

    @Test
    void versionsInUse() throws Exception {
        String jedis = jedisVersion();
        String lettuce = io.lettuce.core.RedisClient.class.getPackage().getImplementationVersion();
        String si = LockRegistry.class.getPackage().getImplementationVersion();
        String micrometer = MeterRegistry.class.getPackage().getImplementationVersion();
        System.out.printf("dlock starter on Spring Boot %s (%s): Jedis %s, Lettuce %s, Spring Integration %s,"
                + " Micrometer %s; transport %s%n", SpringBootVersion.getVersion(), clientType(), jedis, lettuce,
                si, micrometer, dlock.getTransport().describe());
        String transport = dlock.getTransport().getClass().getSimpleName();
        assertEquals(clientType().equals("jedis") ? "JedisTransport" : "LettuceTransport", transport);
    }

    @Test
    void theStarterShipsMetadataForItsProperties() throws Exception {
        String found = null;
        var urls = getClass().getClassLoader().getResources("META-INF/spring-configuration-metadata.json");
        while (urls.hasMoreElements()) {
            var url = urls.nextElement();
            if (url.toString().contains("dlock-spring-boot-starter")) {
                try (var in = url.openStream()) {
                    found = new String(in.readAllBytes(), java.nio.charset.StandardCharsets.UTF_8);
                }
            }
        }
        assertTrue(found != null, "no spring-configuration-metadata.json in dlock-spring-boot-starter");
        for (String property : List.of("dlock.watchdog-lease", "dlock.renew-interval", "dlock.client-id",
                "dlock.lock.bind", "dlock.registry.expire-after", "dlock.shedlock.prefix", "dlock.metrics.enabled",
                "management.health.dlock.enabled")) {
            assertTrue(found.contains("\"" + property + "\""), property + " is not in the starter's metadata");
        }
    }

    /** Jedis' version, from the pom.properties its jar carries (its manifest has none). */
    private static String jedisVersion() throws java.io.IOException {
        java.util.Properties p = new java.util.Properties();
        try (java.io.InputStream in = redis.clients.jedis.UnifiedJedis.class
                .getResourceAsStream("/META-INF/maven/redis.clients/jedis/pom.properties")) {
            if (in == null) {
                return "unknown";
            }
            p.load(in);
        }
        return p.getProperty("version", "unknown");
    }

    @Test
    void dlockFollowsTheAppsPropertiesAndConnectionSettings() throws Exception {
        assertEquals("starter-app", dlock.getId());
        assertEquals(3_000, dlock.getConfig().getLockWatchdogTimeout());
        assertEquals(2_000, dlock.getConfig().getWaitSlice(), "the app's DlockConfigCustomizer did not run");
        DLock lock = dlock.getLock(key("settings"));
        lock.lock();
        try {
            // dlock's own connections carry the app's client name and database (spring.data.redis.*)
            String clients = server().command("CLIENT LIST");
            boolean found = false;
            for (String line : clients.split("\n")) {
                if (line.contains("name=starter-" + clientType() + " ")) {
                    assertTrue(line.contains(" db=3 "), "a connection named by the app is not on its db 3: " + line);
                    found = true;
                }
            }
            assertTrue(found, "no connection named starter-" + clientType() + ":\n" + clients);
            // ... so the lock lives in db 3, not db 0
            assertTrue(lock.isLocked());
            assertTrue(server().command("EXISTS " + key("settings")).startsWith(":0"),
                    "the lock is in db 0, where the app's database is 3");
        } finally {
            lock.unlock();
        }
    }

    @Test
    void lockUnlockAndAWaitingAcquire() throws Exception {
        String name = key("mutex");
        DLock lock = dlock.getLock(name);
        lock.lock();
        assertTrue(lock.isHeldByCurrentThread());
        // another thread (another owner) waits on the server until the release
        CompletableFuture<Boolean> waiter = CompletableFuture.supplyAsync(() -> {
            DLock mine = dlock.getLock(name);
            try {
                boolean got = mine.tryLock(30, TimeUnit.SECONDS);
                if (got) {
                    mine.unlock();
                }
                return got;
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return false;
            }
        }, other);
        awaitWaiter(lock);
        assertFalse(waiter.isDone());
        lock.unlock();
        assertTrue(waiter.get(30, TimeUnit.SECONDS), "the waiting acquire was not granted after the release");
        assertFalse(lock.isLocked());
    }

    /** Until the server lists a waiter on {@code lock} (bounded: 20 s). */
    private static void awaitWaiter(DLock lock) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
        while (true) {
            Map<String, Object> info = lock.info();
            if (info != null && info.get("waiters") instanceof List<?> w && !w.isEmpty()) {
                return;
            }
            assertTrue(System.nanoTime() < deadline, "no waiter on " + lock + " within 20 s: " + info);
            Thread.sleep(5);
        }
    }

    private double timerCount(String name, String... tags) {
        Timer t = meters.find(name).tags(tags).timer();
        return t == null ? 0 : t.count();
    }

    private double counterCount(String name, String... tags) {
        Counter c = meters.find(name).tags(tags).counter();
        return c == null ? 0 : c.count();
    }

    @Test
    void metersOfEachKindAfterLockAndUnlock() throws Exception {
        assertInstanceOf(DlockMeters.class, dlock.getObserver());
        double[] before = {
            timerCount("dlock.wait", "kind", "mutex", "outcome", "acquired"),
            timerCount("dlock.hold", "kind", "mutex", "outcome", "released"),
            timerCount("dlock.wait", "kind", "mutex", "outcome", "timed_out"),
            timerCount("dlock.wait", "kind", "fair", "outcome", "acquired"),
            timerCount("dlock.hold", "kind", "rw", "outcome", "released"),
            timerCount("dlock.hold", "kind", "semaphore", "outcome", "released"),
            timerCount("dlock.wait", "kind", "latch", "outcome", "acquired"),
        };
        DLock lock = dlock.getLock(key("m"));
        lock.lock();
        Thread.sleep(20);
        // a try from another owner finds it taken
        assertFalse(other.submit(() -> dlock.getLock(key("m")).tryLock()).get(20, TimeUnit.SECONDS));
        lock.unlock();
        DLock fair = dlock.getFairLock(key("f"));
        fair.lock();
        fair.unlock();
        DLock read = dlock.getReadWriteLock(key("rw")).readLock();
        read.lock();
        read.unlock();
        DSemaphore sem = dlock.getSemaphore(key("s"), 2);
        sem.release(sem.acquire());
        DCountDownLatch latch = dlock.getCountDownLatch(key("l"));
        assertTrue(latch.trySetCount(1));
        latch.countDown();
        assertTrue(latch.await(5, TimeUnit.SECONDS));

        assertEquals(before[0] + 1, timerCount("dlock.wait", "kind", "mutex", "outcome", "acquired"));
        assertEquals(before[1] + 1, timerCount("dlock.hold", "kind", "mutex", "outcome", "released"));
        assertEquals(before[2] + 1, timerCount("dlock.wait", "kind", "mutex", "outcome", "timed_out"));
        assertEquals(before[3] + 1, timerCount("dlock.wait", "kind", "fair", "outcome", "acquired"));
        assertEquals(before[4] + 1, timerCount("dlock.hold", "kind", "rw", "outcome", "released"));
        assertEquals(before[5] + 1, timerCount("dlock.hold", "kind", "semaphore", "outcome", "released"));
        assertEquals(before[6] + 1, timerCount("dlock.wait", "kind", "latch", "outcome", "acquired"));
        Timer held = meters.find("dlock.hold").tags("kind", "mutex", "outcome", "released").timer();
        assertTrue(held != null && held.max(TimeUnit.MILLISECONDS) >= 20, "the mutex was held >= 20 ms");
    }

    @Test
    void aLostHoldIsCountedWithItsReason() throws Exception {
        String name = key("lost");
        DLock lock = dlock.getLock(name);
        lock.lock(); // the watchdog's lease (3 s here), renewed every second
        CompletableFuture<LostReason> lost = lock.lostSignal().toCompletableFuture();
        assertTrue(dlock.getLock(name).forceUnlock(), "DLOCK.FORCERELEASE did not remove the lock");
        LostReason reason = lost.get(20, TimeUnit.SECONDS);
        String tag = reason.name().toLowerCase(Locale.ROOT);
        assertEquals(1, counterCount("dlock.lost", "kind", "mutex", "reason", tag));
        assertEquals(1, timerCount("dlock.hold", "kind", "mutex", "outcome", "lost"));
        assertThrows(IllegalMonitorStateException.class, lock::unlock);
    }

    @Test
    @SuppressWarnings("rawtypes") // LockRegistry is generic on Spring Integration 7 only
    void theLockRegistry() throws Exception {
        LockRegistry registry = context.getBean(LockRegistry.class);
        boolean integration7 = hasClass("org.springframework.integration.support.locks.DistributedLock");
        // named, not linked: DlockLockRegistry is for Spring Integration 7 only
        assertEquals(integration7 ? "io.dlock.spring.DlockLockRegistry" : "io.dlock.spring.DlockLockRegistry6",
                registry.getClass().getName());
        String path = key("job");
        Lock lock = registry.obtain(path);
        lock.lock();
        try {
            assertTrue(dlock.getLock("lock-registry:" + path).isLocked(), "the registry's lock is not on the server");
            assertFalse(other.submit(() -> registry.obtain(path).tryLock()).get(20, TimeUnit.SECONDS));
        } finally {
            lock.unlock();
        }
        assertFalse(dlock.getLock("lock-registry:" + path).isLocked());
        assertTrue(other.submit(() -> {
            Lock l = registry.obtain(path);
            boolean got = l.tryLock(5, TimeUnit.SECONDS);
            if (got) {
                l.unlock();
            }
            return got;
        }).get(20, TimeUnit.SECONDS));
    }

    @Test
    void theShedLockProvider() throws Throwable {
        LockProvider provider = context.getBean(LockProvider.class);
        String name = key("report");
        LockConfiguration config = new LockConfiguration(Instant.now(), name, Duration.ofSeconds(30), Duration.ZERO);
        Optional<SimpleLock> first = provider.lock(config);
        assertTrue(first.isPresent());
        assertTrue(dlock.getLock("shedlock:" + name).isLocked());
        assertTrue(provider.lock(config).isEmpty(), "a second lock of a held ShedLock lock");
        first.get().unlock();
        AtomicInteger runs = new AtomicInteger();
        new DefaultLockingTaskExecutor(provider).executeWithLock((Runnable) runs::incrementAndGet, config);
        assertEquals(1, runs.get());
        assertFalse(dlock.getLock("shedlock:" + name).isLocked());
    }

    @Test
    void theHealthIndicatorIsUpWithTheModule() throws Exception {
        Health h = Health.of(context);
        assertEquals("UP", h.status(), h.toString());
        assertEquals("loaded", h.details().get("module"));
    }

    static boolean hasClass(String name) {
        try {
            Class.forName(name, false, StarterContract.class.getClassLoader());
            return true;
        } catch (ClassNotFoundException e) {
            return false;
        }
    }
}
