package io.dlock.spring.boot;

import io.dlock.Dlock;
import io.dlock.DlockObserver;
import io.dlock.core.Kind;
import io.dlock.LostReason;
import org.springframework.boot.autoconfigure.AutoConfiguration;
import org.springframework.boot.autoconfigure.condition.ConditionalOnBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnClass;
import org.springframework.boot.autoconfigure.condition.ConditionalOnMissingBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnProperty;
import org.springframework.boot.context.properties.EnableConfigurationProperties;
import org.springframework.context.annotation.Bean;

/**
 * The {@link DlockMeters} ({@code dlock.wait}, {@code dlock.hold}, {@code dlock.lost}) when
 * micrometer-core is present: a {@code MeterBinder} bean, which Spring Boot's metrics
 * (spring-boot-starter-actuator) bind to the application's registries. It becomes the
 * client's observer, beside one the application set before.
 */
@AutoConfiguration(after = DlockAutoConfiguration.class)
@ConditionalOnClass(name = DlockMetricsAutoConfiguration.METER_REGISTRY)
@ConditionalOnBean(Dlock.class)
@ConditionalOnProperty(prefix = "dlock.metrics", name = "enabled", havingValue = "true", matchIfMissing = true)
@EnableConfigurationProperties(DlockProperties.class)
public class DlockMetricsAutoConfiguration {
    static final String METER_REGISTRY = "io.micrometer.core.instrument.MeterRegistry";

    @Bean
    @ConditionalOnMissingBean
    DlockMeters dlockMeters(Dlock dlock) {
        DlockMeters meters = new DlockMeters();
        DlockObserver before = dlock.getObserver();
        dlock.setObserver(before == DlockObserver.NONE ? meters : new Both(before, meters));
        return meters;
    }

    /** Two observers, each told everything (one's failure does not keep it from the other). */
    private record Both(DlockObserver first, DlockObserver second) implements DlockObserver {
        @Override
        public void waited(Kind kind, String name, long nanos, WaitOutcome outcome) {
            try {
                first.waited(kind, name, nanos, outcome);
            } finally {
                second.waited(kind, name, nanos, outcome);
            }
        }

        @Override
        public void awaited(String name, long nanos, WaitOutcome outcome) {
            try {
                first.awaited(name, nanos, outcome);
            } finally {
                second.awaited(name, nanos, outcome);
            }
        }

        @Override
        public void released(Kind kind, String name, long heldNanos) {
            try {
                first.released(kind, name, heldNanos);
            } finally {
                second.released(kind, name, heldNanos);
            }
        }

        @Override
        public void lost(Kind kind, String name, long heldNanos, LostReason reason) {
            try {
                first.lost(kind, name, heldNanos, reason);
            } finally {
                second.lost(kind, name, heldNanos, reason);
            }
        }
    }
}
