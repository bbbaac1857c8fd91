package io.dlock.lettuce;

import io.dlock.Dlock;
import io.dlock.DlockConfig;
import io.lettuce.core.RedisClient;
import io.lettuce.core.cluster.RedisClusterClient;

/** Builds a {@link Dlock} client on Lettuce. Closing the Dlock does not shut the Lettuce client down. */
public final class DlockLettuce {
    private DlockLettuce() {}

    /** A client over a standalone or sentinel (a {@code redis-sentinel://} URI) {@link RedisClient}. */
    public static Dlock create(RedisClient client) {
        return Dlock.create(LettuceTransport.of(client, false), new DlockConfig());
    }

    /** As {@link #create(RedisClient)}, with settings. */
    public static Dlock create(RedisClient client, DlockConfig config) {
        return Dlock.create(LettuceTransport.of(client, false), config);
    }

    /** A client over a {@link RedisClusterClient}. */
    public static Dlock create(RedisClusterClient client) {
        return Dlock.create(LettuceTransport.of(client, false), new DlockConfig());
    }

    /** As {@link #create(RedisClusterClient)}, with settings. */
    public static Dlock create(RedisClusterClient client, DlockConfig config) {
        return Dlock.create(LettuceTransport.of(client, false), config);
    }
}
