package io.dlock.jedis;

import io.dlock.spi.Transport;
import io.dlock.testing.ClientContract;
import redis.clients.jedis.DefaultJedisClientConfig;
import redis.clients.jedis.RedisClient;

/** The client contract on Jedis' pooled {@code RedisClient}, against REDIS_SERVER (and Toxiproxy, when installed). */
class JedisContractTest extends ClientContract {
    @Override
    protected Transport transport(String host, int port, long replyTimeoutMs) {
        RedisClient.Builder b = RedisClient.builder();
        b.hostAndPort(host, port);
        if (replyTimeoutMs > 0) {
            b.clientConfig(DefaultJedisClientConfig.builder().timeoutMillis((int) replyTimeoutMs).build());
        }
        return new JedisTransport(b.build(), true);
    }
}
