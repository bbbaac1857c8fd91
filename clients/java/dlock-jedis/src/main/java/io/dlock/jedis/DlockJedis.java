package io.dlock.jedis;

import io.dlock.Dlock;
import io.dlock.DlockConfig;
import redis.clients.jedis.UnifiedJedis;

/** Builds a {@link Dlock} client on Jedis. */
public final class DlockJedis {
    private DlockJedis() {}

    /**
     * A client over a Jedis {@link UnifiedJedis} ({@code RedisClient}, {@code RedisClusterClient},
     * {@code RedisSentinelClient}, …). Closing the client does not close {@code jedis}.
     */
    public static Dlock create(UnifiedJedis jedis) {
        return Dlock.create(new JedisTransport(jedis), new DlockConfig());
    }

    /** As {@link #create(UnifiedJedis)}, with settings. */
    public static Dlock create(UnifiedJedis jedis, DlockConfig config) {
        return Dlock.create(new JedisTransport(jedis), config);
    }
}
