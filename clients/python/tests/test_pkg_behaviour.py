"""The behaviour suite, run once per flavour (sync and asyncio) through ``api``."""

from __future__ import annotations

import asyncio
import time
from typing import Any, List

import pytest
import redis

import dlock
from dlock import LostReason, Release, WaitMode
from dlock_testkit import eventually


async def holders(client: Any, key: str) -> List[Any]:
    info = await client.info(key)
    return [] if info is None else info["holders"]


async def waiters(client: Any, key: str) -> int:
    info = await client.info(key)
    return 0 if info is None else len(info["waiters"])


# -- grants, tokens, reentrancy ------------------------------------------------------


async def test_acquire_release_token_and_reentrancy(api: Any, server: Any) -> None:
    c = api.client(server)
    lock = c.lock("orders")
    assert lock.token is None
    assert await lock.acquire()
    t1 = lock.token
    assert isinstance(t1, int) and t1 > 0
    # Reentrant: the same thread/task again, the same token, the server counts 2.
    assert await lock.acquire()
    assert lock.token == t1
    h = await holders(c, "orders")
    assert len(h) == 1 and h[0]["count"] == 2
    assert h[0]["owner"].decode() == lock.owner
    assert lock.owner.startswith(c.prefix + ":")
    # A second handle on the same key in the same thread/task is the same owner.
    assert c.lock("orders").token == t1
    assert await lock.release() is Release.STILL_HELD
    assert await lock.release() is Release.RELEASED
    assert lock.token is None and await c.info("orders") is None
    # A new hold gets a greater token.
    assert await lock.acquire(lease=5)
    assert lock.token > t1
    assert await lock.release() is Release.RELEASED


async def test_owners_differ_per_thread_or_task(api: Any, server: Any) -> None:
    c = api.client(server)
    lock = c.lock("k")
    assert await lock.acquire()

    async def other() -> Any:
        busy = await lock.acquire(blocking=False)
        return lock.owner, busy

    owner, granted = await api.join(api.spawn(other))
    assert owner != lock.owner and owner.startswith(c.prefix + ":")
    assert granted is False
    assert await lock.release() is Release.RELEASED


async def test_context_manager_and_timeout(api: Any, server: Any) -> None:
    c = api.client(server)
    async with c.lock("cm") as held:
        assert held.token is not None
        assert len(await holders(c, "cm")) == 1

        async def contender() -> Any:
            try:
                async with c.lock("cm", blocking_timeout=0.2):
                    return "entered"
            except dlock.AcquireTimeout:
                return "timeout"

        assert await api.join(api.spawn(contender)) == "timeout"
    assert await c.info("cm") is None


# -- release outcomes and the lost signal --------------------------------------------


async def test_release_outcomes(api: Any, server: Any) -> None:
    c = api.client(server)
    # Released / StillHeld covered above; Lost after the explicit lease ran out.
    lock = c.lock("short")
    assert await lock.acquire(lease=0.15)
    assert not lock.lost.is_set()
    await eventually(lambda: lock.lost.is_set(), 5, "the explicit lease to run out")
    assert lock.lost.reason is LostReason.EXPIRED
    await eventually(lambda: _gone(c, "short"), 5, "the server to end the lease")
    assert await lock.release() is Release.LOST
    # Never held by this owner: NotHeld is raised, not reported as an outcome.
    with pytest.raises(dlock.NotHeld):
        await c.lock("never").release()
    # Force-released while held: Lost, and the signal says FORCED (from the lock's
    # notice; NOT_HELD when the release came first).
    other = c.lock("forced")
    assert await other.acquire(lease=30)
    assert await c.force_release("forced") is True
    assert await other.release() is Release.LOST
    assert other.lost.is_set()
    assert other.lost.reason in (LostReason.FORCED, LostReason.NOT_HELD)


async def test_renew_an_explicit_lease_and_locked(api: Any, server: Any) -> None:
    c = api.client(server)
    lock = c.lock("ext")
    assert await lock.locked() is False
    # A lease of 1 s renewed every 0.3 s: a renewal may be 700 ms late on a loaded box.
    assert await lock.acquire(lease=1.0)
    assert await lock.locked() is True and lock.held()
    for _ in range(5):  # 1.5 s in all: held only because it is renewed
        await asyncio.sleep(0.3)
        assert await lock.renew() is True
    assert not lock.lost.is_set() and lock.lost.deadline is not None
    assert await lock.renew(lease=5) is True
    await asyncio.sleep(1.2)
    assert not lock.lost.is_set()  # the deadline moved with the new lease
    await c.force_release("ext")
    assert await lock.renew() is False
    assert lock.lost.reason in (LostReason.FORCED, LostReason.NOT_HELD) and not lock.held()
    assert await lock.release() is Release.LOST


