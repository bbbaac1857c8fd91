"""What a new user hits first (issue 35): ``from_url`` clients and waits longer than
redis-py's default 5 s read timeout, ``release()`` after the lease ended, zero leases,
the "is the module loaded?" hint, and giving up a queued place at once (DLOCK.CANCEL)."""

from __future__ import annotations

import time

import pytest
import redis

import dlock
from dlock import _core


def test_from_url_slice_fits_the_real_socket_timeout() -> None:
    # redis-py 8: from_url leaves socket_timeout out of connection_kwargs, and the
    # connections default to 5 s; redis-py 5: no timeout at all.
    for r in (redis.Redis.from_url("redis://127.0.0.1:1/0"),
              redis.asyncio.Redis.from_url("redis://127.0.0.1:1/0")):
        t = _core.socket_timeout_of(r)
        real = r.connection_pool.make_connection().socket_timeout
        assert t == (float(real) if real else None)
        if t is not None:
            assert _core.wait_slice_for(r, 5.0) < t


async def test_from_url_client_waits_past_5s(api, server) -> None:
    holder = api.client(server)
    assert await holder.lock("fu:held", lease=60).acquire()
    assert await holder.lock("fu:ends", lease=5.5).acquire()
    c = api.from_url(server)

    async def timed_try():
        t0 = time.monotonic()
        try:
            got = await c.lock("fu:held").acquire(timeout=6)
        except dlock.AcquireTimeout as e:
            # The last slice's nil read past the deadline's grace (a loaded machine):
            # still not granted at the deadline, and not cut at the transport's 5 s.
            got = e
        return got, time.monotonic() - t0

    async def with_no_timeout():
        async with c.lock("fu:ends"):
            return True

    a = api.spawn(timed_try)
    b = api.spawn(with_no_timeout)
    got, took = await api.join(a, timeout=60)
    assert (got is False or isinstance(got, dlock.AcquireTimeout)) and took >= 5.9, (got, took)
    assert await api.join(b, timeout=60) is True


async def test_release_after_lost_answers_lost(api, server) -> None:
    c = api.client(server)
    lock = c.lock("rl:lost", lease=2)
    assert await lock.acquire()
    await lock.lost.wait()  # the explicit lease's end, as this client counts it
    assert lock.lost.reason is dlock.LostReason.EXPIRED
    # The server may hold it a few ms more (the margin): release answers what the
    # server found (docs/clients.md, rule 3) — Released when it still had the hold
    # (it was taken from nobody), Lost when it had ended it.
    assert await lock.release() in (dlock.Released, dlock.Lost)
    assert lock.lost.is_set()  # reported lost it was, and stays
    assert not await lock.locked()


async def test_zero_lease_refused_everywhere(api, server) -> None:
    c = api.client(server)
    recipes = pytest.importorskip("dlock.aio_recipes" if api.is_async else "dlock.recipes")
    raw = c if api.is_async else c._o  # noqa: SLF001 - the recipes take the plain client
    made = [
        lambda: c.lock("z", lease=0),
        lambda: c.fair_lock("z", lease=0.0),
        lambda: c.semaphore("z", 2, lease=-1),
        lambda: c.rwlock("z", lease=0),
        lambda: api.wrap_client(api.redis(server), watchdog_lease=0),
        lambda: api.redlock([c], "z", lease=0),
        lambda: api.redlock([c], "z", watchdog_lease=0),
        lambda: api.multilock([c.lock("z")], lease=0),
    ]
    if not api.is_glide:
        made.append(lambda: recipes.Election(raw, "z", lease=0))
    for make in made:
        with pytest.raises(ValueError, match="must be a positive number of seconds"):
            make()
    calls = [
        lambda: c.lock("z").acquire(lease=0),
        lambda: c.fair_lock("z").acquire(timeout=0, lease=0),
        lambda: c.semaphore("z", 2).acquire(lease=0),
        lambda: c.rwlock("z").read().acquire(lease=0),
        lambda: c.rwlock("z").write().acquire(lease=-0.5),
    ]
    for call in calls:
        with pytest.raises(ValueError, match="lease must be a positive number of seconds"):
            await call()
    lk = c.lock("z")
    assert await lk.acquire(lease=5)
    with pytest.raises(ValueError, match="lease must be a positive"):
        await lk.renew(0)
    assert await lk.release() is dlock.Released
    assert await c.info("z") is None  # no refused call reached the server


async def test_module_not_loaded_names_the_fix(api, servers) -> None:
    plain = servers.start(module=False)
    c = api.client(plain)
    checks = [
        lambda: c.lock("m").acquire(timeout=0),
        lambda: c.fair_lock("m").acquire(timeout=0),
        lambda: c.info("m"),
        lambda: c.fenced("m", 1, "SET", "x", "1"),
        lambda: c.execute("DLOCK.SCAN", 0),
    ]
    for call in checks:
        with pytest.raises(dlock.errors.UnknownCommand) as e:
            await call()
        text = str(e.value)
        assert "unknown command" in text.lower()
        assert "dlock module loaded?" in text and "MODULE LIST" in text
        assert "--loadmodule" in text and "MODULE LOAD" in text
    # Not for other commands: the server's own words only.
    with pytest.raises(dlock.errors.UnknownCommand) as e:
        await c.execute("NOSUCHCOMMAND")
    assert "loadmodule" not in str(e.value)
    assert not await c.has_command("dlock.acquire")


