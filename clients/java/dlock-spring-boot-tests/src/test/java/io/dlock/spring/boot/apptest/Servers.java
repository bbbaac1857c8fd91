package io.dlock.spring.boot.apptest;

import io.dlock.testing.RedisServer;
import java.io.IOException;
import java.io.UncheckedIOException;
import org.springframework.test.context.DynamicPropertyRegistry;

/** Starting the test classes' servers (through the Java client's harness) and pointing the app at them. */
final class Servers {
    private Servers() {
    }

    /** redis-server (REDIS_SERVER) on a free port, with the dlock module or without it. */
    static RedisServer start(boolean withModule) {
        try {
            String bin = RedisServer.redisBinary();
            return withModule ? RedisServer.start(bin) : RedisServer.startWithoutModule(bin);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        }
    }

    /** Spring Data Redis' properties: the server, the client library, a database and a client name to check. */
    static void register(DynamicPropertyRegistry r, RedisServer server, String clientType) {
        r.add("spring.data.redis.host", server::host);
        r.add("spring.data.redis.port", server::port);
        r.add("spring.data.redis.client-type", () -> clientType);
        r.add("spring.data.redis.database", () -> 3);
        r.add("spring.data.redis.client-name", () -> "starter-" + clientType);
    }
}
