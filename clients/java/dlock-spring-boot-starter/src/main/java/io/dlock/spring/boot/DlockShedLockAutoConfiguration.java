package io.dlock.spring.boot;

import io.dlock.Dlock;
import io.dlock.shedlock.DlockLockProvider;
import org.springframework.boot.autoconfigure.AutoConfiguration;
import org.springframework.boot.autoconfigure.condition.ConditionalOnBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnClass;
import org.springframework.boot.autoconfigure.condition.ConditionalOnMissingBean;
import org.springframework.boot.context.properties.EnableConfigurationProperties;
import org.springframework.context.annotation.Bean;

/**
 * A ShedLock {@code LockProvider} on the {@link Dlock} client (for {@code @SchedulerLock}),
 * when shedlock-core is present and the application has no {@code LockProvider} of its own.
 */
@AutoConfiguration(after = DlockAutoConfiguration.class)
@ConditionalOnClass(name = DlockShedLockAutoConfiguration.LOCK_PROVIDER)
@ConditionalOnBean(Dlock.class)
@EnableConfigurationProperties(DlockProperties.class)
public class DlockShedLockAutoConfiguration {
    static final String LOCK_PROVIDER = "net.javacrumbs.shedlock.core.LockProvider";

    @Bean
    @ConditionalOnMissingBean(type = LOCK_PROVIDER)
    DlockLockProvider dlockLockProvider(Dlock dlock, DlockProperties properties) {
        return new DlockLockProvider(dlock, properties.getShedlock().getPrefix());
    }
}
