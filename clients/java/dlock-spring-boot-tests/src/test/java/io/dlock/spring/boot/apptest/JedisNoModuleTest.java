package io.dlock.spring.boot.apptest;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.dlock.testing.RedisServer;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.ApplicationContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/** The health indicator on Jedis, against a server without the dlock module: DOWN, saying why. */
@SpringBootTest(classes = TestApp.class)
class JedisNoModuleTest {
    static final RedisServer SERVER = Servers.start(false);

    @Autowired
    ApplicationContext context;

    @DynamicPropertySource
    static void redis(DynamicPropertyRegistry r) {
        Servers.register(r, SERVER, "jedis");
    }

    @AfterAll
    static void stop() {
        SERVER.close();
    }

    @Test
    void theHealthIndicatorIsDownWithoutTheModule() throws Exception {
        Health h = Health.of(context);
        assertEquals("DOWN", h.status(), h.toString());
        assertEquals("not loaded", h.details().get("module"));
        assertTrue(String.valueOf(h.details().get("error")).contains("dlock module is not loaded"), h.toString());
    }
}
