package io.dlock.spring;

import io.dlock.spi.Transport;
import io.dlock.testing.RedisServer;

/** The registry contract on jedis, against RedisServer.redisBinary() (skipped when unset). */
class RegistryJedisRedisTest extends RegistryContract {
    @Override
    protected Transport transport(String host, int port) {
        return new io.dlock.jedis.JedisTransport(redis.clients.jedis.RedisClient.create(host, port), true);
    }
}
