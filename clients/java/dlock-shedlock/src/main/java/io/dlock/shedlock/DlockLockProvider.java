package io.dlock.shedlock;

import io.dlock.Dlock;
import io.dlock.DlockException;
import io.dlock.NotHeldException;
import io.dlock.core.Commands;
import io.dlock.core.Kind;
import io.dlock.core.Replies;
import io.dlock.spi.Transport;
import java.time.Duration;
import java.time.Instant;
import java.util.Objects;
import java.util.Optional;
import java.util.UUID;
import net.javacrumbs.shedlock.core.AbstractSimpleLock;
import net.javacrumbs.shedlock.core.ClockProvider;
import net.javacrumbs.shedlock.core.ExtensibleLockProvider;
import net.javacrumbs.shedlock.core.LockConfiguration;
import net.javacrumbs.shedlock.core.SimpleLock;

/**
 * A ShedLock {@link ExtensibleLockProvider} on dlock: each {@code lock()} is one
 * {@code DLOCK.ACQUIRE key owner PX lockAtMostFor} with a fresh owner (ShedLock locks are
 * not reentrant), so a crashed node's lock ends with its lease, on the server's clock.
 * {@code unlock()} before {@code lockAtLeastFor} shortens the lease to what is left of it
 * ({@code DLOCK.RENEW PX rest}) instead of releasing; {@code extend()} renews the lease.
 *
 * <p>Keys are {@code prefix + name}, by default {@code shedlock:name}.
 */
public final class DlockLockProvider implements ExtensibleLockProvider {
    /** The default key prefix. */
    public static final String DEFAULT_PREFIX = "shedlock:";

    private final Transport transport;
    private final String prefix;
    private final String ownerPrefix;

    /** A provider over a dlock client's transport, with keys {@code shedlock:name}. */
    public DlockLockProvider(Dlock client) {
        this(client, DEFAULT_PREFIX);
    }

    /** A provider over a dlock client's transport, with keys {@code prefix + name}. */
    public DlockLockProvider(Dlock client, String prefix) {
        this.transport = Objects.requireNonNull(client, "client").getTransport();
        this.prefix = Objects.requireNonNull(prefix, "prefix");
        this.ownerPrefix = client.getId() + ":shedlock:";
    }

    /** The key of ShedLock lock {@code name}. */
    public String keyOf(String name) {
        return prefix + name;
    }

    private static long leaseMs(Duration d) {
        return Math.max(1, d.toMillis());
    }

    @Override
    public Optional<SimpleLock> lock(LockConfiguration config) {
        byte[] key = Commands.bytes(keyOf(config.getName()));
        String owner = ownerPrefix + UUID.randomUUID();
        long lease = leaseMs(Duration.between(ClockProvider.now(), config.getLockAtMostUntil()));
        Long token = Replies.token(transport.call(key,
                Commands.acquire(Kind.MUTEX, key, owner, lease, 0, Commands.AcquireOptions.NONE)));
        return token == null ? Optional.empty() : Optional.of(new DlockSimpleLock(config, key, owner, token));
    }

    /** A held ShedLock lock; {@link #token()} is its fencing token. */
    public final class DlockSimpleLock extends AbstractSimpleLock {
        private final byte[] key;
        private final String owner;
        private final long token;

        DlockSimpleLock(LockConfiguration config, byte[] key, String owner, long token) {
            super(config);
            this.key = key;
            this.owner = owner;
            this.token = token;
        }

        /** The fencing token of this hold. */
        public long token() {
            return token;
        }

        @Override
        protected void doUnlock() {
            Duration rest = Duration.between(ClockProvider.now(), lockConfiguration.getLockAtLeastUntil());
            try {
                if (!rest.isNegative() && !rest.isZero()) {
                    transport.call(key, Commands.renew(key, owner, leaseMs(rest)));
                } else {
                    transport.call(key, Commands.release(Kind.MUTEX, key, owner, 1));
                }
            } catch (NotHeldException e) {
                // the lease had ended already: nothing to let go
            }
        }

        @Override
        protected Optional<SimpleLock> doExtend(LockConfiguration newConfig) {
            Instant now = ClockProvider.now();
            long lease = leaseMs(Duration.between(now, newConfig.getLockAtMostUntil()));
            try {
                long r = Replies.integer(transport.call(key, Commands.renew(key, owner, lease)), "DLOCK.RENEW");
                return r == 1 ? Optional.of(new DlockSimpleLock(newConfig, key, owner, token)) : Optional.empty();
            } catch (DlockException e) {
                return Optional.empty();
            }
        }
    }
}
