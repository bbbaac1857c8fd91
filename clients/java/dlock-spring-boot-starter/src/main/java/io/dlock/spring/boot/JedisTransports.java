package io.dlock.spring.boot;

import io.dlock.jedis.JedisTransport;
import io.dlock.spi.Transport;
import java.lang.reflect.InvocationTargetException;
import java.time.Duration;
import java.util.LinkedHashSet;
import java.util.Set;
import org.apache.commons.pool2.impl.GenericObjectPoolConfig;
import org.springframework.data.redis.connection.RedisClusterConfiguration;
import org.springframework.data.redis.connection.RedisConnectionFactory;
import org.springframework.data.redis.connection.RedisNode;
import org.springframework.data.redis.connection.RedisPassword;
import org.springframework.data.redis.connection.RedisStandaloneConfiguration;
import org.springframework.data.redis.connection.jedis.JedisClientConfiguration;
import org.springframework.data.redis.connection.jedis.JedisConnectionFactory;
import redis.clients.jedis.Connection;
import redis.clients.jedis.ConnectionPoolConfig;
import redis.clients.jedis.DefaultJedisClientConfig;
import redis.clients.jedis.HostAndPort;
import redis.clients.jedis.JedisClientConfig;
import redis.clients.jedis.JedisCluster;
import redis.clients.jedis.RedisClient;
import redis.clients.jedis.UnifiedJedis;

/**
 * dlock on a {@link JedisConnectionFactory}. Spring Data Redis keeps its Jedis pool to itself
 * (and it is a pool of {@code Jedis}, not the {@code UnifiedJedis} dlock runs on), so dlock
 * gets a pooled client of its own built from the factory's settings: host and port (or the
 * cluster's nodes), username, password, database, client name, TLS (socket factory,
 * parameters, hostname verifier), connect and read timeouts, the factory's
 * {@code JedisClientConfigBuilderCustomizer}, and its pool settings. Its waits then hold
 * connections of that pool, never the application's.
 *
 * <p>On Jedis 8 the pooled client is {@code RedisClient}; Jedis 6 and 7 (those Spring Boot
 * 3.5 and 4.0 manage) have {@code JedisPooled} instead, reached by reflection since this
 * class is compiled against Jedis 8.
 */
final class JedisTransports {
    private JedisTransports() {
    }

    @SuppressWarnings("deprecation") // JedisCluster: the one cluster client of every Jedis from 6 to 8
    static Transport of(RedisConnectionFactory factory) {
        JedisConnectionFactory f = (JedisConnectionFactory) factory;
        JedisClientConfiguration cc = f.getClientConfiguration();
        GenericObjectPoolConfig<Connection> pool = poolConfig(cc);
        if (f.isRedisSentinelAware()) {
            throw new IllegalStateException("dlock's starter does not follow a JedisConnectionFactory on Redis"
                    + " Sentinel yet: define a Dlock bean yourself, DlockJedis.create(new RedisSentinelClient(...))"
                    + " (Jedis 8) or DlockJedis.create(new JedisSentineled(...)) (Jedis 6, 7), or use Lettuce,"
                    + " whose sentinel setup the starter follows");
        }
        if (f.isRedisClusterAware()) {
            RedisClusterConfiguration c = f.getClusterConfiguration();
            Set<HostAndPort> nodes = new LinkedHashSet<>();
            for (RedisNode n : c.getClusterNodes()) {
                nodes.add(new HostAndPort(n.getHost(), n.getPort() == null ? 6379 : n.getPort()));
            }
            int attempts = c.getMaxRedirects() == null ? 5 : Math.max(1, c.getMaxRedirects());
            JedisClientConfig config = clientConfig(cc, 0, c.getUsername(), c.getPassword());
            return new JedisTransport(new JedisCluster(nodes, config, attempts, pool), true);
        }
        RedisStandaloneConfiguration s = f.getStandaloneConfiguration();
        JedisClientConfig config = clientConfig(cc, s.getDatabase(), s.getUsername(), s.getPassword());
        return new JedisTransport(pooled(new HostAndPort(s.getHostName(), s.getPort()), config, pool), true);
    }

