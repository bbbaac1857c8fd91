"""The asyncio flavour: on ``redis.asyncio.Redis`` or ``redis.asyncio.RedisCluster``;
one owner per task. The same API as the sync flavour (:mod:`dlock`), with coroutines
for everything that talks to the server and ``async with``."""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import time
from typing import (
    Any,
    Awaitable,
    Callable,
    Dict,
    Iterable,
    List,
    Optional,
    Sequence,
    Tuple,
    Union,
)

from redis.exceptions import ResponseError

from . import _core
from ._core import (
    DEFAULT_RENEW_INTERVAL,
    DEFAULT_WAIT_SLICE,
    DEFAULT_WATCHDOG_LEASE,
    Kind,
    KeyT,
    LostReason,
    Release,
    Renewal,
    Schedule,
    WaitMode,
)
from ._lost import AsyncLostSignal
from .errors import AcquireTimeout, DlockError, NotHeld, map_error

__all__ = [
    "Client",
    "Lock",
    "FairLock",
    "RWLock",
    "ReadLock",
    "WriteLock",
    "Semaphore",
    "Latch",
    "MultiLock",
    "RedLock",
    "AsyncLostSignal",
]

log = logging.getLogger("dlock")

OnLost = Callable[[KeyT, LostReason], Any]
_UNSET: Any = object()


def _is_cluster(r: Any) -> bool:
    try:
        from redis.asyncio.cluster import RedisCluster
    except ImportError:  # pragma: no cover
        return False
    return isinstance(r, RedisCluster)


async def _on_all(calls: Sequence[Callable[[], Awaitable[Any]]], timeout: float) -> List[Any]:
    """Runs every call concurrently; each result or exception (TimeoutError for one that
    did not answer within ``timeout``)."""

    async def one(fn: Callable[[], Awaitable[Any]]) -> Any:
        try:
            return await asyncio.wait_for(fn(), timeout)
        except asyncio.TimeoutError:
            return TimeoutError("no answer in time")
        except Exception as e:  # noqa: BLE001
            return e

    return list(await asyncio.gather(*(one(fn) for fn in calls)))


def _call_back(cb: Optional[OnLost], key: KeyT, reason: LostReason) -> None:
    if cb is None:
        return
    try:
        r = cb(key, reason)
        if inspect.isawaitable(r):
            asyncio.ensure_future(r)
    except Exception:
        log.exception("dlock: on_lost callback failed")


def _run_callbacks(callbacks: Sequence[Optional[OnLost]], key: KeyT, reason: LostReason) -> None:
    for cb in callbacks:
        _call_back(cb, key, reason)


def _call_at(when: float, fn: Callable[[], Any]) -> None:
    """Runs ``fn`` on the running loop at ``time.monotonic()`` instant ``when``."""
    asyncio.get_running_loop().call_later(max(0.0, when - time.monotonic()) + 0.001, fn)


class _Watchdog:
    """Renews a lease while the hold lives: one asyncio task per hold."""

    def __init__(
        self,
        renew: Callable[[float], Awaitable[Renewal]],
        lease: float,
        interval: float,
        confirmed: float,
        on_lost: Callable[[LostReason], None],
        lost_reason: LostReason = LostReason.NOT_HELD,
    ) -> None:
        self._renew = renew
        self._plan = Schedule(lease, interval, confirmed)
        self._on_lost = on_lost
        self._lost_reason = lost_reason
        self._stopped = False
        self.last_renewed: Optional[float] = None
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        plan = self._plan
        while True:
            await asyncio.sleep(max(0.0, plan.wake_at() - time.monotonic()))
            if self._stopped:
                return
            now = time.monotonic()
            if now >= plan.lost_at():
                self._on_lost(LostReason.UNREACHABLE)
                return
            try:
                outcome = await asyncio.wait_for(
                    self._renew(plan.attempt_timeout(now)), plan.attempt_timeout(now)
                )
            except asyncio.CancelledError:
                raise
            except Exception:
                outcome = Renewal.FAILED
            if self._stopped:
                return
            if outcome is Renewal.RENEWED:
                plan.renewed(now)
                self.last_renewed = now
            elif outcome is Renewal.LOST:
                self._on_lost(self._lost_reason)
                return
            else:
                plan.failed(time.monotonic())

    def stop(self) -> None:
        self._stopped = True
        if not self._task.done():
            self._task.cancel()


