package io.dlock.shedlock;

import io.dlock.Dlock;
import org.junit.jupiter.api.extension.RegisterExtension;

/** ShedLock's provider suite on Lettuce, against REDIS_SERVER. */
class ShedLockLettuceRedisTest extends ShedLockSuite {
    @RegisterExtension
    static final ShedLockServer SERVER = ShedLockServer.redis(ShedLockServer::lettuce);

    @Override
    protected Dlock client() {
        return SERVER.client();
    }
}