async def test_on_lost_runs_when_an_explicit_lease_ends(api: Any, server: Any) -> None:
    seen: List[Any] = []
    c = api.client(server, on_lost=lambda k, r: seen.append((k, r)))
    lock = c.lock("cb")
    assert await lock.acquire(lease=0.2)
    # Nobody looks at lock.lost: the callback still runs when the lease ends.
    await eventually(lambda: seen, 5, "the on_lost callback")
    assert seen == [("cb", LostReason.EXPIRED)]
    # A lock released within its lease is never reported lost.
    other = c.lock("cb2")
    assert await other.acquire(lease=1.0)  # released well within it on a loaded box
    assert await other.release() is Release.RELEASED
    await asyncio.sleep(1.2)
    assert not other.lost.is_set() and seen == [("cb", LostReason.EXPIRED)]


async def _gone(c: Any, key: str) -> bool:
    return await c.info(key) is None


# -- waiting ---------------------------------------------------------------------------


async def test_wait_slices_fit_a_short_socket_timeout(api: Any, server: Any) -> None:
    # socket_timeout 1 s: a WAIT longer than that would time out the read (and with
    # redis-py's retries, send the acquire again). The client cuts the wait in slices
    # (of 0.75 s here: 0.25 s of slack for a reply on a loaded machine; 0.5 s gave 0.125).
    c = api.client(server, redis_kw={"socket_timeout": 1.0})
    lock = c.lock("slices")
    assert await lock.acquire(lease=30)
    before = server.calls("dlock.acquire")

    async def waiter() -> Any:
        t0 = time.monotonic()
        ok = await lock.acquire(timeout=20, lease=5)
        waited = time.monotonic() - t0
        if ok:
            await lock.release()
        return ok, waited

    actor = api.spawn(waiter)
    await eventually(lambda: waiters(c, "slices"), 10, "the waiter to wait on the server")
    await asyncio.sleep(1.6)
    assert await lock.release() is Release.RELEASED
    ok, waited = await api.join(actor)
    assert ok and waited >= 1.5
    calls = server.calls("dlock.acquire") - before
    if api.is_glide:
        # GLIDE: a 1 s request timeout does not cut the wait (it goes out on a
        # waiting client whose timeout is above the slice): one WAIT, a few at most.
        assert 1 <= calls <= 4, calls
        return
    # Slices of at most 0.75 s over a 1.6 s wait (one WAIT of 20 s would be one call),
    # yet no polling storm.
    assert 2 <= calls <= 40, calls


async def test_timeout_zero_and_bounded_wait(api: Any, server: Any) -> None:
    c = api.client(server)
    lock = c.lock("busy")
    assert await lock.acquire()

    async def tries() -> Any:
        t0 = time.monotonic()
        a = await lock.acquire(blocking=False)
        b = await lock.acquire(timeout=0.3)
        return a, b, time.monotonic() - t0

    a, b, took = await api.join(api.spawn(tries))
    assert a is False and b is False and 0.25 <= took < 10
    await lock.release()


@pytest.mark.parametrize("kind", ["lock", "fair_lock"])
async def test_fifo_order_of_waiters(api: Any, server: Any, kind: str) -> None:
    c = api.client(server)
    key = f"fifo-{kind}"
    holder = getattr(c, kind)(key)
    assert await holder.acquire()
    order: List[int] = []

    def waiter(i: int) -> Any:
        async def run() -> None:
            lk = getattr(c, kind)(key)
            assert await lk.acquire(timeout=30, lease=10)
            order.append(i)
            await lk.release()
        return run

    actors = []
    for i in range(5):
        actors.append(api.spawn(waiter(i)))
        # Each waiter is on the server's queue before the next one starts.
        await eventually(lambda n=i + 1: _waiters_at_least(c, key, n), 10, f"{i + 1} waiters")
    assert await holder.release() is Release.RELEASED
    for a in actors:
        await api.join(a)
    assert order == [0, 1, 2, 3, 4]


async def _waiters_at_least(c: Any, key: str, n: int) -> bool:
    return await waiters(c, key) >= n


