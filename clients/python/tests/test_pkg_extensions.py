"""Semaphores, latches, fencing (CHECK / FENCED) and the BIND / LOCKDELAY options, per
flavour. Each test runs only when the loaded module has the command or option, and is
skipped — with the reason — when it does not."""

from __future__ import annotations

import asyncio
import time
from typing import Any, List

import pytest
import redis

import dlock
from dlock import LostReason, Release
from dlock_testkit import eventually, require_command


async def _waiters(c: Any, key: str) -> int:
    info = await c.info(key)
    return 0 if info is None else len(info["waiters"])


# -- Semaphore ----------------------------------------------------------------------------


async def test_semaphore_permits_reentry_and_release(api: Any, server: Any) -> None:
    require_command(server, "dlock.semacquire", "semaphores (issue 13)")
    c = api.client(server)
    sem = c.semaphore("pool", 3)
    assert await sem.acquire(permits=2)
    t = sem.token
    assert sem.held_permits == 2

    async def others() -> Any:
        s = c.semaphore("pool", 3)
        one = await s.acquire(blocking=False)  # 1 left: granted
        two = await s.acquire(blocking=False)  # 0 left
        if one:
            assert await s.release() is Release.RELEASED
        return one, two

    assert await api.join(api.spawn(others)) == (True, False)
    # More permits for the same owner: its count grows, its token stays.
    assert await sem.acquire(permits=1)
    assert sem.token == t and sem.held_permits == 3
    info = await c.info("pool")
    assert info["kind"] == "semaphore" and info["limit"] == 3 and info["available"] == 0
    assert await sem.release(permits=2) is Release.STILL_HELD
    assert await sem.release(permits=1) is Release.RELEASED
    assert await c.info("pool") is None
    # Another limit for an existing semaphore is refused, naming the limit.
    assert await sem.acquire()
    with pytest.raises(dlock.InvalidArgument):
        await c.semaphore("pool", 5).acquire(blocking=False)
    assert await sem.release() is Release.RELEASED


async def test_semaphore_is_strict_fifo_and_waits(api: Any, server: Any) -> None:
    require_command(server, "dlock.semacquire", "semaphores (issue 13)")
    c = api.client(server)
    sem = c.semaphore("fifo-sem", 3)
    assert await sem.acquire(permits=2, lease=20)

    async def big() -> Any:
        s = c.semaphore("fifo-sem", 3)
        ok = await s.acquire(permits=2, timeout=20, lease=20)
        await s.release(permits=2)
        return ok

    actor = api.spawn(big)
    await eventually(lambda: _waiters(c, "fifo-sem"), 10, "the 2-permit request to wait")

    async def small() -> Any:
        return await c.semaphore("fifo-sem", 3).acquire(blocking=False)

    # One permit is free, but a request waits ahead: no overtaking.
    assert await api.join(api.spawn(small)) is False
    assert await sem.release(permits=2) is Release.RELEASED
    assert await api.join(actor) is True


async def test_semaphore_watchdog_and_lost(api: Any, server: Any) -> None:
    require_command(server, "dlock.semacquire", "semaphores (issue 13)")
    c = api.client(server, watchdog_lease=0.5)
    sem = c.semaphore("wd-sem", 2)
    assert await sem.acquire()
    await asyncio.sleep(1.6)
    assert not sem.lost.is_set() and (await c.info("wd-sem"))["holders"]
    await c.force_release("wd-sem")
    assert await sem.lost.wait(10)
    assert sem.lost.reason in (LostReason.FORCED, LostReason.NOT_HELD)
    assert await sem.release() is Release.LOST


# -- Latch -----------------------------------------------------------------------------------


async def test_latch(api: Any, server: Any) -> None:
    require_command(server, "dlock.latchset", "countdown latches (issue 13)")
    c = api.client(server, redis_kw={"socket_timeout": 1.0})
    latch = c.latch("boot")
    assert await latch.wait(timeout=0) is True  # no latch: open
    assert await latch.try_set_count(2) is True
    assert await latch.try_set_count(5) is False
    assert await latch.count() == 2
    assert await latch.wait(timeout=0.2) is False

    async def waiter() -> Any:
        return await c.latch("boot").wait(timeout=20)

    actor = api.spawn(waiter)
    await eventually(lambda: _waiters(c, "boot"), 10, "a connection waiting in AWAIT")
    await asyncio.sleep(1.2)  # longer than the socket timeout: sliced
    assert await latch.count_down() == 1
    assert await latch.count_down() == 0
    assert await api.join(actor) is True
    assert await latch.count() == 0 and await latch.count_down() == 0
    assert await latch.try_set_count(1)
    with pytest.raises(dlock.WrongKind):
        await c.lock("boot").acquire(blocking=False)


