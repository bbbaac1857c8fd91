package io.dlock.spring.boot;

import io.dlock.DlockObserver;
import io.dlock.LostReason;
import io.dlock.core.Kind;
import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.Meter;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Timer;
import io.micrometer.core.instrument.binder.MeterBinder;
import java.util.Locale;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;

/**
 * The dlock client's Micrometer meters, fed by its {@link DlockObserver}:
 * <ul>
 *   <li>{@code dlock.wait} (timer): each acquire from its call to its end, tagged
 *       {@code kind} and {@code outcome} ({@code acquired}, {@code timed_out}, {@code failed});
 *   <li>{@code dlock.hold} (timer): each hold from its grant to its end, tagged {@code kind}
 *       and {@code outcome} ({@code released}, {@code lost});
 *   <li>{@code dlock.lost} (counter): holds lost, tagged {@code kind} and {@code reason}
 *       (the {@link LostReason} in lower case: {@code not_held}, {@code unreachable}, …).
 * </ul>
 * {@code kind} is {@code mutex}, {@code fair}, {@code rw} (either mode of a read-write
 * lock), {@code semaphore} or {@code latch} (a countdown latch's {@code await}; it has no holds).
 * Bound to every registry Spring Boot binds {@link MeterBinder} beans to.
 */
public final class DlockMeters implements MeterBinder, DlockObserver {
    private final CopyOnWriteArrayList<Meters> registries = new CopyOnWriteArrayList<>();

    /** One registry's meter providers (each finds or creates the meter of its tags). */
    private record Meters(MeterRegistry registry, Meter.MeterProvider<Timer> waits, Meter.MeterProvider<Timer> holds,
            Meter.MeterProvider<Counter> lost) {
    }

    @Override
    public void bindTo(MeterRegistry registry) {
        for (Meters m : registries) {
            if (m.registry() == registry) {
                return;
            }
        }
        registries.add(new Meters(registry,
                Timer.builder("dlock.wait")
                        .description("Acquires of dlock locks, semaphores and latches, from the call to its end")
                        .withRegistry(registry),
                Timer.builder("dlock.hold")
                        .description("Holds of dlock locks and semaphores, from the grant to the release or loss")
                        .withRegistry(registry),
                Counter.builder("dlock.lost")
                        .description("Holds of dlock locks and semaphores lost before their release")
                        .withRegistry(registry)));
    }

    /** The {@code kind} tag of a kind of hold. */
    static String kindTag(Kind kind) {
        return switch (kind) {
            case MUTEX -> "mutex";
            case FAIR -> "fair";
            case READ, WRITE -> "rw";
            case SEMAPHORE -> "semaphore";
        };
    }

    private static String lower(Enum<?> e) {
        return e.name().toLowerCase(Locale.ROOT);
    }

    private void recordWait(String kind, long nanos, WaitOutcome outcome) {
        for (Meters m : registries) {
            m.waits().withTags("kind", kind, "outcome", lower(outcome)).record(nanos, TimeUnit.NANOSECONDS);
        }
    }

    @Override
    public void waited(Kind kind, String name, long nanos, WaitOutcome outcome) {
        recordWait(kindTag(kind), nanos, outcome);
    }

    @Override
    public void awaited(String name, long nanos, WaitOutcome outcome) {
        recordWait("latch", nanos, outcome);
    }

    @Override
    public void released(Kind kind, String name, long heldNanos) {
        for (Meters m : registries) {
            m.holds().withTags("kind", kindTag(kind), "outcome", "released").record(heldNanos, TimeUnit.NANOSECONDS);
        }
    }

    @Override
    public void lost(Kind kind, String name, long heldNanos, LostReason reason) {
        String k = kindTag(kind);
        for (Meters m : registries) {
            m.holds().withTags("kind", k, "outcome", "lost").record(heldNanos, TimeUnit.NANOSECONDS);
            m.lost().withTags("kind", k, "reason", lower(reason)).increment();
        }
    }
}
