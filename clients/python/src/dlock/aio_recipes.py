"""The asyncio flavour of :mod:`dlock.recipes`: :func:`run_once` and :class:`Election`
on a :class:`dlock.aio.Client` (``redis.asyncio.Redis``), with the same semantics
(``docs/recipes.md``) and coroutines for everything that talks to the server.

>>> from dlock.aio_recipes import run_once, Election                  # doctest: +SKIP
>>> async def job(ctx): return ctx.token                              # doctest: +SKIP
>>> r = await run_once(locks, "nightly", job, at_most_for=60)         # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any, Awaitable, Callable, Dict, Optional, TypeVar

import redis.asyncio as _aredis
from redis.backoff import NoBackoff
from redis.asyncio.retry import Retry

from . import _core, _ops
from ._core import LostReason, Release, Renewal
from ._lost import AsyncLostSignal
from .aio import Client
from .errors import Fenced, NotHeld
from .recipes import Leader, Outcome, RunResult, _text, _value, value_key

T = TypeVar("T")
_RUNS = itertools.count(1)

__all__ = ["AsyncJobContext", "Election", "Leader", "Observer", "Outcome", "RunResult", "Term", "run_once"]


class AsyncJobContext:
    """What the job gets: ``token``, ``lost`` (an :class:`~dlock.AsyncLostSignal`), and
    the coroutines ``fenced(*command)`` / ``check()`` bound to the run's token."""

    def __init__(self, client: Client, name: str, owner: str, token: int, lost: AsyncLostSignal) -> None:
        self.client, self.name, self.owner, self.token, self.lost = client, name, owner, token, lost

    async def fenced(self, *command: Any) -> Any:
        try:
            return await self.client.fenced(self.name, self.token, *command)
        except Fenced:
            self.lost._mark(LostReason.NOT_HELD)
            raise

    async def check(self) -> bool:
        live = await self.client.check(self.name, self.token)
        if not live:
            self.lost._mark(LostReason.NOT_HELD)
        return live


async def _renew_loop(client: Client, key: str, owner: str, lease: float, lost: AsyncLostSignal) -> None:
    interval = lease / 3.0
    while True:
        await asyncio.sleep(interval)
        if lost.is_set():
            return
        sent = time.monotonic()
        try:
            ok = await client.execute("DLOCK.RENEW", key, owner, "PX", _core.lease_ms(lease))
        except Exception:
            interval = max(0.02, lease / 10.0)
            continue
        if ok == 1:
            lost._set_deadline(sent + lease - _core.lost_margin(lease))
            interval = lease / 3.0
        else:
            lost._mark(LostReason.NOT_HELD)
            return


async def run_once(
    client: Client,
    name: str,
    job: Callable[[AsyncJobContext], Awaitable[T]],
    *,
    at_most_for: float,
    at_least_for: float = 0.0,
    renew: bool = False,
    owner: Optional[str] = None,
) -> RunResult[T]:
    """:func:`dlock.recipes.run_once` for asyncio: ``job(ctx)`` is awaited."""
    if not at_most_for > 0:
        raise ValueError("at_most_for must be a positive number of seconds")
    if at_least_for < 0 or at_least_for > at_most_for:
        raise ValueError("at_least_for must be between 0 and at_most_for")
    who = f"{owner if owner is not None else client.owner()}:run{next(_RUNS)}"
    sent = time.monotonic()
    reply = await client.execute("DLOCK.ACQUIRE", name, who, "PX", _core.lease_ms(at_most_for), "WAIT", 0)
    token = _core.parse_token(reply)
    if token is None:
        return RunResult(Outcome.SKIPPED)
    lost = AsyncLostSignal(sent + at_most_for - _core.lost_margin(at_most_for))
    renewer = asyncio.ensure_future(_renew_loop(client, name, who, at_most_for, lost)) if renew else None
    value: Optional[T] = None
    try:
        value = await job(AsyncJobContext(client, name, who, token, lost))
    finally:
        if renewer is not None:
            renewer.cancel()
        await _finish(client, name, who, sent, at_least_for, lost)
    if lost.is_set():
        return RunResult(Outcome.LOST, value, token, lost.reason)
    return RunResult(Outcome.RAN, value, token)


async def _finish(client: Client, name: str, who: str, start: float, at_least_for: float,
                  lost: AsyncLostSignal) -> None:
    if lost.is_set():
        try:
            await client.execute("DLOCK.RELEASE", name, who)
        except Exception:
            pass
        return
    left = start + at_least_for - time.monotonic()
    try:
        if left > 0.0005:
            if await client.execute("DLOCK.RENEW", name, who, "PX", _core.lease_ms(left)) != 1:
                lost._mark(LostReason.NOT_HELD)
        else:
            await client.execute("DLOCK.RELEASE", name, who)
        lost._set_deadline(None)
    except NotHeld:
        lost._mark(LostReason.NOT_HELD)


