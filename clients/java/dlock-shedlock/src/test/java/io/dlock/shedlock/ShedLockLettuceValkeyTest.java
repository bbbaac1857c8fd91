package io.dlock.shedlock;

import io.dlock.Dlock;
import org.junit.jupiter.api.extension.RegisterExtension;

/** ShedLock's provider suite on Lettuce, against VALKEY_SERVER. */
class ShedLockLettuceValkeyTest extends ShedLockSuite {
    @RegisterExtension
    static final ShedLockServer SERVER = ShedLockServer.valkey(ShedLockServer::lettuce);

    @Override
    protected Dlock client() {
        return SERVER.client();
    }
}
