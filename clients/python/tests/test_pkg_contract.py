"""The client contract (docs/clients.md, issue 43), each rule against real servers and,
where it is about the network, through Toxiproxy: the lease clock, prompt notice of a
server-side end, unlock that ends ownership, waits and deadlines that fit the
transport, the error taxonomy, bad input refused before anything is sent, and close()."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, List

import pytest
import redis

import dlock
from dlock import _core
from dlock_testkit import eventually

# -- prompt notice (rule 2) ------------------------------------------------------------


async def _lost_within(lock: Any, bound: float) -> float:
    """Waits for ``lock.lost``; the seconds it took (fails past ``bound``)."""
    t0 = time.monotonic()
    assert await lock.lost.wait(bound + 5), "never reported lost"
    took = time.monotonic() - t0
    assert took <= bound, f"reported lost after {took:.2f} s (bound {bound} s)"
    return took


async def test_forcerelease_is_reported_at_once(api: Any, server: Any) -> None:
    """A FORCERELEASE of a hold under the default watchdog (30 s lease, renewed every
    10 s) is reported from the lock's notice, not at the next renewal."""
    seen: List[Any] = []
    c = api.client(server, on_lost=lambda k, r: seen.append((k, r)))
    lock = c.lock("fr")
    assert await lock.acquire()
    await asyncio.sleep(0.3)  # subscribed by now
    admin = server.client()
    try:
        t0 = time.monotonic()
        assert admin.execute_command("DLOCK.FORCERELEASE", "fr") == 1
        took = await _lost_within(lock, 1.0)
    finally:
        admin.close()
    print(f"FIGURE lateness after FORCERELEASE ({api.flavour}): {(time.monotonic() - t0) * 1000:.0f} ms")
    assert lock.lost.reason is dlock.LostReason.FORCED, lock.lost.reason
    await eventually(lambda: seen, 5, "on_lost")
    assert seen == [("fr", dlock.LostReason.FORCED)]
    assert not lock.held()
    assert await lock.release() is dlock.Lost
    del took


async def test_forcerelease_of_a_semaphore_permit(api: Any, server: Any) -> None:
    c = api.client(server)
    sem = c.semaphore("frs", 2)
    assert await sem.acquire()
    await asyncio.sleep(0.3)
    admin = server.client()
    try:
        admin.execute_command("DLOCK.FORCERELEASE", "frs")
        await _lost_within(sem, 1.0)
    finally:
        admin.close()
    assert sem.lost.reason is dlock.LostReason.FORCED


async def test_delete_is_reported_deleted(api: Any, server: Any) -> None:
    c = api.client(server)
    lock = c.lock("del")
    assert await lock.acquire()
    await asyncio.sleep(0.3)
    admin = server.client()
    try:
        assert admin.delete("del") == 1
        await _lost_within(lock, 1.0)
    finally:
        admin.close()
    assert lock.lost.reason is dlock.LostReason.DELETED


def _bound_connection(server: Any) -> int:
    """The id of the client connection whose last command was a BIND acquire."""
    admin = server.client()
    try:
        for c in admin.client_list():
            if c.get("cmd") in ("dlock.acquire", "dlock.semacquire", "dlock.fairacquire",
                                "dlock.rwacquire"):
                return int(c["id"])
    finally:
        admin.close()
    raise AssertionError("no connection whose last command was the BIND acquire")


async def test_bind_kill_is_reported_disconnected(api: Any, server: Any) -> None:
    """CLIENT KILL of the connection a BIND hold is bound to: the server ends the hold at
    once, and the client says so (disconnected) within a second."""
    c = api.client(server)
    lock = c.lock("bk", bind=True)
    assert await lock.acquire()
    await asyncio.sleep(0.3)
    admin = server.client()
    try:
        admin.client_kill_filter(_id=_bound_connection(server))
        await _lost_within(lock, 1.0)
    finally:
        admin.close()
    assert lock.lost.reason is dlock.LostReason.DISCONNECTED


