"""Durable grants (``replicas=n``): ``WAIT`` on the granting connection, release and
``NotDurable`` (or retry) when too few replicas acknowledge, ``NoReplicas`` for
``min-replicas-to-write`` refusals. A real master and replica (conftest's
``replicated``), both flavours (``api``)."""

from __future__ import annotations

import threading
import time
from typing import Any, List

import pytest

import dlock
from dlock_testkit import eventually


@pytest.fixture(autouse=True)
def _redis_py_only(request: Any) -> None:
    if "api" in request.fixturenames:
        request.getfixturevalue("api").needs_redis_py("durable grants (a pinned connection)")


def holders(server: Any, key: str) -> int:
    c = server.client(decode_responses=True)
    try:
        info = dlock.Client(c).info(key)
    finally:
        c.close()
    return 0 if info is None else len(info.get("holders") or [])


def waiters(server: Any, key: str) -> int:
    c = server.client(decode_responses=True)
    try:
        info = dlock.Client(c).info(key)
    finally:
        c.close()
    return 0 if info is None else len(info.get("waiters") or [])


def kinds(c: Any, **kw: Any) -> List[Any]:
    return [
        c.lock("d-mutex", **kw),
        c.fair_lock("d-fair", **kw),
        c.rwlock("d-rw", **kw).read(),
        c.rwlock("d-rw", **kw).write(),
        c.semaphore("d-sem", 3, permits=2, **kw),
    ]


async def test_a_live_replica_acknowledges_every_kind(api: Any, replicated: Any) -> None:
    master, replica = replicated
    c = api.client(master)
    for lock in kinds(c, replicas=1, replicas_timeout=3):
        before = master.calls("wait")
        assert await lock.acquire(timeout=5)
        assert master.calls("wait") == before + 1, "one WAIT per grant"
        # WAIT answered 1: the replica has applied the grant already.
        assert holders(replica, lock.name) == 1, lock
        await lock.release()


async def test_a_paused_replica_fails_the_acquire_and_leaves_no_hold(api: Any, replicated: Any) -> None:
    master, replica = replicated
    c = api.client(master)
    replica.pause()
    try:
        for lock in kinds(c):
            t0 = time.monotonic()
            with pytest.raises(dlock.NotDurable) as ei:
                await lock.acquire(timeout=1, replicas=1, replicas_timeout=0.2)
            assert (ei.value.wanted, ei.value.acked) == (1, 0)
            assert time.monotonic() - t0 >= 0.19
            assert holders(master, lock.name) == 0, f"{lock}: released"
            assert not lock.held()
        # A reentrant grant over a held lock: only the new hold goes.
        outer = c.lock("d-re")
        assert await outer.acquire(timeout=1)
        with pytest.raises(dlock.NotDurable):
            await c.lock("d-re", replicas=1, replicas_timeout=0.1).acquire(timeout=0)
        assert await outer.release() is dlock.Released
    finally:
        replica.resume()
    lock = c.lock("d-mutex", replicas=1, replicas_timeout=3)
    assert await lock.acquire(timeout=5)
    await lock.release()


async def test_retries_when_asked_and_gives_up_after_them(api: Any, replicated: Any) -> None:
    master, replica = replicated
    c = api.client(master)
    replica.pause()
    try:
        before = master.calls("wait")
        lock = c.lock("d-retry", replicas=1, replicas_timeout=0.1, replicas_retries=2)
        with pytest.raises(dlock.NotDurable):
            await lock.acquire(timeout=0)
        assert master.calls("wait") == before + 3, "one try and two retries"
        assert holders(master, "d-retry") == 0
        # The replica comes back while the client retries: granted.
        threading.Timer(0.3, replica.resume).start()
        lock = c.lock("d-retry", replicas=1, replicas_timeout=0.1, replicas_retries=100)
        assert await lock.acquire(timeout=0)
    finally:
        replica.resume()
    assert holders(replica, "d-retry") == 1
    await lock.release()


async def test_client_wide_default_and_per_call_off(api: Any, replicated: Any) -> None:
    master, replica = replicated
    c = api.client(master, replicas=1, replicas_timeout=0.2)
    replica.pause()
    try:
        with pytest.raises(dlock.NotDurable):
            await c.lock("d-default").acquire(timeout=0)
        # replicas=0 on the call turns it off.
        lock = c.lock("d-default")
        assert await lock.acquire(timeout=0, replicas=0)
        await lock.release()
    finally:
        replica.resume()


async def test_min_replicas_to_write_refusals_are_their_own_error(api: Any, servers: Any) -> None:
    master = servers.start("--min-replicas-to-write", "1")
    c = api.client(master)
    with pytest.raises(dlock.NoReplicas):
        await c.lock("d-norep").acquire(timeout=0)
    with pytest.raises(dlock.NoReplicas):
        await c.fair_lock("d-norep", replicas=1, replicas_timeout=0.1).acquire(timeout=0)
    assert holders(master, "d-norep") == 0


