"""redis-py's ``Lock`` vocabulary (issue 35): what means the same is accepted, what
does not is refused with a message naming the dlock word."""

from __future__ import annotations

import time

import pytest

import dlock


async def test_timeout_where_a_lock_is_made_is_refused(api, server) -> None:
    c = api.client(server)
    for make in (lambda: c.lock("m", timeout=10), lambda: c.fair_lock("m", timeout=1),
                 lambda: c.semaphore("m", 2, timeout=1), lambda: c.rwlock("m", timeout=1)):
        with pytest.raises(TypeError) as e:
            make()
        assert "lease=" in str(e.value) and "blocking_timeout=" in str(e.value)
    with pytest.raises(TypeError, match="both timeout= and blocking_timeout="):
        await c.lock("m").acquire(timeout=1, blocking_timeout=1)
    assert await c.info("m") is None


async def test_blocking_timeout_blocking_sleep(api, server) -> None:
    c = api.client(server)
    holder = c.lock("v", owner="other")
    assert await holder.acquire(lease=30)
    lk = c.lock("v", blocking_timeout=0.3, sleep=0.1)  # sleep: accepted, unused
    assert lk.blocking_timeout == 0.3
    t0 = time.monotonic()
    assert await lk.acquire() is False
    assert 0.25 <= time.monotonic() - t0 < 5
    with pytest.raises(dlock.AcquireTimeout):
        async with lk:
            pass
    t0 = time.monotonic()
    assert await c.lock("v", blocking=False).acquire() is False  # one try
    assert await c.lock("v").acquire(blocking_timeout=0.2) is False
    assert await c.lock("v").acquire(blocking=False) is False
    assert time.monotonic() - t0 < 5
    assert await holder.release() is dlock.Released
    assert await c.lock("v", blocking=False).acquire() is True


async def test_owned_extend_reacquire(api, server) -> None:
    c = api.client(server)
    lk = c.lock("e", lease=2)
    assert await lk.owned() is False
    assert await lk.acquire()
    assert await lk.owned() is True
    assert await lk.extend(10) is True  # what was left (~2 s) + 10 s
    ttl = (await c.info("e"))["holders"][0]["ttl"]
    assert 10_500 < ttl <= 12_000, ttl
    assert await lk.extend(3, replace_ttl=True) is True
    assert 2_000 < (await c.info("e"))["holders"][0]["ttl"] <= 3_000
    assert await lk.reacquire() is True  # back to the full lease (2 s)
    assert 1_000 < (await c.info("e"))["holders"][0]["ttl"] <= 2_000
    with pytest.raises(ValueError, match="additional_time must be a positive"):
        await lk.extend(0)
    assert await lk.release() is dlock.Released
    assert await lk.owned() is False
    with pytest.raises(dlock.errors.NotHeld):
        await lk.extend(1)
    with pytest.raises(dlock.errors.NotHeld):
        await lk.reacquire()
    wd = c.lock("e2")  # under the watchdog: extend() has nothing to do
    assert await wd.acquire()
    with pytest.raises(dlock.DlockError, match="watchdog"):
        await wd.extend(5)
    with pytest.raises(dlock.DlockError, match="watchdog"):
        await wd.reacquire()
    assert await wd.release() is dlock.Released


async def test_thread_local_false_shares_one_owner(api, server) -> None:
    c = api.client(server)
    shared = c.lock("t", thread_local=False, lease=30)
    per = c.lock("t2")
    assert await shared.acquire()

    async def other():  # another thread (sync) / task (asyncio)
        return shared.owner, per.owner, await shared.release()

    owner, per_owner, outcome = await api.join(api.spawn(other))
    assert owner == shared.owner and per_owner != per.owner
    assert outcome is dlock.Released
    assert await c.info("t") is None


async def test_errors_are_redis_pys_lock_errors(api, server) -> None:
    """Code written for redis-py's Lock catches dlock's errors where they mean the same
    (issue 45): NotHeld is a LockNotOwnedError, AcquireTimeout a LockError."""
    from redis.exceptions import LockError, LockNotOwnedError

    c = api.client(server)
    holder = c.lock("le", owner="other")
    assert await holder.acquire(lease=30)
    with pytest.raises(LockError):  # redis-py: "Unable to acquire lock within the time specified"
        async with c.lock("le", blocking_timeout=0.1):
            pass
    with pytest.raises(LockNotOwnedError):  # redis-py: release of a lock not owned
        await c.lock("le2").release()
    assert issubclass(dlock.NotHeld, LockNotOwnedError)
    assert issubclass(dlock.AcquireTimeout, LockError)
    assert issubclass(dlock.AcquireTimeout, TimeoutError)  # as before


@pytest.mark.parametrize("kw, names", [
    ({"expire": 10}, ["expire", "python-redis-lock", "lease="]),
    ({"auto_renewal": True}, ["auto_renewal", "leave lease= out"]),
    ({"id": "me"}, ["id", "owner="]),
    ({"auto_release_time": 10}, ["auto_release_time", "pottery", "lease="]),
    ({"context_manager_timeout": 2}, ["context_manager_timeout", "blocking_timeout="]),
    ({"num_extensions": 3}, ["num_extensions", "watchdog"]),
    ({"expire": 10, "id": "me"}, ["expire", "lease=", "id", "owner="]),
])
async def test_other_libraries_keywords_name_the_dlock_one(api, server, kw, names) -> None:
    """python-redis-lock's and pottery's keywords get a TypeError that names the dlock
    keyword (issue 45: a bare TypeError before)."""
    c = api.client(server)
    with pytest.raises(TypeError) as e:
        c.lock("kw", **kw)
    for n in names:
        assert n in str(e.value), str(e.value)
    with pytest.raises(TypeError, match="lease="):
        c.semaphore("kw", 2, expire=10)
    with pytest.raises(TypeError, match=r"RedLock\(nodes, name"):
        api.redlock([c], None, key="kw", masters={c})
    with pytest.raises(TypeError, match="not a dlock keyword"):
        c.lock("kw", nonsense=1)
    assert await c.info("kw") is None
