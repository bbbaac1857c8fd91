package io.dlock.shedlock;

import io.dlock.Dlock;
import io.dlock.jedis.DlockJedis;
import io.dlock.jedis.JedisTransport;
import io.dlock.lettuce.DlockLettuce;
import io.dlock.testing.RedisServer;
import io.lettuce.core.RedisURI;
import java.util.function.Function;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.extension.AfterAllCallback;
import org.junit.jupiter.api.extension.BeforeAllCallback;
import org.junit.jupiter.api.extension.ExtensionContext;

/**
 * One server with the module and a dlock client on it for a whole test class (registered
 * with {@code @RegisterExtension} on a static field); the class is skipped when the
 * server's variable is unset.
 */
final class ShedLockServer implements BeforeAllCallback, AfterAllCallback {
    /** A client and what closes the driver under it. */
    record Opened(Dlock client, Runnable closeDriver) {}

    private final String binary;
    private final String variable;
    private final Function<RedisServer, Opened> open;
    private RedisServer server;
    private Opened opened;

    private ShedLockServer(String binary, String variable, Function<RedisServer, Opened> open) {
        this.binary = binary;
        this.variable = variable;
        this.open = open;
    }

    static ShedLockServer redis(Function<RedisServer, Opened> open) {
        return new ShedLockServer(RedisServer.redisBinary(), "REDIS_SERVER", open);
    }

    static ShedLockServer valkey(Function<RedisServer, Opened> open) {
        return new ShedLockServer(RedisServer.valkeyBinary(), "VALKEY_SERVER", open);
    }

    /** Jedis' pooled {@code RedisClient}. */
    static Opened jedis(RedisServer s) {
        Dlock d = DlockJedis.create(redis.clients.jedis.RedisClient.create(s.host(), s.port()));
        return new Opened(d, () -> ((JedisTransport) d.getTransport()).jedis().close());
    }

    /** A Lettuce {@code RedisClient}. */
    static Opened lettuce(RedisServer s) {
        io.lettuce.core.RedisClient lettuce = io.lettuce.core.RedisClient.create(RedisURI.create(s.host(), s.port()));
        return new Opened(DlockLettuce.create(lettuce), lettuce::shutdown);
    }

    Dlock client() {
        return opened.client();
    }

    @Override
    public void beforeAll(ExtensionContext context) {
        Assumptions.assumeTrue(binary != null, variable + " unset");
        server = ShedLockSuite.start(binary);
        opened = open.apply(server);
    }

    @Override
    public void afterAll(ExtensionContext context) {
        if (opened != null) {
            opened.client().close();
            opened.closeDriver().run();
        }
        if (server != null) {
            server.close();
        }
    }
}
