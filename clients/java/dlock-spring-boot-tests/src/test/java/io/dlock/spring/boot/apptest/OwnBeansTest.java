package io.dlock.spring.boot.apptest;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.dlock.Dlock;
import io.dlock.DlockConfig;
import io.dlock.lettuce.LettuceTransport;
import io.dlock.spring.boot.DlockMeters;
import io.dlock.testing.RedisServer;
import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisURI;
import java.time.Duration;
import java.time.Instant;
import java.util.Optional;
import java.util.concurrent.locks.Lock;
import net.javacrumbs.shedlock.core.LockConfiguration;
import net.javacrumbs.shedlock.core.LockProvider;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.context.TestConfiguration;
import org.springframework.context.ApplicationContext;
import org.springframework.context.annotation.Bean;
import org.springframework.integration.support.locks.LockRegistry;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * An application that defines its own {@code Dlock} and ShedLock {@code LockProvider}: the
 * starter backs off from both, and builds the rest (registry, meters) on the app's Dlock.
 */
@SpringBootTest(classes = {TestApp.class, OwnBeansTest.Own.class})
class OwnBeansTest {
    static final RedisServer SERVER = Servers.start(true);

    @Autowired
    ApplicationContext context;

    @DynamicPropertySource
    static void redis(DynamicPropertyRegistry r) {
        Servers.register(r, SERVER, "lettuce");
    }

    @AfterAll
    static void stop() {
        SERVER.close();
    }

    @TestConfiguration(proxyBeanMethods = false)
    static class Own {
        @Bean(destroyMethod = "close")
        Dlock appsOwnDlock() {
            RedisClient client = RedisClient.create(RedisURI.create(SERVER.host(), SERVER.port()));
            return Dlock.create(LettuceTransport.of(client, true), new DlockConfig().setClientId("apps-own"));
        }

        @Bean
        LockProvider appsOwnProvider() {
            return config -> Optional.empty();
        }
    }

    @Test
    @SuppressWarnings("rawtypes") // LockRegistry is generic on Spring Integration 7 only
    void theStarterBacksOffAndBuildsOnTheAppsBeans() throws Exception {
        assertEquals(1, context.getBeansOfType(Dlock.class).size());
        Dlock dlock = context.getBean(Dlock.class);
        assertEquals("apps-own", dlock.getId());
        LockProvider provider = context.getBean(LockProvider.class);
        assertSame(context.getBean("appsOwnProvider"), provider);
        assertTrue(provider.lock(new LockConfiguration(Instant.now(), "x", Duration.ofSeconds(5), Duration.ZERO))
                .isEmpty());
        // the registry and the meters are the starter's, on the app's Dlock
        Lock lock = context.getBean(LockRegistry.class).obtain("own");
        lock.lock();
        try {
            assertTrue(dlock.getLock("lock-registry:own").isLocked());
        } finally {
            lock.unlock();
        }
        assertFalse(dlock.getLock("lock-registry:own").isLocked());
        assertInstanceOf(DlockMeters.class, dlock.getObserver());
    }
}
