package io.dlock.spring.boot;

import io.dlock.Dlock;
import org.springframework.boot.actuate.health.Health;
import org.springframework.boot.actuate.health.HealthIndicator;

/** {@link DlockHealthIndicator} for Spring Boot 3, whose health API lives in another package. */
public final class DlockActuatorHealthIndicator implements HealthIndicator {
    private final Dlock dlock;

    public DlockActuatorHealthIndicator(Dlock dlock) {
        this.dlock = dlock;
    }

    @Override
    public Health health() {
        DlockHealthProbe.Result r = DlockHealthProbe.probe(dlock);
        return (r.up() ? Health.up() : Health.down()).withDetails(r.details()).build();
    }
}
