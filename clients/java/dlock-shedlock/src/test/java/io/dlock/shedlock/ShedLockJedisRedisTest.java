package io.dlock.shedlock;

import io.dlock.Dlock;
import io.dlock.testing.RedisServer;
import io.dlock.jedis.DlockJedis;
import redis.clients.jedis.RedisClient;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;

/** ShedLock's provider suite on Jedis, against REDIS_SERVER. */
class ShedLockJedisRedisTest extends ShedLockSuite {
    private static RedisServer server;
    private static Dlock client;


    @BeforeAll
    static void start() {
        String bin = RedisServer.redisBinary();
        Assumptions.assumeTrue(bin != null, "REDIS_SERVER unset");
        server = start(bin);
        client = DlockJedis.create(RedisClient.create(server.host(), server.port()));
    }

    @AfterAll
    static void stop() {
        if (client != null) {
            client.close();
            ((io.dlock.jedis.JedisTransport) client.getTransport()).jedis().close();
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