class _Hold:
    __slots__ = ("kind", "key", "owner", "token", "depth", "lost", "watchdog", "lease")

    def __init__(self, kind: Kind, key: KeyT, owner: str, token: int, lost: AsyncLostSignal) -> None:
        self.kind = kind
        self.key = key
        self.owner = owner
        self.token = token
        self.depth = 0
        self.lost = lost
        self.watchdog: Optional[_Watchdog] = None
        self.lease: Optional[float] = None

    def stop(self) -> None:
        if self.watchdog is not None:
            self.watchdog.stop()
            self.watchdog = None


def _hold_key(kind: Kind, key: KeyT, owner: str) -> Tuple[str, bytes, str]:
    raw = key.encode() if isinstance(key, str) else bytes(key)
    return (kind.value, raw, owner)


class Client:
    """dlock on one ``redis.asyncio`` client. Parameters as for :class:`dlock.Client`;
    ``on_lost`` may be a coroutine function."""

    def __init__(
        self,
        redis: Any,
        *,
        watchdog_lease: float = DEFAULT_WATCHDOG_LEASE,
        renew_interval: Optional[float] = None,
        wait_slice: float = DEFAULT_WAIT_SLICE,
        owner_prefix: Optional[str] = None,
        on_lost: Optional[OnLost] = None,
    ) -> None:
        self.redis = redis
        self.watchdog_lease = float(watchdog_lease)
        if renew_interval is None:
            renew_interval = (
                DEFAULT_RENEW_INTERVAL
                if watchdog_lease == DEFAULT_WATCHDOG_LEASE
                else self.watchdog_lease / 3.0
            )
        self.renew_interval = float(renew_interval)
        self.wait_slice = float(wait_slice)
        self.prefix = owner_prefix or _core.new_prefix()
        self.on_lost = on_lost
        self._holds: Dict[Tuple[str, bytes, str], _Hold] = {}
        self._cluster = _is_cluster(redis)

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> "Client":
        import redis.asyncio as _redis

        return cls(_redis.Redis.from_url(url), **kwargs)

    def owner(self) -> str:
        """The owner id of the running task: ``<uuid>:task<n>``."""
        return f"{self.prefix}:{_core.task_tag()}"

    def lock(self, name: KeyT, **kwargs: Any) -> "Lock":
        return Lock(self, name, **kwargs)

    def fair_lock(self, name: KeyT, **kwargs: Any) -> "FairLock":
        return FairLock(self, name, **kwargs)

    def rwlock(self, name: KeyT, **kwargs: Any) -> "RWLock":
        return RWLock(self, name, **kwargs)

    def semaphore(self, name: KeyT, limit: int, **kwargs: Any) -> "Semaphore":
        return Semaphore(self, name, limit, **kwargs)

    def latch(self, name: KeyT) -> "Latch":
        return Latch(self, name)

    async def execute(self, *args: Any, own_errors: bool = True) -> Any:
        try:
            return await self.redis.execute_command(*args)
        except ResponseError as e:
            mapped = map_error(e, own_errors=own_errors)
            if mapped is e:
                raise
            raise mapped from e

    async def info(self, key: KeyT) -> Optional[Dict[str, Any]]:
        return _core.parse_info(await self.execute("DLOCK.INFO", key))

    async def force_release(self, key: KeyT) -> bool:
        return bool(await self.execute("DLOCK.FORCERELEASE", key))

    async def check(self, key: KeyT, token: int) -> bool:
        return bool(await self.execute("DLOCK.CHECK", key, int(token)))

    async def fenced(self, key: KeyT, token: int, *command: Any) -> Any:
        if not command:
            raise ValueError("fenced() needs a command to run")
        return await self.execute("DLOCK.FENCED", key, int(token), *command, own_errors=False)

    async def has_command(self, name: str) -> bool:
        # Sent without arguments: an arity error when the server knows the command,
        # "unknown command" when it does not (and nothing runs either way).
        # (On a cluster: any one node; every node loads the same module.)
        kw: Dict[str, Any] = {}
        if self._cluster:
            await self.redis.initialize()  # loads the slots map (no-op when done)
            kw["target_nodes"] = self.redis.get_random_node()
        try:
            await self.redis.execute_command(name, **kw)
        except ResponseError as e:
            return "unknown command" not in str(e).lower()
        return True

    # -- internals ----------------------------------------------------------------

    def _slice(self) -> float:
        return _core.wait_slice_for(self.redis, self.wait_slice)

    async def _acquire(
        self,
        kind: Kind,
        key: KeyT,
        owner: str,
        lease: Optional[float],
        timeout: Optional[float],
        mode: WaitMode,
        extra: Dict[str, Any],
    ) -> Optional[Tuple[int, float]]:
        lease_s = self.watchdog_lease if lease is None else float(lease)
        lms = _core.lease_ms(lease_s)
        if mode is WaitMode.NOTIFY and timeout != 0:
            return await self._acquire_notified(kind, key, owner, lease_s, lms, timeout, extra)
        slice_ = self._slice()
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        while True:
            left = slice_ if deadline is None else max(0.0, deadline - time.monotonic())
            wms = int(min(left, slice_) * 1000)
            sent = time.monotonic()
            token = _core.parse_token(
                await self.execute(*_core.acquire_args(kind, key, owner, lms, wms, **extra))
            )
            if token is not None:
                start = await self._anchor(key, owner, lms, lease_s, sent)
                if start is not None:
                    return token, start
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return None
            if slice_ < 0.001:
                await asyncio.sleep(min(0.05, slice_ if deadline is None else deadline - now))

    async def _anchor(self, key: KeyT, owner: str, lms: int, lease_s: float, sent: float) -> Optional[float]:
        if time.monotonic() - sent <= _core.lease_clock_slack(lease_s):
            return sent
        renew_sent = time.monotonic()
        if _core.parse_renewed(await self.execute(*_core.renew_args(key, owner, lms))):
            return renew_sent
        return None

    async def _acquire_notified(
        self,
        kind: Kind,
        key: KeyT,
        owner: str,
        lease_s: float,
        lms: int,
        timeout: Optional[float],
        extra: Dict[str, Any],
    ) -> Optional[Tuple[int, float]]:
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)

        async def attempt() -> Optional[Tuple[int, float]]:
            sent = time.monotonic()
            token = _core.parse_token(
                await self.execute(*_core.acquire_args(kind, key, owner, lms, 0, **extra))
            )
            if token is None:
                return None
            start = await self._anchor(key, owner, lms, lease_s, sent)
            return None if start is None else (token, start)

        got = await attempt()
        if got is not None:
            return got
        if not hasattr(self.redis, "pubsub"):
            raise DlockError(
                "WaitMode.NOTIFY needs pub/sub, which this redis-py asyncio cluster client "
                "lacks; use WaitMode.SERVER or a newer redis-py"
            )
        slice_ = self.wait_slice
        if kind is Kind.FAIR:
            slice_ = min(slice_, 1.0)
        channel = _core.channel_for(key)
        ps = self.redis.pubsub()
        try:
            if self._cluster:
                await ps.ssubscribe(channel)
                get = ps.get_sharded_message
            else:
                await ps.subscribe(channel)
                get = ps.get_message
            while True:
                got = await attempt()
                if got is not None:
                    return got
                left = slice_ if deadline is None else deadline - time.monotonic()
                if left <= 0:
                    return None
                await get(timeout=max(0.001, min(left, slice_)))
        finally:
            close = getattr(ps, "aclose", None) or getattr(ps, "close", None)
            try:
                if close is not None:
                    r = close()
                    if inspect.isawaitable(r):
                        await r
            except Exception:  # pragma: no cover
                pass

    def _granted(
        self,
        kind: Kind,
        key: KeyT,
        owner: str,
        token: int,
        start: float,
        lease: Optional[float],
        amount: int,
        on_lost: Optional[OnLost],
    ) -> _Hold:
        hk = _hold_key(kind, key, owner)
        hold = self._holds.get(hk)
        if hold is None or hold.token != token or hold.lost.is_set():
            if hold is not None:
                hold.stop()
            sig = AsyncLostSignal()
            sig._add_listener(functools.partial(_run_callbacks, (on_lost, self.on_lost), key))
            hold = _Hold(kind, key, owner, token, sig)
            self._holds[hk] = hold
        hold.depth += amount
        if lease is None:
            hold.lost._set_deadline(None)
            if hold.watchdog is None:
                hold.watchdog = self._start_watchdog(hold, start, on_lost)
        elif hold.watchdog is None:
            self._arm_deadline(hold, start, lease, on_lost)
        return hold

    def _arm_deadline(self, hold: _Hold, start: float, lease: float, on_lost: Optional[OnLost]) -> None:
        hold.lease = lease
        deadline = start + lease - _core.lost_margin(lease)
        hold.lost._set_deadline(deadline)
        if on_lost is not None or self.on_lost is not None:
            _call_at(deadline, hold.lost.is_set)

    def _start_watchdog(self, hold: _Hold, start: float, on_lost: Optional[OnLost]) -> _Watchdog:
        lease = self.watchdog_lease
        args = _core.renew_args(hold.key, hold.owner, _core.lease_ms(lease))

        async def renew(timeout: float) -> Renewal:
            try:
                v = await self.execute(*args)
            except asyncio.CancelledError:
                raise
            except Exception:
                return Renewal.FAILED
            answer = _core.parse_renewed(v)
            if answer is None:
                return Renewal.FAILED
            return Renewal.RENEWED if answer else Renewal.LOST

        return _Watchdog(
            renew, lease, self.renew_interval, start,
            lambda reason: self._lost(hold, reason, on_lost),
        )

    def _lost(self, hold: _Hold, reason: LostReason, on_lost: Optional[OnLost]) -> None:
        hold.lost._mark(reason)  # its listener runs the callbacks

    def _hold(self, kind: Kind, key: KeyT, owner: str) -> Optional[_Hold]:
        return self._holds.get(_hold_key(kind, key, owner))

    async def _release(
        self, kind: Kind, key: KeyT, owner: str, amount: int, on_lost: Optional[OnLost], permits: Optional[int]
    ) -> Release:
        hk = _hold_key(kind, key, owner)
        hold = self._holds.get(hk)
        final = hold is None or hold.depth <= amount
        if hold is not None and final:
            hold.stop()
        try:
            outcome = _core.parse_release(
                await self.execute(*_core.release_args(kind, key, owner, permits))
            )
        except NotHeld:
            if hold is None:
                raise
            outcome = Release.LOST
        except BaseException:
            if hold is not None and final and self._holds.get(hk) is hold:
                del self._holds[hk]
            raise
        if hold is not None:
            hold.depth -= amount
            if outcome is not Release.STILL_HELD or hold.depth <= 0:
                hold.stop()
                if self._holds.get(hk) is hold:
                    del self._holds[hk]
            if outcome is Release.RELEASED:
                hold.lost._set_deadline(None)  # let go in time: never "lost"
        if outcome is Release.LOST and hold is not None:
            self._lost(hold, LostReason.NOT_HELD, on_lost)
        return outcome