async def test_a_grant_handed_to_a_blocked_waiter_is_counted(api: Any, replicated: Any) -> None:
    master, replica = replicated
    c = api.client(master)
    for factory in (c.lock, c.fair_lock):
        key = f"d-handoff-{factory.__name__}"
        holder = factory(key)
        # A live replica: the grant handed to the waiter is acknowledged.
        assert await holder.acquire(timeout=5)

        async def wait_live() -> Any:
            lock = factory(key, replicas=1, replicas_timeout=3)
            ok = await lock.acquire(timeout=20)
            n = holders(replica, key)
            await lock.release()
            return ok, n

        actor = api.spawn(wait_live)
        await eventually(lambda: waiters(master, key) == 1, what="a waiter")
        await holder.release()
        assert await api.join(actor) == (True, 1)

        # A paused replica: the handed-over grant is not acknowledged, so the waiter
        # fails and lets it go (were the handoff not counted, WAIT would answer 1).
        assert await holder.acquire(timeout=5)

        async def wait_paused() -> Any:
            lock = factory(key, replicas=1, replicas_timeout=0.3)
            try:
                await lock.acquire(timeout=20)
            except dlock.NotDurable as e:
                return e.acked
            return "granted"

        actor = api.spawn(wait_paused)
        await eventually(lambda: waiters(master, key) == 1, what="a waiter")
        replica.pause()
        try:
            await holder.release()
            assert await api.join(actor) == 0
            assert holders(master, key) == 0, "no hold left"
        finally:
            replica.resume()


async def test_a_multilock_of_durable_locks(api: Any, replicated: Any) -> None:
    master, replica = replicated
    c = api.client(master)
    kw = dict(replicas=1, replicas_timeout=3)
    m = api.multilock([c.lock("d-m1", **kw), c.lock("d-m2", **kw)])
    assert await m.acquire(timeout=5)
    assert holders(replica, "d-m1") + holders(replica, "d-m2") == 2
    await m.release()
    for lock in m.locks:
        lock.replicas_timeout = 0.2  # short: it fails anyway
    replica.pause()
    try:
        with pytest.raises(dlock.NotDurable):
            await m.acquire(timeout=1)
        assert holders(master, "d-m1") + holders(master, "d-m2") == 0
    finally:
        replica.resume()


def test_on_a_cluster_the_node_of_the_key_is_asked(cluster: Any) -> None:
    from redis.cluster import RedisCluster

    rc = RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port, socket_timeout=10)
    try:
        c = dlock.Client(rc)
        for key in ("cl-d-1", "cl-d-2", "{u9}:cl-d"):
            # No replicas in this cluster: WAIT answers 0 on the key's own master.
            with pytest.raises(dlock.NotDurable):
                c.lock(key, replicas=1, replicas_timeout=0.05).acquire(timeout=0)
            assert c.info(key) is None
            lock = c.lock(key, replicas=0)
            assert lock.acquire(timeout=0)
            lock.release()
    finally:
        rc.close()


async def test_on_an_async_cluster_the_node_of_the_key_is_asked(cluster: Any) -> None:
    from redis.asyncio.cluster import RedisCluster

    import dlock.aio

    rc = RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port, socket_timeout=10)
    try:
        c = dlock.aio.Client(rc)
        for key in ("cl-d-1", "{u9}:cl-d"):
            with pytest.raises(dlock.NotDurable):
                await c.lock(key, replicas=1, replicas_timeout=0.05).acquire(timeout=0)
            assert await c.info(key) is None
    finally:
        await rc.aclose()


# -- the sans-IO operation, stepped by hand (no server) ---------------------------------


def _step_through(answers: List[Any], redis_client: Any = None) -> Any:
    """Runs a durable attempt of a semaphore (2 permits), answering each effect from
    ``answers`` (an exception is thrown in); the effects seen and the outcome."""
    from dlock import _durable, _ops
    from dlock._core import Kind

    class Target:
        _cluster = False
        redis = redis_client

    op = _durable.op_attempt(
        Target(), Kind.SEMAPHORE, "k", "me", 30.0, 30000, {"limit": 3, "permits": 2},
        _durable.Durable(1, 0.25, retries=1), 0,
    )
    st = _ops.Stepper(op, clock=lambda: 0.0)
    seen: List[Any] = []
    it = iter(answers)
    eff = st.next()
    while eff is not None:
        if isinstance(eff, (_durable.PinnedCall, _ops.Call)):
            seen.append(("pinned" if isinstance(eff, _durable.PinnedCall) else "pool", eff.args[0]))
        else:
            seen.append(type(eff).__name__)
        a = next(it)
        if isinstance(a, BaseException):
            st.fail(a)
        else:
            st.answer(a)
        eff = st.next()
    return seen, st.result


def test_unit_a_short_count_releases_then_retries_then_raises() -> None:
    with pytest.raises(dlock.NotDurable):
        _step_through([
            "pin", 7, 0, 1, None,      # grant 7, WAIT 0, release on the pool, unpin
            "pin", 8, 0, 1, None,      # the one retry: the same
        ])
    seen, result = _step_through(["pin", 7, 1, None])
    assert seen == ["Pin", ("pinned", "DLOCK.SEMACQUIRE"), ("pinned", "WAIT"), "Unpin"]
    assert result == (7, 0.0)


def test_unit_not_granted_unpins_and_a_broken_wait_releases() -> None:
    seen, result = _step_through(["pin", None, None])
    assert result is None and seen[-1] == "Unpin"
    import redis

    with pytest.raises(redis.ConnectionError):
        _step_through(["pin", 7, redis.ConnectionError("gone"), 1, None])


def test_unit_the_wait_must_fit_in_the_socket_timeout() -> None:
    import redis

    with pytest.raises(ValueError, match="socket_timeout"):
        _step_through([], redis.Redis(socket_timeout=0.2))  # no connection is made
