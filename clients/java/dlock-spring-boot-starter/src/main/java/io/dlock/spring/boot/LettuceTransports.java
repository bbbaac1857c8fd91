package io.dlock.spring.boot;

import io.dlock.lettuce.LettuceTransport;
import io.dlock.spi.Transport;
import io.lettuce.core.AbstractRedisClient;
import io.lettuce.core.RedisClient;
import io.lettuce.core.cluster.RedisClusterClient;
import org.springframework.data.redis.connection.RedisConnectionFactory;
import org.springframework.data.redis.connection.lettuce.LettuceConnectionFactory;

/**
 * dlock on a {@link LettuceConnectionFactory}: on the factory's own Lettuce client (its URI
 * with host, port, credentials, database, TLS and command timeout; its client options and
 * client resources, so its event loops too), never on the factory's connections. dlock opens
 * connections of its own on that client: one shared by its quick commands, and dedicated ones
 * for the waits that block on the server (the factory's shared native connection carries
 * every command of the application, which a blocked {@code DLOCK.* WAIT} would stall).
 */
final class LettuceTransports {
    private LettuceTransports() {
    }

    static Transport of(RedisConnectionFactory factory) {
        LettuceConnectionFactory f = (LettuceConnectionFactory) factory;
        if (!f.isRunning()) {
            f.start(); // its client exists once started (it is started early unless told otherwise)
        }
        AbstractRedisClient client = f.getRequiredNativeClient();
        try {
            if (client instanceof RedisClusterClient cluster) {
                return LettuceTransport.of(cluster, false);
            }
            if (client instanceof RedisClient standalone) {
                return LettuceTransport.of(standalone, false);
            }
        } catch (RuntimeException e) {
            throw new IllegalStateException("dlock could not connect with the LettuceConnectionFactory's client"
                    + " (" + client.getClass().getName() + "): " + e.getMessage(), e);
        }
        throw new IllegalStateException("dlock's starter works on a LettuceConnectionFactory whose client is a"
                + " RedisClient (standalone, sentinel) or a RedisClusterClient, got " + client.getClass().getName()
                + ": define a Dlock bean yourself (DlockLettuce.create(...))");
    }
}