class _Base:
    _kind: Kind = Kind.MUTEX

    def __init__(
        self,
        client: Client,
        name: KeyT,
        *,
        timeout: Optional[float] = None,
        lease: Optional[float] = None,
        wait_mode: WaitMode = WaitMode.SERVER,
        owner: Optional[str] = None,
        on_lost: Optional[OnLost] = None,
        bind: bool = False,
        lock_delay: Optional[float] = None,
    ) -> None:
        self.client = client
        self.name = name
        self.timeout = timeout
        self.lease = lease
        self.wait_mode = WaitMode(wait_mode)
        self._owner = owner
        self.on_lost = on_lost
        self.bind = bind
        self.lock_delay = lock_delay
        self._lost_by_owner: Dict[str, AsyncLostSignal] = {}

    @property
    def kind(self) -> Kind:
        return self._kind

    @property
    def owner(self) -> str:
        """The owner id this lock acts with from the running task."""
        return self._owner if self._owner is not None else self.client.owner()

    def _current(self) -> Optional[_Hold]:
        return self.client._hold(self._kind, self.name, self.owner)

    @property
    def token(self) -> Optional[int]:
        h = self._current()
        return None if h is None else h.token

    @property
    def lost(self) -> AsyncLostSignal:
        h = self._current()
        if h is not None:
            return h.lost
        sig = self._lost_by_owner.get(self.owner)
        return sig if sig is not None else AsyncLostSignal()

    def held(self) -> bool:
        h = self._current()
        return h is not None and not h.lost.is_set()

    async def locked(self) -> bool:
        """Whether anyone holds this lock now (``DLOCK.INFO``)."""
        info = await self.client.info(self.name)
        return bool(info and info.get("holders"))

    async def renew(self, lease: Optional[float] = None) -> bool:
        """``DLOCK.RENEW``; see :meth:`dlock.Lock.renew`."""
        h = self._current()
        if lease is None:
            lease = h.lease if h is not None and h.lease else self.client.watchdog_lease
        sent = time.monotonic()
        args = _core.renew_args(self.name, self.owner, _core.lease_ms(lease))
        if _core.parse_renewed(await self.client.execute(*args)):
            if h is not None and h.watchdog is None:
                self.client._arm_deadline(h, sent, lease, self.on_lost)
            return True
        if h is not None:
            self.client._lost(h, LostReason.NOT_HELD, self.on_lost)
        return False

    def _extra(self, bind: Optional[bool], lock_delay: Optional[float]) -> Dict[str, Any]:
        extra: Dict[str, Any] = {}
        if self.bind if bind is None else bind:
            extra["bind"] = True
        ld = self.lock_delay if lock_delay is None else lock_delay
        if ld:
            extra["lock_delay"] = _core.ceil_ms(ld)
        return extra

    async def _do_acquire(self, blocking: bool, timeout: Any, lease: Any, amount: int, extra: Dict[str, Any]) -> bool:
        timeout = self.timeout if timeout is _UNSET else timeout
        lease = self.lease if lease is _UNSET else lease
        if not blocking:
            timeout = 0
        owner = self.owner
        got = await self.client._acquire(self._kind, self.name, owner, lease, timeout, self.wait_mode, extra)
        if got is None:
            return False
        hold = self.client._granted(self._kind, self.name, owner, got[0], got[1], lease, amount, self.on_lost)
        self._lost_by_owner[owner] = hold.lost
        return True

    async def _do_release(self, amount: int, permits: Optional[int] = None) -> Release:
        return await self.client._release(self._kind, self.name, self.owner, amount, self.on_lost, permits)

    async def check(self) -> bool:
        return await self.client.check(self.name, self._require_token())

    async def fenced(self, *command: Any) -> Any:
        return await self.client.fenced(self.name, self._require_token(), *command)

    async def release(self) -> Release:  # pragma: no cover - every kind defines it
        raise NotImplementedError

    def _require_token(self) -> int:
        t = self.token
        if t is None:
            raise DlockError(f"{self.name!r} is not held by {self.owner!r}; no token to check")
        return t

    async def __aenter__(self: Any) -> Any:
        if not await self.acquire():
            raise AcquireTimeout(f"could not acquire {self.name!r} within {self.timeout} s")
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.release()

    def __repr__(self) -> str:
        return f"<aio.{type(self).__name__} {self.name!r} kind={self._kind.value}>"


