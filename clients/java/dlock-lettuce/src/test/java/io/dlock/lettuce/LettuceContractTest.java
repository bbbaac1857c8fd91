package io.dlock.lettuce;

import io.dlock.spi.Transport;
import io.dlock.testing.ClientContract;
import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisURI;
import java.time.Duration;

/** The client contract on a Lettuce {@code RedisClient}, against REDIS_SERVER (and Toxiproxy, when installed). */
class LettuceContractTest extends ClientContract {
    @Override
    protected Transport transport(String host, int port, long replyTimeoutMs) {
        RedisURI uri = RedisURI.create(host, port);
        if (replyTimeoutMs > 0) {
            uri.setTimeout(Duration.ofMillis(replyTimeoutMs));
        }
        return LettuceTransport.of(RedisClient.create(uri), true);
    }
}
