package io.dlock.spring.boot;

import io.dlock.Dlock;
import io.dlock.DlockConfig;
import io.dlock.LockOptions;
import java.time.Duration;
import org.springframework.beans.factory.ObjectProvider;
import org.springframework.boot.autoconfigure.AutoConfiguration;
import org.springframework.boot.autoconfigure.condition.ConditionalOnBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnClass;
import org.springframework.boot.autoconfigure.condition.ConditionalOnMissingBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnProperty;
import org.springframework.boot.context.properties.EnableConfigurationProperties;
import org.springframework.context.annotation.Bean;
import org.springframework.data.redis.connection.RedisConnectionFactory;

/**
 * The {@link Dlock} client on the application's Spring Data Redis
 * {@link RedisConnectionFactory} (Lettuce or Jedis), with the {@code dlock.*} properties and
 * any {@link DlockConfigCustomizer} beans. Backs off when the application defines its own
 * {@code Dlock} bean, which the other dlock auto-configurations then use.
 */
@AutoConfiguration(afterName = {
        "org.springframework.boot.autoconfigure.data.redis.RedisAutoConfiguration", // Boot 3
        "org.springframework.boot.data.redis.autoconfigure.DataRedisAutoConfiguration" // Boot 4
})
@ConditionalOnClass({Dlock.class, RedisConnectionFactory.class})
@ConditionalOnProperty(prefix = "dlock", name = "enabled", havingValue = "true", matchIfMissing = true)
@EnableConfigurationProperties(DlockProperties.class)
public class DlockAutoConfiguration {

    /** The client; closed with the context (before the connection factory it runs on). */
    @Bean(destroyMethod = "close")
    @ConditionalOnMissingBean
    @ConditionalOnBean(RedisConnectionFactory.class)
    public Dlock dlock(RedisConnectionFactory redisConnectionFactory, DlockProperties properties,
            ObjectProvider<DlockConfigCustomizer> customizers) {
        DlockConfig config = config(properties);
        customizers.orderedStream().forEach(c -> c.customize(config));
        return Dlock.create(RedisTransports.of(redisConnectionFactory), config);
    }

    /** The client's settings from the properties (an unset one keeps the client's default). */
    static DlockConfig config(DlockProperties p) {
        DlockConfig c = new DlockConfig();
        if (p.getWatchdogLease() != null) {
            c.setLockWatchdogTimeout(p.getWatchdogLease().toMillis());
        }
        if (p.getRenewInterval() != null) {
            c.setRenewInterval(p.getRenewInterval().toMillis());
        }
        if (p.getWaitSlice() != null) {
            c.setWaitSlice(p.getWaitSlice().toMillis());
        }
        if (p.getDurableWaitSlice() != null) {
            c.setDurableWaitSlice(p.getDurableWaitSlice().toMillis());
        }
        if (p.getClientId() != null) {
            c.setClientId(p.getClientId());
        }
        DlockProperties.Lock l = p.getLock();
        LockOptions options = LockOptions.DEFAULT.withBind(l.isBind()).withLockDelay(millis(l.getLockDelay()));
        if (l.getReplicas() > 0) {
            options = options.withReplicas(l.getReplicas(), millis(l.getReplicasTimeout()));
        }
        return c.setLockOptions(options);
    }

    private static long millis(Duration d) {
        return d == null ? 0 : d.toMillis();
    }
}
