package io.dlock.lettuce;

import io.dlock.testing.RedisServer;

/** The lock contract on a Lettuce {@code RedisClient} (as {@link LettuceRedisTest}), against VALKEY_SERVER (skipped when unset). */
class LettuceValkeyTest extends LettuceRedisTest {
    @Override
    protected String serverBinary() {
        return RedisServer.valkeyBinary();
    }
}
