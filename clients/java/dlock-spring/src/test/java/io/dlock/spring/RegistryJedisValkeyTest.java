package io.dlock.spring;

import io.dlock.testing.RedisServer;

/** The registry contract on jedis (as {@link RegistryJedisRedisTest}), against VALKEY_SERVER (skipped when unset). */
class RegistryJedisValkeyTest extends RegistryJedisRedisTest {
    @Override
    protected String serverBinary() {
        return RedisServer.valkeyBinary();
    }
}