    /** The factory's pool settings (Jedis' defaults when it has none): dlock's own pool is sized alike. */
    @SuppressWarnings("unchecked") // Spring Data Redis declares the raw GenericObjectPoolConfig
    private static GenericObjectPoolConfig<Connection> poolConfig(JedisClientConfiguration cc) {
        ConnectionPoolConfig pool = new ConnectionPoolConfig();
        if (cc.isUsePooling() && cc.getPoolConfig().isPresent()) {
            GenericObjectPoolConfig<Connection> app = cc.getPoolConfig().get();
            pool.setMaxTotal(app.getMaxTotal());
            pool.setMaxIdle(app.getMaxIdle());
            pool.setMinIdle(app.getMinIdle());
            pool.setMaxWait(app.getMaxWaitDuration());
        }
        return pool;
    }

    /** The client settings Spring Data Redis gives its own connections, as Jedis' client config. */
    @SuppressWarnings("deprecation") // ssl(...), sslSocketFactory(...): what Spring Data Redis has, in Jedis 6 to 8
    private static JedisClientConfig clientConfig(JedisClientConfiguration cc, int database, String username,
            RedisPassword password) {
        DefaultJedisClientConfig.Builder b = DefaultJedisClientConfig.builder()
                .connectionTimeoutMillis(millis(cc.getConnectTimeout()))
                .socketTimeoutMillis(millis(cc.getReadTimeout()))
                .database(database);
        cc.getClientName().ifPresent(b::clientName);
        if (username != null) {
            b.user(username);
        }
        if (password != null && password.isPresent()) {
            b.password(new String(password.get()));
        }
        if (cc.isUseSsl()) {
            b.ssl(true);
            cc.getSslSocketFactory().ifPresent(b::sslSocketFactory);
            cc.getSslParameters().ifPresent(b::sslParameters);
            cc.getHostnameVerifier().ifPresent(b::hostnameVerifier);
        }
        cc.getCustomizer().ifPresent(c -> c.customize(b));
        return b.build();
    }

    private static int millis(Duration d) {
        return d == null ? 2_000 : (int) Math.min(Integer.MAX_VALUE, Math.max(0, d.toMillis()));
    }

    /** A pooled standalone client: {@code RedisClient} on Jedis 8, else {@code JedisPooled}. */
    private static UnifiedJedis pooled(HostAndPort hp, JedisClientConfig config, GenericObjectPoolConfig<Connection> pool) {
        ClassLoader loader = JedisTransports.class.getClassLoader();
        try {
            Class.forName("redis.clients.jedis.RedisClient", false, loader);
            return Jedis8.pooled(hp, config, pool);
        } catch (ClassNotFoundException jedis6or7) {
            try {
                return (UnifiedJedis) Class.forName("redis.clients.jedis.JedisPooled", true, loader)
                        .getConstructor(HostAndPort.class, JedisClientConfig.class, GenericObjectPoolConfig.class)
                        .newInstance(hp, config, pool);
            } catch (ClassNotFoundException | NoSuchMethodException | InstantiationException
                    | IllegalAccessException e) {
                throw new IllegalStateException("this Jedis has neither redis.clients.jedis.RedisClient (Jedis 8)"
                        + " nor JedisPooled(HostAndPort, JedisClientConfig, GenericObjectPoolConfig) (Jedis 5 to 7):"
                        + " dlock's starter runs on Jedis 6, 7 and 8", e);
            } catch (InvocationTargetException e) {
                throw new IllegalStateException("JedisPooled to " + hp + " could not be created: "
                        + e.getCause(), e.getCause());
            }
        }
    }

    /** Loaded only on Jedis 8, which has {@link RedisClient}. */
    private static final class Jedis8 {
        static UnifiedJedis pooled(HostAndPort hp, JedisClientConfig config, GenericObjectPoolConfig<Connection> pool) {
            return RedisClient.builder().hostAndPort(hp).clientConfig(config).poolConfig(pool).build();
        }
    }
}
