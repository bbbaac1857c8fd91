package io.dlock;

import io.dlock.core.Kind;
import java.util.concurrent.locks.ReadWriteLock;

/**
 * A read-write lock (Redisson's {@code RReadWriteLock}): shared READ holds, one exclusive
 * WRITE hold, both reentrant per thread; a thread holding WRITE may take READ (downgrade),
 * the only reader may take WRITE (upgrade); waiting writers are not starved by new readers.
 */
public final class DReadWriteLock implements ReadWriteLock {
    private final DLock read;
    private final DLock write;
    private final String name;

    DReadWriteLock(Dlock client, String name, LockOptions options) {
        this.name = name;
        this.read = new DLock(client, name, Kind.READ, options);
        this.write = new DLock(client, name, Kind.WRITE, options);
    }

    /** The lock's name (its key). */
    public String getName() {
        return name;
    }

    @Override
    public DLock readLock() {
        return read;
    }

    @Override
    public DLock writeLock() {
        return write;
    }
}
