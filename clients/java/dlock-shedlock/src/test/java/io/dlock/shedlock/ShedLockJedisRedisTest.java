package io.dlock.shedlock;

import io.dlock.Dlock;
import org.junit.jupiter.api.extension.RegisterExtension;

/** ShedLock's provider suite on Jedis, against REDIS_SERVER. */
class ShedLockJedisRedisTest extends ShedLockSuite {
    @RegisterExtension
    static final ShedLockServer SERVER = ShedLockServer.redis(ShedLockServer::jedis);

    @Override
    protected Dlock client() {
        return SERVER.client();
    }
}