async def _no_waiters(c, key: str) -> None:
    """The place was given up: DLOCK.CANCEL is sent in the background, never inside the
    caller's deadline, so it lands a moment after the caller has its answer."""
    from dlock_testkit import eventually

    async def check():
        info = await c.info(key)
        return info is not None and not info.get("waiters")

    await eventually(check, 1.0, f"no waiter left on {key}")


async def _queued(c, key: str, n: int) -> None:
    from dlock_testkit import eventually

    async def check():
        info = await c.info(key)
        return info is not None and len(info.get("waiters") or []) >= n

    await eventually(check, 20.0, f"{n} waiters on {key}")


async def test_fair_try_that_times_out_frees_its_place_at_once(api, server) -> None:
    from dlock_testkit import require_command

    require_command(server, "dlock.cancel", "a fair try that gives up sends it")
    c = api.client(server)
    holder = c.fair_lock("fq", owner="holder")
    assert await holder.acquire(lease=60)
    quitter = c.fair_lock("fq", owner="quitter")
    assert await quitter.acquire(timeout=0) is False  # a try: its place is given up
    await _no_waiters(c, "fq")

    # A waiting try, behind the holder, then a patient owner behind it.
    a = api.spawn(lambda: c.fair_lock("fq", owner="quitter").acquire(timeout=1.0))
    await _queued(c, "fq", 1)
    patient = c.fair_lock("fq", owner="patient")

    async def wait_for_it():
        assert await patient.acquire(timeout=20)
        return time.monotonic()

    b = api.spawn(wait_for_it)
    await _queued(c, "fq", 2)
    assert await api.join(a) is False
    released = time.monotonic()
    assert await holder.release() is dlock.Released
    served = await api.join(b)
    # Not after dlock.fair-queue-timeout-ms (5 s): the quitter's place went with it.
    print(f"FIGURE next owner served after the release ({api.flavour}): "
          f"{(served - released) * 1000:.1f} ms")
    assert served - released < 1.5, served - released


async def test_cancelled_waiter_gives_its_place_up(api, server) -> None:
    from dlock_testkit import require_command

    require_command(server, "dlock.cancel", "a cancelled wait sends it")
    if not api.is_async:
        pytest.skip("asyncio cancellation")
    c = api.client(server)
    holder = c.fair_lock("fc", owner="holder")
    assert await holder.acquire(lease=60)
    for mode in ("server",) if api.is_glide else ("notify", "server"):
        await _cancel_one(c, mode)


async def _cancel_one(c, mode: str) -> None:
    import asyncio

    task = asyncio.ensure_future(c.fair_lock("fc", owner="gone-" + mode, wait_mode=mode).acquire())
    await _queued(c, "fc", 1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await _no_waiters(c, "fc")


async def test_campaign_that_times_out_leaves_no_place(api, server) -> None:
    from dlock_testkit import require_command

    require_command(server, "dlock.cancel", "a campaign that gives up sends it")
    api.needs_redis_py("Election")
    c = api.client(server)
    if api.is_async:
        from dlock import aio_recipes as recipes
        raw = c
    else:
        from dlock import recipes
        raw = c._o  # noqa: SLF001 - the recipes take the plain client
    leader = recipes.Election(raw, "el", owner="leader", lease=30)
    quitter = recipes.Election(raw, "el", owner="quitter", lease=30)

    async def call(v):
        return (await v) if api.is_async else v

    term = await call(leader.campaign())
    assert term is not None
    if api.is_async:
        got = await quitter.campaign(timeout=0.3)
    else:
        got = await api.join(api.spawn(lambda: _sync(quitter.campaign, 0.3)))
    assert got is None
    await _no_waiters(c, "el")
    await call(term.resign())


async def _sync(fn, *a):
    return fn(*a)


def test_keyboard_interrupt_in_a_wait_gives_the_place_up(server) -> None:
    """Ctrl-C during a fair acquire (sync, main thread): DLOCK.CANCEL is sent on the
    way out, so no place stays queued."""
    import os
    import signal
    import threading

    from dlock_testkit import require_command

    require_command(server, "dlock.cancel", "an interrupted wait sends it")
    c = dlock.Client(server.client())
    assert c.fair_lock("ki", owner="holder").acquire(lease=60)
    queued = threading.Event()

    def interrupt() -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            info = c.info("ki")
            if info and info.get("waiters"):
                queued.set()
                os.kill(os.getpid(), signal.SIGINT)  # as Ctrl-C: interrupts the read
                return
            time.sleep(0.01)

    threading.Thread(target=interrupt, daemon=True).start()
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        # NOTIFY: the waiter keeps its fair place between polls (a blocked WAIT's
        # place would go with its connection, which the interrupted read closes).
        c.fair_lock("ki", owner="waiter", wait_mode="notify").acquire(timeout=30)
    assert queued.is_set()
    assert time.monotonic() - t0 < 3  # at once, not at the end of a wait slice
    deadline = time.monotonic() + 1.0  # DLOCK.CANCEL goes in the background
    while c.info("ki").get("waiters") and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not c.info("ki").get("waiters")


async def test_a_module_without_cancel_is_no_error(api, server) -> None:
    if server.has_command("dlock.cancel"):
        pytest.skip("the loaded module has DLOCK.CANCEL (this checks an older one)")
    c = api.client(server)
    assert await c.fair_lock("old", owner="holder").acquire(lease=30)
    assert await c.fair_lock("old", owner="quitter").acquire(timeout=0) is False
    assert c._no_cancel is True  # asked once, then not again on this client
    assert await c.fair_lock("old", owner="quitter").acquire(timeout=0.2) is False