async def test_notify_wait_mode(api: Any, server: Any) -> None:
    c = api.client(server, wait_slice=5)
    lock = c.lock("notified")
    assert await lock.acquire()
    acquires_with_wait_before = server.calls("dlock.acquire")

    async def waiter() -> Any:
        lk = c.lock("notified", wait_mode=WaitMode.NOTIFY)
        t0 = time.monotonic()
        ok = await lk.acquire(timeout=20)
        took = time.monotonic() - t0
        await lk.release()
        return ok, took

    actor = api.spawn(waiter)
    # The holder's client listens on the channel too (its notices): two subscribers.
    await eventually(lambda: _subscribers(server, "dlock:{notified}", 2), 10, "the waiter to subscribe")
    await lock.release()
    ok, took = await api.join(actor)
    # Woken by the `released` notice, not by the 5 s slice.
    assert ok and took < 4.5
    # No server-side waits: a couple of WAIT 0 attempts only.
    assert server.calls("dlock.acquire") - acquires_with_wait_before <= 10


def _subscribers(server: Any, channel: str, n: int = 1) -> bool:
    r = server.client()
    try:
        counts = r.pubsub_numsub(channel)
    finally:
        r.close()
    return bool(counts) and counts[0][1] >= n


# -- the watchdog --------------------------------------------------------------------------


@pytest.mark.parametrize("lease", [1.0, 1.5])
async def test_watchdog_renews_over_several_leases(api: Any, server: Any, lease: float) -> None:
    c = api.client(server, watchdog_lease=lease)
    lock = c.lock(f"wd-{lease}")
    assert await lock.acquire()
    await asyncio.sleep(2.5 * lease + 0.3)  # past two leases: held only if renewed
    assert not lock.lost.is_set()
    h = await holders(c, f"wd-{lease}")
    assert len(h) == 1 and h[0]["owner"].decode() == lock.owner
    assert server.calls("dlock.renew") >= 2
    assert await lock.release() is Release.RELEASED
    n = server.calls("dlock.renew")
    await asyncio.sleep(min(lease, 0.7))
    assert server.calls("dlock.renew") == n  # the watchdog stopped with the release


async def test_lost_when_renewal_answers_zero(api: Any, server: Any) -> None:
    seen: List[Any] = []
    c = api.client(server, watchdog_lease=0.6, on_lost=lambda k, r: seen.append((k, r)))
    lock = c.lock("wd0")
    assert await lock.acquire()
    await c.force_release("wd0")
    assert await lock.lost.wait(10)
    # The lock's notice names the force-release (NOT_HELD when a renewal came first).
    assert lock.lost.reason in (LostReason.FORCED, LostReason.NOT_HELD)
    await eventually(lambda: seen, 5, "the on_lost callback")
    assert seen == [("wd0", lock.lost.reason)]
    assert await lock.release() is Release.LOST


async def test_lost_when_server_paused(api: Any, server: Any) -> None:
    seen: List[Any] = []
    c = api.client(server, watchdog_lease=1.0, on_lost=lambda k, r: seen.append(r))
    lock = c.lock("frozen")
    assert await lock.acquire()
    server.pause()
    try:
        t0 = time.monotonic()
        assert await lock.lost.wait(15)
        took = time.monotonic() - t0
        assert lock.lost.reason is LostReason.UNREACHABLE
        assert took <= 1.0 + 5  # about the lease, never much later
        # The callbacks run right after the signal (in a thread of their own).
        await eventually(lambda: seen, 5, "the on_lost callback")
        assert seen == [LostReason.UNREACHABLE]
    finally:
        server.resume()


async def test_lost_when_server_killed(api: Any, server: Any) -> None:
    c = api.client(server, watchdog_lease=0.8)
    lock = c.lock("gone")
    assert await lock.acquire()
    server.kill()
    assert await lock.lost.wait(15)
    assert lock.lost.reason is LostReason.UNREACHABLE
    # The release cannot get through: Unknown (the error kept), never an exception
    # that would leave it renewed.
    assert await lock.release() is Release.UNKNOWN
    assert lock.release_error is not None and not lock.held()


# -- read-write lock --------------------------------------------------------------------


async def test_rwlock_shares_reads_excludes_writes(api: Any, server: Any) -> None:
    c = api.client(server)
    rw = c.rwlock("doc")
    assert await rw.read().acquire()

    async def reader_then_writer() -> Any:
        r_ok = await rw.read().acquire(blocking=False)
        w_ok = await rw.write().acquire(blocking=False)
        if r_ok:
            await rw.read().release()
        return r_ok, w_ok

    assert await api.join(api.spawn(reader_then_writer)) == (True, False)
    # Upgrade of the only reader, then downgrade; per-mode outcomes.
    assert await rw.write().acquire(blocking=False)
    assert await rw.write().release() is Release.RELEASED
    assert await rw.read().release() is Release.RELEASED