class Lock(_Base):
    """A reentrant mutex (``DLOCK.ACQUIRE``), reentrant per task. See :class:`dlock.Lock`."""

    async def acquire(
        self,
        blocking: bool = True,
        timeout: Optional[float] = _UNSET,
        lease: Optional[float] = _UNSET,
        *,
        bind: Optional[bool] = None,
        lock_delay: Optional[float] = None,
    ) -> bool:
        return await self._do_acquire(blocking, timeout, lease, 1, self._extra(bind, lock_delay))

    async def release(self) -> Release:
        return await self._do_release(1)


class FairLock(Lock):
    _kind = Kind.FAIR


class ReadLock(Lock):
    _kind = Kind.READ


class WriteLock(Lock):
    _kind = Kind.WRITE


class RWLock:
    def __init__(self, client: Client, name: KeyT, **kwargs: Any) -> None:
        self.client = client
        self.name = name
        self._read = ReadLock(client, name, **kwargs)
        self._write = WriteLock(client, name, **kwargs)

    def read(self) -> ReadLock:
        return self._read

    def write(self) -> WriteLock:
        return self._write


class Semaphore(_Base):
    _kind = Kind.SEMAPHORE

    def __init__(self, client: Client, name: KeyT, limit: int, *, permits: int = 1, **kwargs: Any) -> None:
        super().__init__(client, name, **kwargs)
        if limit < 1:
            raise ValueError("limit must be at least 1")
        self.limit = int(limit)
        self.permits = int(permits)

    async def acquire(
        self,
        permits: Optional[int] = None,
        blocking: bool = True,
        timeout: Optional[float] = _UNSET,
        lease: Optional[float] = _UNSET,
        *,
        bind: Optional[bool] = None,
        lock_delay: Optional[float] = None,
    ) -> bool:
        k = self.permits if permits is None else int(permits)
        extra = self._extra(bind, lock_delay)
        extra.update(limit=self.limit, permits=k)
        return await self._do_acquire(blocking, timeout, lease, k, extra)

    async def release(self, permits: Optional[int] = None) -> Release:
        k = self.permits if permits is None else int(permits)
        return await self._do_release(k, k)

    @property
    def held_permits(self) -> int:
        h = self._current()
        return 0 if h is None else h.depth


