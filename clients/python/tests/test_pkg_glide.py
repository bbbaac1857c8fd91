"""The Valkey GLIDE adapter (:mod:`dlock.glide`) beyond the shared behaviour suite
(which runs on it as the ``glide`` flavour of ``api``): waits longer than GLIDE's
request timeout, a holder and a waiter on one GLIDE client, WaitMode.NOTIFY, slices
under GLIDE's slow-reply warning, a cluster, and the parts that need redis-py refused
with a message."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

import dlock
import dlock.aio

glide = pytest.importorskip("glide")
from glide import (  # noqa: E402
    GlideClient,
    GlideClientConfiguration,
    GlideClusterClientConfiguration,
    NodeAddress,
)

import dlock.glide  # noqa: E402


def _client(server: Any) -> Any:
    """A dlock client on an adapter made from a configuration (5 s request timeout)."""
    cfg = GlideClientConfiguration([NodeAddress("127.0.0.1", server.port)], request_timeout=5000)
    return dlock.aio.Client(dlock.glide.GlideRedis(cfg))


async def test_default_request_timeout_does_not_cut_a_wait_nor_block_the_client(server: Any) -> None:
    # GLIDE's own default request timeout (250 ms), one client for holder and waiter.
    g = await GlideClient.create(GlideClientConfiguration([NodeAddress("127.0.0.1", server.port)]))
    adapter = dlock.glide.GlideRedis(g)
    try:
        c = dlock.aio.Client(adapter, watchdog_lease=3)
        holder = c.lock("g1", owner="holder")
        assert await holder.acquire()

        async def waiter() -> float:
            t0 = time.monotonic()
            assert await c.lock("g1", owner="waiter").acquire(timeout=20)
            return time.monotonic() - t0

        w = asyncio.ensure_future(waiter())
        # While the waiter waits on the server, the same client still renews and answers.
        await asyncio.sleep(1.2)
        for _ in range(5):
            assert await holder.check()
        await asyncio.sleep(1.0)  # past the watchdog's renewal (every 1 s)
        assert not holder.lost.is_set()
        released = time.monotonic()
        assert await holder.release() is dlock.Released
        waited = await asyncio.wait_for(w, 20)
        assert waited >= 2.0
        assert time.monotonic() - released < 1.5  # served at the release, not a poll later
        assert await c.lock("g1", owner="waiter").release() is dlock.Released
    finally:
        await adapter.aclose()
        await g.close()


async def test_errors_are_the_dlock_errors(server: Any) -> None:
    c = _client(server)
    try:
        with pytest.raises(dlock.errors.NotHeld):
            await c.lock("e").release()
        await c.execute("SET", "plain", "x")
        with pytest.raises(dlock.errors.WrongType):
            await c.lock("plain").acquire(timeout=0)
        with pytest.raises(dlock.errors.UnknownCommand, match="MODULE LIST"):
            await c.execute("DLOCK.NOSUCH", "k")
        with pytest.raises(dlock.errors.InvalidArgument):
            await c.execute("DLOCK.ACQUIRE", "e", "o", "PX", "nope")
    finally:
        await c.redis.aclose()


async def test_notify_waits_on_glide(server: Any) -> None:
    """WaitMode.NOTIFY on the GLIDE adapter: it subscribes on a GLIDE client of its own
    (issue 43: it failed as soon as the acquire had to wait)."""
    c = _client(server)
    try:
        holder = c.lock("busy", owner="x")
        assert await holder.acquire()
        waiter = c.lock("busy", wait_mode="notify")
        assert await waiter.acquire(timeout=0) is False  # a try needs no subscription

        async def release_soon() -> None:
            await asyncio.sleep(1.0)
            await holder.release()

        t = asyncio.ensure_future(release_soon())
        t0 = time.monotonic()
        assert await waiter.acquire(timeout=10)
        took = time.monotonic() - t0
        await t
        assert 0.9 <= took < 3.0, took  # woken by the release's notice, not a slice later
        assert await waiter.release() is dlock.Released
    finally:
        await c.aclose()
        await c.redis.aclose()


def test_notify_waits_on_glide_sync(server: Any) -> None:
    glide_sync = pytest.importorskip("glide_sync")
    import threading

    cfg = glide_sync.GlideClientConfiguration(
        [glide_sync.NodeAddress("127.0.0.1", server.port)], request_timeout=5000)
    adapter = dlock.glide.GlideRedisSync(cfg)
    c = dlock.Client(adapter)
    try:
        holder = c.lock("busy", owner="x")
        assert holder.acquire()
        threading.Timer(1.0, holder.release).start()
        waiter = c.lock("busy", wait_mode="notify")
        t0 = time.monotonic()
        assert waiter.acquire(timeout=10)
        assert 0.9 <= time.monotonic() - t0 < 3.0
        assert waiter.release() is dlock.Released
    finally:
        c.close()
        adapter.close()


async def test_a_full_slice_stays_under_glides_slow_reply_warning(server: Any, capfd: Any) -> None:
    """GLIDE logs a reply that took more than half its request timeout ("Response wait
    took 5.07s (threshold=4.25s…)", issue 45): the waiting clients' timeout is twice the
    slice + 1 s, so a full 4 s slice stays under it."""
    adapter = dlock.glide.GlideRedis(
        GlideClientConfiguration([NodeAddress("127.0.0.1", server.port)]))
    c = dlock.aio.Client(adapter)
    try:
        assert c._slice() == 4.0
        assert adapter.wait_timeout / 2 > c._slice() + 0.25
        holder = c.lock("slow", owner="holder")
        assert await holder.acquire(lease=30)
        t0 = time.monotonic()
        assert await c.lock("slow", owner="waiter").acquire(timeout=4.5) is False
        assert time.monotonic() - t0 >= 4.4  # one full slice, then the rest
        out, err = capfd.readouterr()
        assert "Response wait took" not in out + err, out + err
    finally:
        await c.aclose()
        await adapter.aclose()


async def test_what_needs_redis_py_is_refused(server: Any) -> None:
    c = _client(server)
    try:
        await c.lock("busy", owner="x").acquire()
        with pytest.raises(dlock.DlockError, match="durable grants.*GLIDE"):
            await c.lock("d", replicas=1).acquire()
        from dlock import aio_recipes

        with pytest.raises(ValueError, match="Election needs a redis-py client.*GLIDE"):
            aio_recipes.Election(c, "el")

        async def job(ctx: Any) -> int:
            return ctx.token

        r = await aio_recipes.run_once(c, "job", job, at_most_for=5)
        assert r.outcome is aio_recipes.Outcome.RAN and r.value == r.token
    finally:
        await c.redis.aclose()


async def test_cluster(cluster: Any) -> None:
    cfg = GlideClusterClientConfiguration(
        [NodeAddress("127.0.0.1", cluster.nodes[0].port)], request_timeout=5000
    )
    adapter = dlock.glide.GlideRedis(cfg)
    try:
        c = dlock.aio.Client(adapter)
        keys = [f"gc{i}" for i in range(12)]  # spread over the three masters
        for k in keys:
            assert await c.lock(k, owner="a").acquire(lease=30)
        on = []
        for n in cluster.nodes:
            r = n.client()
            on.append(r.dbsize())
            r.close()
        assert sum(on) == len(keys) and all(on), on  # each lock on its own key's node
        lk = c.lock("gc0", owner="b")
        t0 = time.monotonic()
        assert await lk.acquire(timeout=1.0) is False  # a wait on the key's node, not cut
        assert time.monotonic() - t0 >= 0.9
        assert await c.lock("gc0", owner="a").release() is dlock.Released
        assert await lk.acquire(timeout=5)
        assert await lk.release() is dlock.Released
        assert await c.has_command("dlock.acquire")
    finally:
        await adapter.aclose()


def test_sync_adapter_default_timeout_and_one_client(server: Any) -> None:
    """The same with GLIDE's sync client (``valkey-glide-sync``) and dlock.Client:
    threads instead of tasks."""
    glide_sync = pytest.importorskip("glide_sync")
    import threading

    g = glide_sync.GlideClient.create(
        glide_sync.GlideClientConfiguration([glide_sync.NodeAddress("127.0.0.1", server.port)])
    )
    adapter = dlock.glide.GlideRedisSync(g)
    try:
        c = dlock.Client(adapter, watchdog_lease=3)
        holder = c.lock("gs", owner="holder")
        assert holder.acquire()
        got: list = []

        def waiter() -> None:
            t0 = time.monotonic()
            got.append(c.lock("gs", owner="waiter").acquire(timeout=20))
            got.append(time.monotonic() - t0)

        t = threading.Thread(target=waiter, daemon=True)
        t.start()
        time.sleep(2.2)  # the waiter waits; the same client renews (every 1 s) and answers
        assert holder.check() and not holder.lost.is_set()
        assert holder.release() is dlock.Released
        t.join(20)
        assert got[0] is True and got[1] >= 2.0
        assert c.lock("gs", owner="waiter").release() is dlock.Released
        assert c.lock("gs2", owner="x").acquire(lease=30)
    finally:
        c.close()
        adapter.close()
        g.close()
