package io.dlock.spring.boot;

import io.dlock.spi.Transport;
import org.springframework.data.redis.connection.RedisConnectionFactory;

/**
 * The dlock transport for an application's Spring Data Redis connection factory, on the
 * factory's own settings. Each client library is handled by a class of its own, loaded only
 * when the factory is of that library, so neither needs the other on the classpath.
 */
final class RedisTransports {
    static final String LETTUCE_FACTORY = "org.springframework.data.redis.connection.lettuce.LettuceConnectionFactory";
    static final String JEDIS_FACTORY = "org.springframework.data.redis.connection.jedis.JedisConnectionFactory";

    private RedisTransports() {
    }

    /**
     * A transport on {@code factory}'s server, credentials, database, TLS and timeouts.
     *
     * @throws IllegalStateException for a factory that is neither Lettuce's nor Jedis', or a
     *     setup the starter cannot follow (the message says what to do instead)
     */
    static Transport of(RedisConnectionFactory factory) {
        if (isA(factory, LETTUCE_FACTORY)) {
            return LettuceTransports.of(factory);
        }
        if (isA(factory, JEDIS_FACTORY)) {
            return JedisTransports.of(factory);
        }
        throw new IllegalStateException("dlock's starter builds its client on Spring Data Redis'"
                + " LettuceConnectionFactory or JedisConnectionFactory, but the RedisConnectionFactory bean is a "
                + factory.getClass().getName() + ": define a Dlock bean yourself (DlockLettuce.create(...) or"
                + " DlockJedis.create(...)) and the starter uses it");
    }

    /** Whether {@code o}'s class or a superclass is named {@code className} (without loading that class). */
    static boolean isA(Object o, String className) {
        for (Class<?> c = o.getClass(); c != null; c = c.getSuperclass()) {
            if (c.getName().equals(className)) {
                return true;
            }
        }
        return false;
    }
}