class Latch:
    def __init__(self, client: Client, name: KeyT) -> None:
        self.client = client
        self.name = name

    async def try_set_count(self, count: int) -> bool:
        return bool(await self.client.execute("DLOCK.LATCHSET", self.name, int(count)))

    async def count_down(self) -> int:
        return int(await self.client.execute("DLOCK.COUNTDOWN", self.name))

    async def count(self) -> int:
        info = await self.client.info(self.name)
        return 0 if info is None else int(info.get("count", 0))

    async def wait(self, timeout: Optional[float] = None) -> bool:
        slice_ = self.client._slice()
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        while True:
            left = slice_ if deadline is None else max(0.0, deadline - time.monotonic())
            wms = int(min(left, slice_) * 1000)
            if await self.client.execute("DLOCK.AWAIT", self.name, "WAIT", wms) == 1:
                return True
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return False
            if slice_ < 0.001:
                await asyncio.sleep(min(0.05, slice_ if deadline is None else deadline - now))


class MultiLock:
    """All of several locks or none; see :class:`dlock.MultiLock`."""

    def __init__(self, locks: Iterable[_Base], *, timeout: Optional[float] = None, lease: Optional[float] = None) -> None:
        items = list(locks)
        if not items:
            raise ValueError("a MultiLock needs at least one lock")
        items.sort(
            key=lambda l: _core.server_sort_key(_core.server_address(l.client.redis), l.name, l.kind)
        )
        self.locks: List[_Base] = items
        self.timeout = timeout
        self.lease = lease
        self._lost: Dict[str, AsyncLostSignal] = {}

    @property
    def names(self) -> List[KeyT]:
        return [l.name for l in self.locks]

    def _owner(self) -> str:
        return self.locks[0].owner

    async def acquire(self, blocking: bool = True, timeout: Optional[float] = _UNSET, lease: Optional[float] = _UNSET) -> bool:
        timeout = self.timeout if timeout is _UNSET else timeout
        lease = self.lease if lease is _UNSET else lease
        if not blocking:
            timeout = 0
        deadline = None if timeout is None else time.monotonic() + timeout
        taken: List[_Base] = []
        try:
            for l in self.locks:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                if not await l.acquire(timeout=left, lease=lease):  # type: ignore[attr-defined]
                    await self._rollback(taken)
                    return False
                taken.append(l)
        except BaseException:
            await self._rollback(taken)
            raise
        combined = AsyncLostSignal()
        deadlines = []
        for l in self.locks:
            sig = l.lost
            if sig.deadline is not None:
                deadlines.append(sig.deadline)
            sig._add_listener(combined._mark)
        if deadlines:
            combined._set_deadline(min(deadlines))
        self._lost[self._owner()] = combined
        return True

    @staticmethod
    async def _rollback(taken: List[_Base]) -> None:
        for l in reversed(taken):
            try:
                await l.release()
            except Exception:
                pass

    async def release(self) -> List[Release]:
        outcomes: List[Release] = []
        first: Optional[BaseException] = None
        for l in reversed(self.locks):
            try:
                outcomes.append(await l.release())
            except Exception as e:
                outcomes.append(Release.LOST)
                first = first or e
        if first is not None:
            raise first
        return list(reversed(outcomes))

    @property
    def tokens(self) -> List[Optional[int]]:
        return [l.token for l in self.locks]

    @property
    def lost(self) -> AsyncLostSignal:
        return self._lost.get(self._owner()) or AsyncLostSignal()

    async def __aenter__(self) -> "MultiLock":
        if not await self.acquire():
            raise AcquireTimeout(f"could not acquire all of {self.names!r} within {self.timeout} s")
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.release()


