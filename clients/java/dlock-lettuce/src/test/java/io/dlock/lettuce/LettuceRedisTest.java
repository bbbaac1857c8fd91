package io.dlock.lettuce;

import io.dlock.spi.Transport;
import io.dlock.testing.LockContract;
import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisURI;

/** The lock contract on a Lettuce {@code RedisClient}, against REDIS_SERVER. */
class LettuceRedisTest extends LockContract {
    @Override
    protected Transport transport(String host, int port) {
        return LettuceTransport.of(RedisClient.create(RedisURI.create(host, port)), true);
    }
}
