"""The package through redis-py's Sentinel (``master_for``), sync and asyncio: a master,
a replica and a Sentinel (conftest's ``start_sentinel``), a ``SENTINEL FAILOVER``, and
the client following the new master."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import redis
import redis.asyncio
import redis.asyncio.sentinel
import redis.sentinel

import dlock
import dlock.aio
from conftest import START_TIMEOUT, start_sentinel


def holders(server: Any, key: str) -> int:
    c = server.client(decode_responses=True)
    try:
        info = dlock.Client(c).info(key)
    finally:
        c.close()
    return 0 if info is None else len(info.get("holders") or [])


def role(server: Any) -> str:
    c = server.client(decode_responses=True)
    try:
        return str(c.info("replication")["role"])
    finally:
        c.close()


def promoted(master: Any, replica: Any) -> None:
    """Until the promoted replica is a master; then the old master dies (SIGKILL).
    (Alive, it would keep taking writes from connections made before the failover
    until the Sentinel demotes it, up to ~10 s later: see docs/operations.md.)"""
    deadline = time.monotonic() + START_TIMEOUT
    while role(replica) != "master":
        assert time.monotonic() < deadline, "the failover did not complete"
        time.sleep(0.05)
    master.kill()


def retrying(fn: Any) -> Any:
    """``fn()``, tried again on ``ConnectionError`` for a while: the first command
    after the old master died may fail (redis-py retries it on the old address)."""
    deadline = time.monotonic() + START_TIMEOUT
    errors = 0
    while True:
        try:
            return fn(), errors
        except redis.ConnectionError:
            errors += 1
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


async def aretrying(fn: Any) -> Any:
    deadline = time.monotonic() + START_TIMEOUT
    errors = 0
    while True:
        try:
            return await fn(), errors
        except redis.ConnectionError:
            errors += 1
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


def test_sync_client_through_sentinel_follows_a_failover(replicated: Any, servers: Any) -> None:
    master, replica = replicated
    s = start_sentinel(servers, master.port)
    s.wait_replicas(1)
    sentinel = redis.sentinel.Sentinel([("127.0.0.1", s.port)], socket_timeout=5)
    r = sentinel.master_for("dl", socket_timeout=5)
    try:
        locks = dlock.Client(r)
        lock = locks.lock("s-k", replicas=1, replicas_timeout=3)
        assert lock.acquire(timeout=5)
        first = lock.token
        assert holders(master, "s-k") == 1 and holders(replica, "s-k") == 1
        assert lock.release() is dlock.Released

        assert s.failover() == replica.port
        promoted(master, replica)
        # redis-py reconnects (its retries) to the master the Sentinel names now.
        lock = locks.lock("s-k")
        ok, errors = retrying(lambda: lock.acquire(timeout=5))
        assert ok and errors <= 2
        assert lock.token > first, "tokens keep growing across the failover"
        assert holders(replica, "s-k") == 1, "granted on the new master"
        assert lock.release() is dlock.Released
    finally:
        r.close()
        sentinel.close() if hasattr(sentinel, "close") else None


async def test_async_client_through_sentinel_follows_a_failover(replicated: Any, servers: Any) -> None:
    master, replica = replicated
    s = start_sentinel(servers, master.port)
    s.wait_replicas(1)
    sentinel = redis.asyncio.sentinel.Sentinel([("127.0.0.1", s.port)], socket_timeout=5)
    r = sentinel.master_for("dl", socket_timeout=5)
    try:
        locks = dlock.aio.Client(r)
        sem = locks.semaphore("s-sem", 2, replicas=1, replicas_timeout=3)
        assert await sem.acquire(timeout=5)
        assert holders(replica, "s-sem") == 1
        await sem.release()

        loop = asyncio.get_running_loop()
        assert await loop.run_in_executor(None, s.failover) == replica.port
        await loop.run_in_executor(None, promoted, master, replica)
        lock = locks.fair_lock("s-f")
        ok, errors = await aretrying(lambda: lock.acquire(timeout=5))
        assert ok and errors <= 2
        assert holders(replica, "s-f") == 1, "granted on the new master"
        await lock.release()
    finally:
        await r.aclose()