class _RedHold:
    __slots__ = ("owner", "tokens", "valid_until", "lost", "watchdog")

    def __init__(self, owner: str, tokens: List[Optional[int]], valid_until: float, lost: AsyncLostSignal) -> None:
        self.owner = owner
        self.tokens = tokens
        self.valid_until = valid_until
        self.lost = lost
        self.watchdog: Optional[_Watchdog] = None


class RedLock:
    """The Redlock algorithm over N independent servers; see :class:`dlock.RedLock`."""

    def __init__(
        self,
        nodes: Sequence[Any],
        name: KeyT,
        *,
        node_timeout: float = 0.1,
        retry_delay: float = 0.2,
        watchdog_lease: float = DEFAULT_WATCHDOG_LEASE,
        renew_interval: Optional[float] = None,
        timeout: Optional[float] = None,
        lease: Optional[float] = None,
        owner: Optional[str] = None,
        on_lost: Optional[OnLost] = None,
    ) -> None:
        if not nodes:
            raise ValueError("a RedLock needs at least one server")
        self.nodes: List[Client] = [n if isinstance(n, Client) else Client(n) for n in nodes]
        self.name = name
        self.node_timeout = max(node_timeout, 0.001)
        self.retry_delay = retry_delay
        self.watchdog_lease = float(watchdog_lease)
        self.renew_interval = float(
            renew_interval if renew_interval is not None else self.watchdog_lease / 3.0
        )
        self.timeout = timeout
        self.lease = lease
        self._owner = owner
        self.prefix = _core.new_prefix()
        self.on_lost = on_lost
        self._holds: Dict[str, _RedHold] = {}

    @property
    def quorum(self) -> int:
        return _core.quorum_of(len(self.nodes))

    @property
    def owner(self) -> str:
        return self._owner if self._owner is not None else f"{self.prefix}:{_core.task_tag()}"

    def _current(self) -> Optional[_RedHold]:
        return self._holds.get(self.owner)

    async def acquire(self, blocking: bool = True, timeout: Optional[float] = _UNSET, lease: Optional[float] = _UNSET) -> bool:
        timeout = self.timeout if timeout is _UNSET else timeout
        lease = self.lease if lease is _UNSET else lease
        if not blocking:
            timeout = 0
        owner = self.owner
        if self._current() is not None:
            raise DlockError("a RedLock is not reentrant: this task already holds it")
        lease_s = self.watchdog_lease if lease is None else float(lease)
        lms = _core.lease_ms(lease_s)
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        acq = _core.acquire_args(Kind.MUTEX, self.name, owner, lms, 0)
        rel = _core.release_args(Kind.MUTEX, self.name, owner)
        while True:
            start = time.monotonic()
            answers = await _on_all([functools.partial(n.execute, *acq) for n in self.nodes], self.node_timeout)
            tokens: List[Optional[int]] = []
            for a in answers:
                try:
                    tokens.append(None if isinstance(a, BaseException) else _core.parse_token(a))
                except DlockError:
                    tokens.append(None)
            until = _core.granted_until(tokens, self.quorum, start, time.monotonic(), lease_s)
            if until is not None:
                self._granted(owner, tokens, until, lease, start)
                return True
            await _on_all([functools.partial(n.execute, *rel) for n in self.nodes], self.node_timeout)
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return False
            pause = _core.retry_pause(self.retry_delay)
            if deadline is not None:
                pause = min(pause, deadline - now)
            await asyncio.sleep(pause)

    def _granted(self, owner: str, tokens: List[Optional[int]], until: float, lease: Optional[float], start: float) -> None:
        lost = AsyncLostSignal(until if lease is not None else None)
        lost._add_listener(functools.partial(_run_callbacks, (self.on_lost,), self.name))
        if lease is not None and self.on_lost is not None:
            _call_at(until, lost.is_set)
        hold = _RedHold(owner, tokens, until, lost)
        if lease is None:
            wl = self.watchdog_lease
            args = _core.renew_args(self.name, owner, _core.lease_ms(wl))

            async def renew(timeout: float) -> Renewal:
                sent = time.monotonic()
                answers = await _on_all([functools.partial(n.execute, *args) for n in self.nodes], timeout)
                flags = [None if isinstance(a, BaseException) else _core.parse_renewed(a) for a in answers]
                outcome = _core.renewal_outcome(flags, self.quorum)
                if outcome is Renewal.RENEWED:
                    hold.valid_until = sent + wl - _core.drift(wl)
                return outcome

            hold.watchdog = _Watchdog(
                renew, wl, self.renew_interval, start,
                lambda reason: self._lost(hold, reason),
                lost_reason=LostReason.NO_QUORUM,
            )
        self._holds[owner] = hold

    def _lost(self, hold: _RedHold, reason: LostReason) -> None:
        hold.lost._mark(reason)  # its listener runs the callback

    async def release(self) -> Release:
        owner = self.owner
        hold = self._holds.pop(owner, None)
        if hold is None:
            raise NotHeld(f"NOTHELD this task does not hold the RedLock {self.name!r}")
        if hold.watchdog is not None:
            hold.watchdog.stop()
        rel = _core.release_args(Kind.MUTEX, self.name, owner)
        answers = await _on_all([functools.partial(n.execute, *rel) for n in self.nodes], max(self.node_timeout, 1.0))
        outcomes: List[Union[Release, BaseException]] = []
        for a in answers:
            if isinstance(a, NotHeld):
                outcomes.append(Release.LOST)
            elif isinstance(a, BaseException):
                outcomes.append(a)
            else:
                try:
                    outcomes.append(_core.parse_release(a))
                except DlockError as e:
                    outcomes.append(e)
        for want in (Release.RELEASED, Release.STILL_HELD):
            if sum(1 for o in outcomes if o is want) >= self.quorum:
                if want is Release.RELEASED:
                    hold.lost._set_deadline(None)
                return want
        answered = sum(1 for o in outcomes if isinstance(o, Release))
        if answered < self.quorum:
            raise next(o for o in outcomes if isinstance(o, BaseException))
        self._lost(hold, LostReason.NO_QUORUM)
        return Release.LOST

    def validity(self) -> float:
        h = self._current()
        if h is None or h.lost.is_set():
            return 0.0
        return max(0.0, h.valid_until - time.monotonic())

    @property
    def tokens(self) -> List[Optional[int]]:
        h = self._current()
        return [] if h is None else list(h.tokens)

    @property
    def lost(self) -> AsyncLostSignal:
        h = self._current()
        return h.lost if h is not None else AsyncLostSignal()

    async def __aenter__(self) -> "RedLock":
        if not await self.acquire():
            raise AcquireTimeout(f"could not acquire RedLock {self.name!r} within {self.timeout} s")
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.release()