class Term:
    """:class:`dlock.recipes.Term` for asyncio (``proclaim``, ``fenced``, ``resign`` are
    coroutines; ``lost`` is an :class:`~dlock.AsyncLostSignal`)."""

    def __init__(self, election: "Election", token: int, start: float, conn: Optional[Any]) -> None:
        self.election, self.token, self.owner = election, token, election.owner
        lease = election.lease
        self.lost = AsyncLostSignal(start + lease - _core.lost_margin(lease))
        self._conn = conn
        self._done = False
        client = election.client
        args = ("DLOCK.RENEW", election.name, self.owner, "PX", _core.lease_ms(lease))

        def renew(timeout: float) -> _ops.Op[Renewal]:
            sent = yield _ops.NOW
            try:
                v = yield from _ops.command(client, *args)
            except Exception:
                return Renewal.FAILED
            if v == 1:
                self.lost._set_deadline(sent + lease - _core.lost_margin(lease))
                return Renewal.RENEWED
            return Renewal.LOST if v == 0 else Renewal.FAILED

        self._watchdog = client._flavour.watchdog(
            renew, lease, election.renew_interval, start, self.lost._mark, LostReason.NOT_HELD
        )
        self._monitor: Optional["asyncio.Future[None]"] = None

    async def _start_monitor(self) -> None:
        e = self.election
        ps = e.client.redis.pubsub(ignore_subscribe_messages=True)
        await ps.subscribe(e.channel)

        async def watch() -> None:
            try:
                while not self._done and not self.lost.is_set():
                    msg = await ps.get_message(timeout=0.5)
                    if msg is None or self._done:
                        continue
                    if not await e.client.check(e.name, self.token):
                        self.lost._mark(LostReason.NOT_HELD)
            except Exception:
                pass
            finally:
                try:
                    await ps.aclose()
                except Exception:
                    pass

        self._monitor = asyncio.ensure_future(watch())

    def is_lost(self) -> bool:
        return self.lost.is_set()

    async def fenced(self, *command: Any) -> Any:
        e = self.election
        try:
            return await e.client.fenced(e.name, self.token, *command)
        except Fenced:
            self.lost._mark(LostReason.NOT_HELD)
            raise

    async def proclaim(self, value: Any) -> None:
        e = self.election
        await self.fenced("HSET", e.value_key, "token", self.token, "owner", self.owner, "value", value)
        await e._publish("proclaimed")

    async def resign(self) -> Release:
        if self._done:
            return Release.LOST if self.lost.is_set() else Release.RELEASED
        self._done = True
        self._watchdog.stop()
        e = self.election
        try:
            await e.client.fenced(e.name, self.token, "DEL", e.value_key)
        except Fenced:
            pass
        try:
            outcome = _core.parse_release(await e.client.execute("DLOCK.RELEASE", e.name, self.owner))
        except NotHeld:
            outcome = Release.LOST
        finally:
            c, self._conn = self._conn, None
            if c is not None:
                try:
                    await c.aclose()
                except Exception:
                    pass
            if self._monitor is not None:
                await asyncio.gather(self._monitor, return_exceptions=True)
        if outcome is Release.LOST:
            self.lost._mark(LostReason.NOT_HELD)
        else:
            self.lost._set_deadline(None)
        return outcome

    async def __aenter__(self) -> "Term":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.resign()


