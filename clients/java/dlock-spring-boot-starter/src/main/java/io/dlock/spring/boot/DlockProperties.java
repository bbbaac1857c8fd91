package io.dlock.spring.boot;

import java.time.Duration;
import org.springframework.boot.context.properties.ConfigurationProperties;

/**
 * The {@code dlock.*} properties: the client's settings ({@code io.dlock.DlockConfig}), the
 * default options of its locks ({@code io.dlock.LockOptions}), and those of the beans the
 * starter adds. A property left unset keeps the client's default.
 */
@ConfigurationProperties(prefix = "dlock")
public class DlockProperties {
    /** Whether the starter creates a Dlock client (and the beans built on it). */
    private boolean enabled = true;

    /** The lease of a hold taken without one, renewed by the watchdog (the client's default: 30 s). */
    private Duration watchdogLease;

    /** How often the watchdog renews (the client's default: a third of the watchdog lease). */
    private Duration renewInterval;

    /** The longest single server-side wait; longer waits are sent in slices (the client's default). */
    private Duration waitSlice;

    /** The longest server-side wait of a durable acquire (the client's default: 1 s). */
    private Duration durableWaitSlice;

    /**
     * This client's id, the first part of every owner (clientId:threadId), as DLOCK.INFO shows
     * it; 1 to 400 characters (default: a random UUID).
     */
    private String clientId;

    private final Lock lock = new Lock();
    private final Registry registry = new Registry();
    private final Shedlock shedlock = new Shedlock();
    private final Metrics metrics = new Metrics();

    public boolean isEnabled() {
        return enabled;
    }

    public void setEnabled(boolean enabled) {
        this.enabled = enabled;
    }

    public Duration getWatchdogLease() {
        return watchdogLease;
    }

    public void setWatchdogLease(Duration watchdogLease) {
        this.watchdogLease = watchdogLease;
    }

    public Duration getRenewInterval() {
        return renewInterval;
    }

    public void setRenewInterval(Duration renewInterval) {
        this.renewInterval = renewInterval;
    }

    public Duration getWaitSlice() {
        return waitSlice;
    }

    public void setWaitSlice(Duration waitSlice) {
        this.waitSlice = waitSlice;
    }

    public Duration getDurableWaitSlice() {
        return durableWaitSlice;
    }

    public void setDurableWaitSlice(Duration durableWaitSlice) {
        this.durableWaitSlice = durableWaitSlice;
    }

    public String getClientId() {
        return clientId;
    }

    public void setClientId(String clientId) {
        this.clientId = clientId;
    }

    public Lock getLock() {
        return lock;
    }

    public Registry getRegistry() {
        return registry;
    }

    public Shedlock getShedlock() {
        return shedlock;
    }

    public Metrics getMetrics() {
        return metrics;
    }

    /** The default options of locks got without options of their own. */
    public static class Lock {
        /** Bind each hold to the connection that was granted it: the hold ends when that connection closes. */
        private boolean bind = false;

        /** After a hold ends without a release (expiry, lost connection), keep the lock for this long. */
        private Duration lockDelay = Duration.ZERO;

        /** Replicas that must have a grant before it counts (WAIT n); 0: do not wait for replicas. */
        private int replicas = 0;

        /** How long a durable grant waits for its replicas. */
        private Duration replicasTimeout = Duration.ofSeconds(1);

        public boolean isBind() {
            return bind;
        }

        public void setBind(boolean bind) {
            this.bind = bind;
        }

        public Duration getLockDelay() {
            return lockDelay;
        }

        public void setLockDelay(Duration lockDelay) {
            this.lockDelay = lockDelay;
        }

        public int getReplicas() {
            return replicas;
        }

        public void setReplicas(int replicas) {
            this.replicas = replicas;
        }

        public Duration getReplicasTimeout() {
            return replicasTimeout;
        }

        public void setReplicasTimeout(Duration replicasTimeout) {
            this.replicasTimeout = replicasTimeout;
        }
    }

    /** The Spring Integration LockRegistry bean (when spring-integration-core is present). */
    public static class Registry {
        /** The registry key: the registry's lock "key" is stored as "<registry-key>:key". */
        private String registryKey = "lock-registry";

        /** How long a registry lock is held unless renewed (RedisLockRegistry's expireAfter). */
        private Duration expireAfter = Duration.ofSeconds(60);

        public String getRegistryKey() {
            return registryKey;
        }

        public void setRegistryKey(String registryKey) {
            this.registryKey = registryKey;
        }

        public Duration getExpireAfter() {
            return expireAfter;
        }

        public void setExpireAfter(Duration expireAfter) {
            this.expireAfter = expireAfter;
        }
    }

    /** The ShedLock LockProvider bean (when shedlock-core is present). */
    public static class Shedlock {
        /** The key prefix: ShedLock's lock "name" is stored as "<prefix>name". */
        private String prefix = "shedlock:";

        public String getPrefix() {
            return prefix;
        }

        public void setPrefix(String prefix) {
            this.prefix = prefix;
        }
    }

    /** The Micrometer meters (when micrometer-core is present). */
    public static class Metrics {
        /** Whether the dlock.wait, dlock.hold and dlock.lost meters are recorded. */
        private boolean enabled = true;

        public boolean isEnabled() {
            return enabled;
        }

        public void setEnabled(boolean enabled) {
            this.enabled = enabled;
        }
    }
}