async def test_the_close_of_a_bind_connection_is_a_notice_itself(api: Any, server: Any) -> None:
    """The bound connection and the notice listener's are killed together (the
    ``disconnected`` message is lost): the close of the hold's own connection is
    reported ``disconnected`` all the same."""
    api.needs_redis_py("a BIND hold's own connection (the client's own connections)")
    c = api.client(server)
    lock = c.lock("bk2", bind=True)
    assert await lock.acquire()
    await asyncio.sleep(0.3)
    admin = server.client()
    try:
        bound = _bound_connection(server)
        admin.client_kill_filter(_type="pubsub")
        admin.client_kill_filter(_id=bound)
        await _lost_within(lock, 1.0)
    finally:
        admin.close()
    assert lock.lost.reason is dlock.LostReason.DISCONNECTED


# -- the lease clock (rule 1) -------------------------------------------------------------


def test_the_margin_formula() -> None:
    # margin = min(lease / 2, lease / 100 + 50 ms)
    assert _core.lost_margin(30.0) == pytest.approx(0.35)
    assert _core.lost_margin(2.0) == pytest.approx(0.07)
    assert _core.lost_margin(0.06) == pytest.approx(0.03)


async def test_renew_interval_not_below_the_lease_is_refused(api: Any, server: Any) -> None:
    for interval in (5, 2, 0, -1):
        with pytest.raises(dlock.InvalidArgument, match="renew_interval") as e:
            api.wrap_client(api.redis(server), watchdog_lease=2, renew_interval=interval)
        assert e.value.argument == "renew_interval"
    c = api.client(server, watchdog_lease=2)
    with pytest.raises(dlock.InvalidArgument, match="renew_interval"):
        api.redlock([c], "rl", watchdog_lease=2, renew_interval=3)
    assert api.client(server, watchdog_lease=2).renew_interval == pytest.approx(2 / 3)


async def test_explicit_lease_ends_as_expired(api: Any, server: Any) -> None:
    c = api.client(server)
    lock = c.lock("le")
    t0 = time.monotonic()
    assert await lock.acquire(lease=1.0)
    assert await lock.lost.wait(5)
    took = time.monotonic() - t0
    assert lock.lost.reason is dlock.LostReason.EXPIRED
    assert dlock.LostReason.LEASE_ENDED is dlock.LostReason.EXPIRED  # the old name
    assert 0.9 <= took <= 1.0 + 0.2, took


# -- waits and deadlines (rule 4) ---------------------------------------------------------


def test_the_slice_formula() -> None:
    # slice = min(4 s, T - max(100 ms, T / 5)), at least 10 ms; no T: 4 s
    for t, want in ((5.0, 4.0), (1.0, 0.8), (0.3, 0.2), (0.05, 0.01), (30.0, 4.0)):
        assert _core.wait_slice_for(redis.Redis(socket_timeout=t), _core.DEFAULT_WAIT_SLICE) \
            == pytest.approx(want), t
    assert _core.wait_slice_for(redis.Redis(socket_timeout=None), _core.DEFAULT_WAIT_SLICE) == 4.0


async def _timed(coro: Any) -> Any:
    t0 = time.monotonic()
    try:
        r = await coro
    except Exception as e:  # noqa: BLE001
        return e, time.monotonic() - t0
    return r, time.monotonic() - t0


def _not_granted(got: Any) -> bool:
    """False, or one of the errors a deadline may end with (timeout, connection)."""
    if got is False:
        return True
    return isinstance(got, (dlock.AcquireTimeout, redis.ConnectionError, redis.TimeoutError))


async def test_deadline_kept_under_a_silent_partition(api: Any, server: Any, proxied: Any) -> None:
    holder = api.client(server)
    assert await holder.lock("dp", owner="other").acquire(lease=60)
    c = api.client(proxied)
    assert await c.lock("warm").acquire(lease=5)  # a pooled connection exists
    proxied.partition()
    try:
        got, took = await _timed(c.lock("dp").acquire(timeout=3))
        print(f"FIGURE deadline 3 s under a partition ({api.flavour}): {took * 1000:.0f} ms, {got!r}")
        assert _not_granted(got), got
        assert took <= 3.25, took
    finally:
        proxied.heal()


