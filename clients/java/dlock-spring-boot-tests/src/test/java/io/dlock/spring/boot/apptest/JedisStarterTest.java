package io.dlock.spring.boot.apptest;

import io.dlock.testing.RedisServer;
import org.junit.jupiter.api.AfterAll;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/** The starter on Spring Data Redis' JedisConnectionFactory. */
class JedisStarterTest extends StarterContract {
    static final RedisServer SERVER = Servers.start(true);

    @DynamicPropertySource
    static void redis(DynamicPropertyRegistry r) {
        Servers.register(r, SERVER, "jedis");
    }

    @AfterAll
    static void stop() {
        SERVER.close();
    }

    @Override
    RedisServer server() {
        return SERVER;
    }

    @Override
    String clientType() {
        return "jedis";
    }
}