class Election:
    """:class:`dlock.recipes.Election` for asyncio, on a standalone ``redis.asyncio.Redis``."""

    def __init__(
        self,
        client: Client,
        name: str,
        *,
        owner: Optional[str] = None,
        lease: Optional[float] = None,
        renew_interval: Optional[float] = None,
        bind: bool = False,
        lock_delay: Optional[float] = None,
    ) -> None:
        if client._cluster:
            raise ValueError("Election needs a standalone redis.asyncio.Redis (cluster: not yet)")
        self.client, self.name = client, name
        self.owner = owner if owner is not None else f"{client.prefix}:election{next(_RUNS)}"
        self.lease = _core.check_lease(lease if lease is not None else client.watchdog_lease)
        self.renew_interval = float(renew_interval if renew_interval is not None else self.lease / 3.0)
        self.bind, self.lock_delay = bind, lock_delay
        self.value_key = value_key(name)
        self.channel = _core.channel_for(name)
        self.term: Optional[Term] = None

    def _dedicated(self) -> Any:
        kw: Dict[str, Any] = _core.connection_kwargs(self.client.redis)
        for k in ("retry", "retry_on_timeout", "retry_on_error", "connection_pool", "single_connection_client"):
            kw.pop(k, None)
        kw["retry"] = Retry(NoBackoff(), 0)
        pool = _aredis.ConnectionPool(
            connection_class=self.client.redis.connection_pool.connection_class, max_connections=1, **kw
        )
        return _aredis.Redis(connection_pool=pool, single_connection_client=True)

    async def campaign(self, timeout: Optional[float] = None) -> Optional[Term]:
        old = self.term
        if old is not None and not old._done:
            if not old.is_lost():
                return old
            await old.resign()  # a lost term: stop its monitor, close its bound connection
        conn = self._dedicated()
        slice_ = _core.wait_slice_for(conn, self.client.wait_slice)
        lms = _core.lease_ms(self.lease)
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        extra: list = []
        if self.bind:
            extra.append("BIND")
        if self.lock_delay:
            extra += ["LOCKDELAY", _core.ceil_ms(self.lock_delay)]
        try:
            while True:
                sent = time.monotonic()
                left = slice_ if deadline is None else max(0.0, deadline - sent)
                reply = await conn.execute_command(
                    "DLOCK.FAIRACQUIRE", self.name, self.owner, "PX", lms, "WAIT", int(min(left, slice_) * 1000),
                    *extra,
                )
                token = _core.parse_token(reply)
                if token is not None:
                    now = time.monotonic()
                    if now - sent > _core.lease_clock_slack(self.lease):
                        if await conn.execute_command("DLOCK.RENEW", self.name, self.owner, "PX", lms) != 1:
                            continue
                        sent = now
                    break
                if deadline is not None and time.monotonic() >= deadline:
                    await conn.aclose()
                    return None
        except BaseException:
            await conn.aclose()
            raise
        if not self.bind:
            await conn.aclose()
            conn = None
        self.term = Term(self, token, sent, conn)
        await self.term._start_monitor()
        await self._publish("elected")
        return self.term

    async def _publish(self, what: str) -> None:
        try:
            await self.client.execute("PUBLISH", self.channel, what)
        except Exception:
            pass

    async def resign(self) -> Optional[Release]:
        t = self.term
        return None if t is None else await t.resign()

    async def proclaim(self, value: Any) -> None:
        t = self.term
        if t is None or t._done:
            raise NotHeld(f"not the leader of {self.name!r}: campaign first")
        await t.proclaim(value)

    async def leader(self) -> Optional[Leader]:
        pipe = self.client.redis.pipeline(transaction=True)
        pipe.execute_command("DLOCK.INFO", self.name)
        pipe.hgetall(self.value_key)
        info_raw, proclaimed = await pipe.execute()
        info = _core.parse_info(info_raw)
        if not info:
            return None
        for h in info.get("holders") or []:
            if not isinstance(h, dict) or h.get("delayed") is not None:
                continue
            token = int(h.get("token") or 0)
            fields = {_text(k): v for k, v in (proclaimed or {}).items()}
            value = None
            if fields.get("token") is not None and int(fields["token"]) == token:
                value = _value(fields.get("value"))
            return Leader(_text(h.get("owner")), token, value)
        return None

    async def observe(self) -> "Observer":
        """An :class:`Observer` (subscribed when this returns): ``await obs.next(timeout)``
        or ``async for leader in obs``."""
        obs = Observer(self)
        await obs._ps.subscribe(self.channel)
        return obs


class Observer:
    """Leader changes of one asyncio :class:`Election`."""

    _UNSEEN: Any = object()

    def __init__(self, election: Election) -> None:
        self.election = election
        self._ps = election.client.redis.pubsub(ignore_subscribe_messages=True)
        self._last: Any = Observer._UNSEEN

    async def next(self, timeout: Optional[float] = None) -> Optional[Leader]:
        """The next state that differs from the last one returned (first: the current
        state); ``TimeoutError`` when nothing changed within ``timeout``."""
        end = None if timeout is None else time.monotonic() + timeout
        dirty = self._last is Observer._UNSEEN
        while True:
            if dirty:
                now = await self.election.leader()
                if now != self._last:
                    self._last = now
                    return now
            left = 1.0 if end is None else end - time.monotonic()
            if left <= 0:
                raise TimeoutError("no leader change")
            msg = await self._ps.get_message(timeout=min(left, 1.0))
            dirty = msg is not None

    def __aiter__(self) -> "Observer":
        return self

    async def __anext__(self) -> Optional[Leader]:
        return await self.next()

    async def aclose(self) -> None:
        try:
            await self._ps.aclose()
        except Exception:
            pass
