package io.dlock.spring.boot;

import io.dlock.DlockConfig;

/**
 * Changes the settings of the auto-configured {@code Dlock} client after the {@code dlock.*}
 * properties were applied (declare one or more as beans; they run in {@code @Order}).
 */
@FunctionalInterface
public interface DlockConfigCustomizer {
    /** Changes {@code config} in place. */
    void customize(DlockConfig config);
}
