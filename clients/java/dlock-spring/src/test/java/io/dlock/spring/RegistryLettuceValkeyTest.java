package io.dlock.spring;

import io.dlock.testing.RedisServer;

/** The registry contract on lettuce (as {@link RegistryLettuceRedisTest}), against VALKEY_SERVER (skipped when unset). */
class RegistryLettuceValkeyTest extends RegistryLettuceRedisTest {
    @Override
    protected String serverBinary() {
        return RedisServer.valkeyBinary();
    }
}
