"""A 3-master Redis Cluster through ``RedisCluster`` (sync and asyncio), and a master
with a replica."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, List

import pytest
import redis
from redis.cluster import RedisCluster

import dlock
import dlock.aio
from dlock import Release, WaitMode


def _cluster_client(cluster: Any, **kw: Any) -> RedisCluster:
    kw.setdefault("socket_timeout", 10)
    return RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port, **kw)


KEYS = [f"cl-{i}" for i in range(12)] + ["{user7}:lock", "{user7}:other"]


def test_cluster_locks_on_every_master(cluster: Any) -> None:
    rc = _cluster_client(cluster)
    try:
        c = dlock.Client(rc)
        assert c.has_command("dlock.acquire") and not c.has_command("dlock.nosuchcommand")
        tokens = {}
        for k in KEYS:
            lock = c.lock(k)
            assert lock.acquire(timeout=5)
            assert lock.acquire(timeout=5)  # reentrant, through the cluster routing
            tokens[k] = lock.token
            info = c.info(k)
            assert info is not None and info["holders"][0]["count"] == 2
        # The keys are spread over the three masters.
        slots = {rc.keyslot(k) for k in KEYS}
        owners = {rc.nodes_manager.get_node_from_slot(s).port for s in slots}
        assert len(owners) == 3
        for k in KEYS:
            lock = c.lock(k)
            assert lock.release() is Release.STILL_HELD
            assert lock.release() is Release.RELEASED
            assert c.info(k) is None
    finally:
        rc.close()


def test_cluster_waits_server_side_and_by_sharded_notifications(cluster: Any) -> None:
    rc = _cluster_client(cluster, socket_timeout=0.8)
    try:
        c = dlock.Client(rc)
        for mode in (WaitMode.SERVER, WaitMode.NOTIFY):
            key = f"cl-wait-{mode.value}"
            holder = c.lock(key)
            assert holder.acquire()
            result: List[Any] = []

            def waiter() -> None:
                lk = c.lock(key, wait_mode=mode)
                t0 = time.monotonic()
                ok = lk.acquire(timeout=20)
                result.append((ok, time.monotonic() - t0))
                lk.release()

            t = threading.Thread(target=waiter)
            t.start()
            time.sleep(1.2)  # longer than the socket timeout: sliced waits
            assert holder.release() is Release.RELEASED
            t.join(30)
            assert not t.is_alive()
            ok, took = result[0]
            assert ok and 1.0 < took < 10, (mode, took)
    finally:
        rc.close()


def test_cluster_asyncio(cluster: Any) -> None:
    from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

    async def main() -> None:
        rc = AsyncRedisCluster(host="127.0.0.1", port=cluster.nodes[0].port, socket_timeout=10)
        try:
            # A 1.5 s lease renewed every 0.5 s: CI's loaded 2-core machine lost a 0.6 s
            # one (its lease clock leaves a renewal 56 ms of slack).
            c = dlock.aio.Client(rc, watchdog_lease=1.5)
            assert await c.has_command("dlock.acquire")
            assert not await c.has_command("dlock.nosuchcommand")
            locks = [c.lock(k) for k in KEYS[:6]]
            for lk in locks:
                assert await lk.acquire(timeout=5)
            await asyncio.sleep(2.5)  # renewed by the watchdog tasks, on every master
            assert not any(lk.lost.is_set() for lk in locks)
            for lk in locks:
                assert await lk.release() is Release.RELEASED

            async def contender(i: int, order: List[int]) -> None:
                lk = c.lock("cl-async-fifo")
                assert await lk.acquire(timeout=20, lease=5)
                order.append(i)
                await lk.release()

            holder = c.lock("cl-async-fifo")
            assert await holder.acquire()
            order: List[int] = []
            tasks = []
            for i in range(3):
                tasks.append(asyncio.ensure_future(contender(i, order)))
                while len((await c.info("cl-async-fifo"))["waiters"]) < i + 1:
                    await asyncio.sleep(0.01)
            await holder.release()
            await asyncio.wait_for(asyncio.gather(*tasks), 30)
            assert order == [0, 1, 2]
        finally:
            close = getattr(rc, "aclose", None) or rc.close
            await close()

    asyncio.run(main())


def _on_replica(rep: Any, ok: Any, timeout: float = 10.0) -> Any:
    """``rep.info("replicated")`` once ``ok`` of it (replication is asynchronous)."""
    deadline = time.monotonic() + timeout
    while True:
        info = rep.info("replicated")
        if ok(info) or time.monotonic() > deadline:
            assert ok(info), info
            return info
        time.sleep(0.01)


def test_replica_sees_the_lock_and_refuses_writes(replicated: Any) -> None:
    master, replica = replicated
    m = dlock.Client(master.client(), watchdog_lease=1.5)
    rep = dlock.Client(replica.client())
    lock = m.lock("replicated")
    assert lock.acquire()
    token = lock.token
    # (A WAIT on m.redis would count nothing: the lock commands go on the client's own
    # connections. The replica is asked until it has the change.)
    info = _on_replica(rep, lambda i: i is not None)
    assert info["holders"][0]["token"] == token
    # Watchdog renewals replicate: after more than a lease the replica still has the hold.
    time.sleep(2.5)
    info = rep.info("replicated")
    assert info is not None and info["holders"][0]["owner"].decode() == lock.owner
    with pytest.raises(redis.exceptions.ReadOnlyError):
        rep.lock("replicated").acquire(blocking=False)
    assert lock.release() is Release.RELEASED
    _on_replica(rep, lambda i: i is None)
    m.redis.close()
    rep.redis.close()
