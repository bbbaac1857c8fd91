package io.dlock.jedis;

import io.dlock.spi.Transport;
import io.dlock.testing.LockContract;
import io.dlock.testing.RedisServer;
import redis.clients.jedis.RedisClient;

/** The lock contract on Jedis' pooled {@code RedisClient}, against REDIS_SERVER. */
class JedisRedisTest extends LockContract {
    @Override
    protected String serverBinary() {
        return RedisServer.redisBinary();
    }

    @Override
    protected Transport transport(String host, int port) {
        return new JedisTransport(RedisClient.create(host, port), true);
    }
}
