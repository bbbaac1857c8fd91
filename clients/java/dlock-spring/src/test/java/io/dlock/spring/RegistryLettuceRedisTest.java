package io.dlock.spring;

import io.dlock.spi.Transport;
import io.dlock.testing.RedisServer;

/** The registry contract on lettuce, against RedisServer.redisBinary() (skipped when unset). */
class RegistryLettuceRedisTest extends RegistryContract {
    @Override
    protected Transport transport(String host, int port) {
        return io.dlock.lettuce.LettuceTransport.of(io.lettuce.core.RedisClient.create(io.lettuce.core.RedisURI.create(host, port)), true);
    }
}
