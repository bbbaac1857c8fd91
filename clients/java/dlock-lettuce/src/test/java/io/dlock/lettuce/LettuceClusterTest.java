package io.dlock.lettuce;

import io.dlock.spi.Transport;
import io.dlock.testing.LockContract;
import io.lettuce.core.RedisURI;
import io.lettuce.core.cluster.RedisClusterClient;

/** The lock contract on a Lettuce {@code RedisClusterClient}, against a one-node cluster of REDIS_SERVER. */
class LettuceClusterTest extends LockContract {
    @Override
    protected boolean cluster() {
        return true;
    }

    @Override
    protected Transport transport(String host, int port) {
        return LettuceTransport.of(RedisClusterClient.create(RedisURI.create(host, port)), true);
    }
}
