package io.dlock.shedlock;

import io.dlock.Dlock;
import io.dlock.testing.RedisServer;
import io.dlock.lettuce.DlockLettuce;
import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisURI;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;

/** ShedLock's provider suite on Lettuce, against REDIS_SERVER. */
class ShedLockLettuceRedisTest extends ShedLockSuite {
    private static RedisServer server;
    private static Dlock client;
    private static RedisClient lettuce;

    @BeforeAll
    static void start() {
        String bin = RedisServer.redisBinary();
        Assumptions.assumeTrue(bin != null, "REDIS_SERVER unset");
        server = start(bin);
        client = DlockLettuce.create(lettuce = RedisClient.create(RedisURI.create(server.host(), server.port())));
    }

    @AfterAll
    static void stop() {
        if (client != null) {
            client.close();
            lettuce.shutdown();
        }
        if (server != null) {
            server.close();
        }
    }

    @Override
    protected Dlock client() {
        return client;
    }
}