async def test_deadline_kept_on_a_fresh_connection_under_a_partition(api: Any, server: Any, proxied: Any) -> None:
    c = api.client(proxied)
    proxied.partition()
    try:
        got, took = await _timed(c.lock("dpf").acquire(timeout=2))
        print(f"FIGURE deadline 2 s, first connect partitioned ({api.flavour}): {took * 1000:.0f} ms, {got!r}")
        assert _not_granted(got), got
        assert took <= 2.25, took
    finally:
        proxied.heal()


async def test_deadline_kept_when_connections_are_refused(api: Any, server: Any, proxied: Any) -> None:
    # GLIDE: its default request timeout (250 ms), which its failures follow.
    c = api.client(proxied, redis_kw={"socket_timeout": 0.25} if api.is_glide else None)
    assert await c.lock("warm").acquire(lease=5)
    proxied.refuse()
    try:
        got, took = await _timed(c.lock("dr").acquire(timeout=3))
        print(f"FIGURE deadline 3 s, refused ({api.flavour}): {took * 1000:.0f} ms, {got!r}")
        assert _not_granted(got), got
        assert took <= 3.25, took
        got, took = await _timed(c.lock("dr").acquire(timeout=0))
        print(f"FIGURE a try, refused ({api.flavour}): {took * 1000:.0f} ms, {got!r}")
        assert isinstance(got, (redis.ConnectionError, redis.TimeoutError)), got
        assert took <= 1.0, took
    finally:
        proxied.heal()


async def test_giving_up_cancels_in_the_background(api: Any, server: Any) -> None:
    from dlock_testkit import require_command

    require_command(server, "dlock.cancel", "a wait that gives up sends it")
    other = api.client(server)
    assert await other.fair_lock("cd", owner="other").acquire(lease=60)
    c = api.client(server)
    got, took = await _timed(c.fair_lock("cd").acquire(timeout=1))
    # Not granted by the deadline: False, or (the last slice's nil read later than the
    # deadline's 100 ms grace on a loaded machine) the timeout carrying the late read.
    assert _not_granted(got) and took < 1.25, (got, took)
    await eventually(lambda: _no_waiters(other, "cd"), 0.5, "the place to go")


async def _no_waiters(c: Any, key: str) -> bool:
    info = await c.info(key)
    return info is not None and not info.get("waiters")


# -- the silent partition with a 2 s watchdog lease (rule 1) ------------------------------


async def test_partition_lost_before_the_other_clients_grant(api: Any, server: Any, proxied: Any) -> None:
    c = api.client(proxied, watchdog_lease=2)
    lock = c.lock("part")
    assert await lock.acquire()
    await asyncio.sleep(0.5)
    proxied.partition()
    try:
        other = server.client()
        granted: List[float] = []

        def grab() -> None:
            other.execute_command("DLOCK.ACQUIRE", "part", "other", "PX", 10000, "WAIT", 10000)
            granted.append(time.monotonic())

        t = threading.Thread(target=grab, daemon=True)
        t.start()
        assert await lock.lost.wait(10)
        lost_at = time.monotonic()
        t.join(10)
        assert granted, "the other client was never granted"
        print(f"FIGURE lead, 2 s watchdog under a partition ({api.flavour}): "
              f"{(granted[0] - lost_at) * 1000:.0f} ms")
        assert lock.lost.reason is dlock.LostReason.UNREACHABLE
        assert granted[0] >= lost_at
        other.close()
    finally:
        proxied.heal()
    assert await lock.release() in (dlock.Lost, dlock.Unknown)


