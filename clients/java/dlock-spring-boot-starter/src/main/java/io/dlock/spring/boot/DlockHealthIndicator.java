package io.dlock.spring.boot;

import io.dlock.Dlock;
import org.springframework.boot.health.contributor.Health;
import org.springframework.boot.health.contributor.HealthIndicator;

/**
 * Spring Boot 4's health indicator {@code dlock}: UP when the server answers and has the
 * dlock module, DOWN (with the reason) when the module is not loaded or the server cannot be
 * reached. Details: the server, the client id, whether the module is loaded, the probe's
 * latency or the error.
 */
public final class DlockHealthIndicator implements HealthIndicator {
    private final Dlock dlock;

    public DlockHealthIndicator(Dlock dlock) {
        this.dlock = dlock;
    }

    @Override
    public Health health() {
        DlockHealthProbe.Result r = DlockHealthProbe.probe(dlock);
        return (r.up() ? Health.up() : Health.down()).withDetails(r.details()).build();
    }
}
