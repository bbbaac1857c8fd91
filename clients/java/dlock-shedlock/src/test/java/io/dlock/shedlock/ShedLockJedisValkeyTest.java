package io.dlock.shedlock;

import io.dlock.Dlock;
import org.junit.jupiter.api.extension.RegisterExtension;

/** ShedLock's provider suite on Jedis, against VALKEY_SERVER. */
class ShedLockJedisValkeyTest extends ShedLockSuite {
    @RegisterExtension
    static final ShedLockServer SERVER = ShedLockServer.valkey(ShedLockServer::jedis);

    @Override
    protected Dlock client() {
        return SERVER.client();
    }
}
