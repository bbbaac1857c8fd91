package io.dlock.spring.boot.apptest;

import io.dlock.spring.boot.DlockConfigCustomizer;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.context.annotation.Bean;

/**
 * The test application: everything from the starters on the classpath, and one
 * {@link DlockConfigCustomizer} (a wait slice of 2 s) to show that customizers run.
 */
@SpringBootApplication
public class TestApp {
    @Bean
    DlockConfigCustomizer twoSecondSlices() {
        return config -> config.setWaitSlice(2_000);
    }
}
