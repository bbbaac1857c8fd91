package io.dlock.spring.boot;

import io.dlock.Dlock;
import org.springframework.boot.autoconfigure.AutoConfiguration;
import org.springframework.boot.autoconfigure.condition.ConditionalOnBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnClass;
import org.springframework.boot.autoconfigure.condition.ConditionalOnMissingBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnProperty;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.context.annotation.Import;

/**
 * The {@code dlock} health indicator (bean {@code dlockHealthIndicator}) when Spring Boot's
 * health API is present (spring-boot-starter-actuator): Boot 4's
 * {@code org.springframework.boot.health.contributor} or Boot 3's
 * {@code org.springframework.boot.actuate.health}. Off with
 * {@code management.health.dlock.enabled=false}.
 */
@AutoConfiguration(after = DlockAutoConfiguration.class)
@ConditionalOnBean(Dlock.class)
@ConditionalOnProperty(prefix = "management.health.dlock", name = "enabled", havingValue = "true",
        matchIfMissing = true)
@Import({DlockHealthAutoConfiguration.Boot4.class, DlockHealthAutoConfiguration.Boot3.class})
public class DlockHealthAutoConfiguration {
    static final String BOOT4_INDICATOR = "org.springframework.boot.health.contributor.HealthIndicator";
    static final String BOOT3_INDICATOR = "org.springframework.boot.actuate.health.HealthIndicator";

    @Configuration(proxyBeanMethods = false)
    @ConditionalOnClass(name = BOOT4_INDICATOR)
    static class Boot4 {
        @Bean
        @ConditionalOnMissingBean(name = "dlockHealthIndicator")
        DlockHealthIndicator dlockHealthIndicator(Dlock dlock) {
            return new DlockHealthIndicator(dlock);
        }
    }

    @Configuration(proxyBeanMethods = false)
    @ConditionalOnClass(name = BOOT3_INDICATOR)
    static class Boot3 {
        @Bean
        @ConditionalOnMissingBean(name = "dlockHealthIndicator")
        DlockActuatorHealthIndicator dlockHealthIndicator(Dlock dlock) {
            return new DlockActuatorHealthIndicator(dlock);
        }
    }
}
