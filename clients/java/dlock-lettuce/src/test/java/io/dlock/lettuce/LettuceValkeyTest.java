package io.dlock.lettuce;

import io.dlock.spi.Transport;
import io.dlock.testing.LockContract;
import io.dlock.testing.RedisServer;
import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisURI;

/** The lock contract on a Lettuce {@code RedisClient}, against VALKEY_SERVER (skipped when unset). */
class LettuceValkeyTest extends LockContract {
    @Override
    protected String serverBinary() {
        return RedisServer.valkeyBinary();
    }

    @Override
    protected Transport transport(String host, int port) {
        return LettuceTransport.of(RedisClient.create(RedisURI.create(host, port)), true);
    }
}