async def test_latency_is_no_loss(api: Any, server: Any, proxied: Any) -> None:
    """150 ms each way (300 ms round trips) for 4 s under a 2 s watchdog lease: no false
    loss. (A renewal that needed a new connection spent two more round trips on its
    handshake and was late; GLIDE's own 250 ms request timeout cut every renewal.)"""
    c = api.client(proxied, watchdog_lease=2)
    lock = c.lock("lat")
    assert await lock.acquire()
    proxied.latency(150)
    try:
        assert not await lock.lost.wait(4.0), lock.lost.reason
        assert lock.held()
    finally:
        proxied.heal()
    assert await lock.release() is dlock.Released


# -- unlock (rule 3) ----------------------------------------------------------------------


async def test_unlock_after_connections_were_killed(api: Any, server: Any) -> None:
    c = api.client(server, watchdog_lease=3)
    lock = c.lock("ku")
    assert await lock.acquire()
    admin = server.client()
    try:
        admin.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
        assert await lock.release() in (dlock.Released, dlock.Lost, dlock.Unknown)
        n = server.calls("dlock.renew")
        await asyncio.sleep(1.5)  # a renewal would be due every second
        assert server.calls("dlock.renew") == n
        got = admin.execute_command("DLOCK.ACQUIRE", "ku", "other", "PX", 1000, "WAIT", 3500)
        assert got is not None
    finally:
        admin.close()


async def test_unlock_with_the_server_gone_is_unknown(api: Any, server: Any, proxied: Any) -> None:
    # A lease long enough for both tries of the release (GLIDE's take seconds).
    c = api.client(proxied, watchdog_lease=20, renew_interval=1)
    lock = c.lock("gone")
    assert await lock.acquire()
    proxied.refuse()
    try:
        got, took = await _timed(lock.release())
        print(f"FIGURE unlock, refused ({api.flavour}): {took * 1000:.0f} ms, {got!r}")
        assert got is dlock.Unknown, got
        assert lock.release_error is not None
        assert not lock.held() and not lock.lost.is_set()
        n = server.calls("dlock.renew")
    finally:
        proxied.heal()
    await asyncio.sleep(1.5)
    assert server.calls("dlock.renew") == n  # never renewed again


# -- bad input (rule 5) ------------------------------------------------------------------


async def test_bad_input_is_refused_before_anything_is_sent(api: Any, server: Any) -> None:
    c = api.client(server)
    before = {k: server.calls(k) for k in ("dlock.acquire", "dlock.fairacquire", "dlock.semacquire")}
    for make in (lambda: c.lock(""), lambda: c.lock(b""), lambda: c.lock(None),
                 lambda: c.semaphore("", 2), lambda: c.fair_lock("")):
        with pytest.raises(dlock.InvalidArgument, match="name") as e:
            make()
        assert e.value.argument == "name"
    for lease in (0, -5, 2 ** 41 / 1000.0, float("nan")):
        with pytest.raises(dlock.InvalidArgument, match="lease") as e:
            await c.lock("k").acquire(lease=lease)
        assert e.value.argument == "lease"
    with pytest.raises(dlock.InvalidArgument, match="timeout"):
        await c.lock("k").acquire(timeout=-1)
    assert {k: server.calls(k) for k in before} == before


# -- close (rule 6) ----------------------------------------------------------------------


async def test_close_twice_and_nothing_left(api: Any, server: Any) -> None:
    c = api.client(server)
    lock = c.lock("cl")
    assert await lock.acquire()
    await asyncio.sleep(0.2)
    await c.close()
    await c.close()
    assert lock.lost.is_set()  # still held when the client closed: no longer renewed
    if not api.is_async:
        def left() -> List[str]:
            return [t.name for t in threading.enumerate()
                    if t.name.startswith("dlock-") and t.is_alive()]

        try:
            await eventually(lambda: not left(), 5, "dlock threads to end")
        except AssertionError:
            from dlock._lost import TIMERS

            pending = [(round(e[0] - time.monotonic(), 1), getattr(e[2], "__self__", e[2])._deadline_reason)
                       for e in TIMERS._heap if e[2] is not None]
            raise AssertionError(f"dlock threads still running after close(): {left()}; "
                                 f"timers pending: {pending}") from None
