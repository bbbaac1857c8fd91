package io.dlock.jedis;

import io.dlock.spi.Transport;
import io.dlock.testing.LockContract;
import java.util.Set;
import redis.clients.jedis.HostAndPort;
import redis.clients.jedis.RedisClusterClient;

/** The lock contract on Jedis' {@code RedisClusterClient}, against a one-node cluster of REDIS_SERVER. */
class JedisClusterTest extends LockContract {
    @Override
    protected boolean cluster() {
        return true;
    }

    @Override
    protected Transport transport(String host, int port) {
        return new JedisTransport(RedisClusterClient.create(Set.of(new HostAndPort(host, port))), true);
    }

    /** Durable grants are not available on Jedis' cluster client (documented); not run here. */
    @Override
    protected void durableGrantWithoutReplicasIsRefusedAndReleased() {
    }
}