# -- fencing: CHECK and FENCED ------------------------------------------------------------------


async def test_check_token(api: Any, server: Any) -> None:
    require_command(server, "dlock.check", "DLOCK.CHECK (issue 14)")
    c = api.client(server)
    lock = c.lock("fence")
    assert await lock.acquire()
    token = lock.token
    assert await lock.check() is True
    assert await c.check("fence", token + 1) is False
    assert await lock.release() is Release.RELEASED
    assert await c.check("fence", token) is False


async def test_fenced_command(api: Any, server: Any) -> None:
    require_command(server, "dlock.fenced", "DLOCK.FENCED (issue 14)")
    c = api.client(server)
    lock = c.lock("{acct}:lock")
    assert await lock.acquire()
    token = lock.token
    assert await lock.fenced("SET", "{acct}:balance", "10") in (True, b"OK", "OK")
    # The inner command's own errors stay its own (not a dlock error).
    with pytest.raises(redis.ResponseError) as e:
        await lock.fenced("INCRBY", "{acct}:balance", "x")
    assert not isinstance(e.value, dlock.DlockError)
    assert await lock.release() is Release.RELEASED
    with pytest.raises(dlock.Fenced):
        await c.fenced("{acct}:lock", token, "SET", "{acct}:balance", "99")
    assert await c.execute("GET", "{acct}:balance") == b"10"


# -- BIND and LOCKDELAY ---------------------------------------------------------------------------


def _require_option(server: Any, option: List[str], why: str) -> None:
    r = server.client()
    try:
        r.execute_command("DLOCK.ACQUIRE", "__probe__", "p", *option)
        r.execute_command("DLOCK.FORCERELEASE", "__probe__")
    except redis.ResponseError as e:
        pytest.skip(f"the loaded module does not accept {' '.join(option)} ({e}) — {why}")
    finally:
        r.close()


async def test_bind_ends_hold_with_connection(api: Any, server: Any) -> None:
    _require_option(server, ["BIND"], "BIND (issue 14)")
    # A single-connection client: the hold is bound to that one connection.
    c = api.client(server, redis_kw={"single_connection_client": True})
    watcher = api.client(server)
    lock = c.lock("bound", bind=True)
    assert await lock.acquire(lease=30)
    assert (await watcher.info("bound"))["holders"]
    await watcher.execute("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
    await eventually(lambda: _gone(watcher, "bound"), 10, "the bound hold to end")


async def _gone(c: Any, key: str) -> bool:
    return await c.info(key) is None


async def test_lock_delay_keeps_excluding_after_lease_end(api: Any, server: Any) -> None:
    _require_option(server, ["LOCKDELAY", "10"], "LOCKDELAY (issue 14)")
    c = api.client(server)
    lock = c.lock("delayed")
    assert await lock.acquire(lease=0.1, lock_delay=0.8)
    t0 = time.monotonic()

    async def next_holder() -> Any:
        lk = c.lock("delayed")
        ok = await lk.acquire(timeout=10, lease=5)
        took = time.monotonic() - t0
        await lk.release()
        return ok, took

    ok, took = await api.join(api.spawn(next_holder))
    assert ok and took >= 0.8


# -- bounded queues ----------------------------------------------------------------------------


async def test_queue_full(api: Any, server: Any) -> None:
    r = server.client()
    try:
        if not r.config_get("dlock.max-queue"):
            pytest.skip("the loaded module has no dlock.max-queue config (QUEUEFULL, issue 12)")
        r.config_set("dlock.max-queue", 1)
    finally:
        r.close()
    c = api.client(server)
    holder = c.lock("q")
    assert await holder.acquire()

    async def first_waiter() -> Any:
        lk = c.lock("q")
        ok = await lk.acquire(timeout=20, lease=5)
        await lk.release()
        return ok

    actor = api.spawn(first_waiter)
    await eventually(lambda: _waiters(c, "q"), 10, "one waiter on the queue")

    async def second_waiter() -> Any:
        try:
            await c.lock("q").acquire(timeout=5)
        except dlock.QueueFull as e:
            return str(e)
        return None

    msg = await api.join(api.spawn(second_waiter))
    assert msg is not None and msg.startswith("QUEUEFULL")
    assert await holder.release() is Release.RELEASED
    assert await api.join(actor) is True
