package io.dlock.shedlock;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.dlock.Dlock;
import io.dlock.core.Commands;
import io.dlock.core.Replies;
import io.dlock.spi.Transport;
import io.dlock.testing.RedisServer;
import net.javacrumbs.shedlock.core.ExtensibleLockProvider;
import net.javacrumbs.shedlock.test.support.AbstractExtensibleLockProviderIntegrationTest;

/**
 * ShedLock's own provider test suite ({@code AbstractExtensibleLockProviderIntegrationTest},
 * which includes {@code AbstractLockProviderIntegrationTest} and its fuzz test), unchanged.
 */
abstract class ShedLockSuite extends AbstractExtensibleLockProviderIntegrationTest {
    protected abstract Dlock client();

    @Override
    protected ExtensibleLockProvider getLockProvider() {
        return new DlockLockProvider(client());
    }

    private boolean held(String name) {
        byte[] key = Commands.bytes(DlockLockProvider.DEFAULT_PREFIX + name);
        Transport t = client().getTransport();
        return !Replies.holders(Replies.info(t.call(key, Commands.info(key)))).isEmpty();
    }

    @Override
    protected void assertUnlocked(String lockName) {
        assertFalse(held(lockName), lockName + " should be unlocked");
    }

    @Override
    protected void assertLocked(String lockName) {
        assertTrue(held(lockName), lockName + " should be locked");
    }

    static RedisServer start(String binary) {
        try {
            return RedisServer.start(binary);
        } catch (Exception e) {
            throw new IllegalStateException("could not start " + binary, e);
        }
    }
}
