package io.dlock.spring.boot.apptest;

import java.lang.reflect.Method;
import java.util.Map;
import org.springframework.context.ApplicationContext;

/**
 * The {@code dlock} health indicator's answer, read the same way on Boot 3 and Boot 4 (their
 * health APIs are in different packages): the bean {@code dlockHealthIndicator} must be a
 * {@code HealthIndicator} of the running Boot, which Actuator's health endpoint collects.
 */
record Health(String status, Map<?, ?> details) {
    static final String BOOT4 = "org.springframework.boot.health.contributor.HealthIndicator";
    static final String BOOT3 = "org.springframework.boot.actuate.health.HealthIndicator";

    static Health of(ApplicationContext context) throws ReflectiveOperationException {
        Object indicator = context.getBean("dlockHealthIndicator");
        String api = StarterContract.hasClass(BOOT4) ? BOOT4 : BOOT3;
        Class<?> type = Class.forName(api);
        if (!type.isInstance(indicator)) {
            throw new AssertionError("dlockHealthIndicator is a " + indicator.getClass() + ", not a " + api);
        }
        Object health = type.getMethod("health").invoke(indicator);
        Object status = call(health, "getStatus");
        return new Health((String) call(status, "getCode"), (Map<?, ?>) call(health, "getDetails"));
    }

    private static Object call(Object target, String method) throws ReflectiveOperationException {
        Method m = target.getClass().getMethod(method);
        return m.invoke(target);
    }
}
