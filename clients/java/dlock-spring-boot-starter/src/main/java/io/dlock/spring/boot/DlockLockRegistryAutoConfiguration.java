package io.dlock.spring.boot;

import io.dlock.Dlock;
import io.dlock.spring.DlockLockRegistry;
import io.dlock.spring.DlockLockRegistry6;
import org.springframework.boot.autoconfigure.AutoConfiguration;
import org.springframework.boot.autoconfigure.condition.ConditionalOnBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnClass;
import org.springframework.boot.autoconfigure.condition.ConditionalOnMissingBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnMissingClass;
import org.springframework.boot.context.properties.EnableConfigurationProperties;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.context.annotation.Import;

/**
 * A Spring Integration {@code LockRegistry} on the {@link Dlock} client, when
 * spring-integration-core is present and the application has no {@code LockRegistry} of its
 * own: {@link DlockLockRegistry} on Spring Integration 7 (Boot 4), {@link DlockLockRegistry6}
 * on Spring Integration 6 (Boot 3.5), whose registry interfaces differ.
 */
@AutoConfiguration(after = DlockAutoConfiguration.class)
@ConditionalOnClass(name = DlockLockRegistryAutoConfiguration.LOCK_REGISTRY)
@ConditionalOnBean(Dlock.class)
@EnableConfigurationProperties(DlockProperties.class)
@Import({DlockLockRegistryAutoConfiguration.Integration7.class, DlockLockRegistryAutoConfiguration.Integration6.class})
public class DlockLockRegistryAutoConfiguration {
    static final String LOCK_REGISTRY = "org.springframework.integration.support.locks.LockRegistry";
    static final String DISTRIBUTED_LOCK = "org.springframework.integration.support.locks.DistributedLock";

    /** Spring Integration 7: it has {@code DistributedLock}. */
    @Configuration(proxyBeanMethods = false)
    @ConditionalOnClass(name = DISTRIBUTED_LOCK)
    static class Integration7 {
        @Bean(destroyMethod = "destroy")
        @ConditionalOnMissingBean(type = LOCK_REGISTRY)
        DlockLockRegistry dlockLockRegistry(Dlock dlock, DlockProperties properties) {
            DlockProperties.Registry r = properties.getRegistry();
            return new DlockLockRegistry(dlock, r.getRegistryKey(), r.getExpireAfter());
        }
    }

    /** Spring Integration 6: no {@code DistributedLock}, registries not generic. */
    @Configuration(proxyBeanMethods = false)
    @ConditionalOnMissingClass(DISTRIBUTED_LOCK)
    static class Integration6 {
        @Bean(destroyMethod = "destroy")
        @ConditionalOnMissingBean(type = LOCK_REGISTRY)
        DlockLockRegistry6 dlockLockRegistry(Dlock dlock, DlockProperties properties) {
            DlockProperties.Registry r = properties.getRegistry();
            return new DlockLockRegistry6(dlock, r.getRegistryKey(), r.getExpireAfter());
        }
    }
}