async def test_deadlock_error_when_two_readers_upgrade(api: Any, server: Any) -> None:
    c = api.client(server)
    rw = c.rwlock("up")
    assert await rw.read().acquire(lease=20)

    async def other_reader() -> Any:
        assert await rw.read().acquire(lease=20)
        ok = await rw.write().acquire(timeout=15, lease=20)  # waits to upgrade
        await rw.write().release()
        await rw.read().release()
        return ok

    actor = api.spawn(other_reader)
    await eventually(lambda: waiters(c, "up"), 10, "the first upgrade to wait")
    with pytest.raises(dlock.Deadlock):
        await rw.write().acquire(timeout=5)
    assert await rw.read().release() is Release.RELEASED
    assert await api.join(actor) is True


# -- errors -------------------------------------------------------------------------------


async def test_error_mapping(api: Any, server: Any) -> None:
    c = api.client(server)
    assert await c.rwlock("rw").write().acquire()
    with pytest.raises(dlock.WrongKind) as e:
        await c.lock("rw").acquire(blocking=False)
    assert "rw lock" in str(e.value) and isinstance(e.value, redis.ResponseError)
    await c.execute("SET", "plain", "x")
    with pytest.raises(dlock.WrongType):
        await c.lock("plain").acquire(blocking=False)
    with pytest.raises(dlock.InvalidArgument) as e2:
        await c.lock("k", owner="x" * 600).acquire(blocking=False)
    assert "512" in str(e2.value)
    with pytest.raises(dlock.NotHeld):
        await c.lock("k", owner="nobody").release()
    with pytest.raises(dlock.UnknownCommand):
        await c.execute("DLOCK.NOSUCHCOMMAND", "k")
    assert await c.has_command("dlock.acquire") is True
    assert await c.has_command("dlock.nosuchcommand") is False
    assert isinstance(dlock.QueueFull("QUEUEFULL x"), dlock.DlockError)


# -- MultiLock and RedLock ------------------------------------------------------------------


async def test_multilock_all_or_none(api: Any, servers: Any) -> None:
    s1, s2 = servers.start(), servers.start()
    c1, c2 = api.client(s1), api.client(s2)
    m = api.multilock([c2.lock("b"), c1.lock("a")])
    assert len(m.names) == 2

    async def hold_b() -> Any:
        lk = c2.lock("b")
        assert await lk.acquire(lease=20)
        return lk.owner

    other_owner = await api.join(api.spawn(hold_b))
    assert await m.acquire(timeout=0.3) is False
    assert await c1.info("a") is None  # rolled back
    await c2.force_release("b")
    assert await m.acquire(timeout=5)
    assert all(t is not None for t in m.tokens)
    assert not m.lost.is_set()
    await c1.force_release("a")
    await c2.force_release("b")
    assert await m.release() == [Release.LOST, Release.LOST]
    assert m.lost.is_set()
    del other_owner


async def test_redlock_majority_and_servers_down(api: Any, servers: Any) -> None:
    nodes = [servers.start() for _ in range(3)]
    rs = [api.redis(n, socket_timeout=2) for n in nodes]
    rl = api.redlock(rs, "rl", node_timeout=1.0, retry_delay=0.05)
    assert rl.quorum == 2
    assert await rl.acquire(timeout=2, lease=10)
    assert sum(t is not None for t in rl.tokens) == 3
    assert 8 < rl.validity() <= 10
    assert await rl.release() is Release.RELEASED
    nodes[0].kill()
    assert await rl.acquire(timeout=3, lease=10)
    assert rl.tokens[0] is None and sum(t is not None for t in rl.tokens) == 2
    assert await rl.release() is Release.RELEASED
    nodes[1].pause()
    try:
        t0 = time.monotonic()
        assert await rl.acquire(timeout=1.0, lease=10) is False
        assert time.monotonic() - t0 < 10
    finally:
        nodes[1].resume()


async def test_redlock_watchdog_and_lost(api: Any, servers: Any) -> None:
    nodes = [servers.start() for _ in range(3)]
    rs = [api.redis(n, socket_timeout=2) for n in nodes]
    seen: List[Any] = []
    rl = api.redlock(rs, "rlw", node_timeout=1.0, watchdog_lease=1.2,
                     on_lost=lambda k, r: seen.append(r))
    assert await rl.acquire(timeout=3)
    await asyncio.sleep(2.8)  # past two leases: held only if renewed on the quorum
    assert not rl.lost.is_set() and rl.validity() > 0
    cs = [api.client(n) for n in nodes[:2]]
    for cl in cs:
        await cl.force_release("rlw")
    assert await rl.lost.wait(10)
    assert rl.lost.reason is LostReason.NO_QUORUM and seen == [LostReason.NO_QUORUM]
    assert await rl.release() is Release.LOST
