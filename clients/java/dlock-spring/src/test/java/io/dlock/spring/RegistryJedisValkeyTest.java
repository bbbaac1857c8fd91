package io.dlock.spring;

import io.dlock.spi.Transport;
import io.dlock.testing.RedisServer;

/** The registry contract on jedis, against RedisServer.valkeyBinary() (skipped when unset). */
class RegistryJedisValkeyTest extends RegistryContract {
    @Override
    protected String serverBinary() {
        return RedisServer.valkeyBinary();
    }

    @Override
    protected Transport transport(String host, int port) {
        return new io.dlock.jedis.JedisTransport(redis.clients.jedis.RedisClient.create(host, port), true);
    }
}
