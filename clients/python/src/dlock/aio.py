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
    AsyncIterator,
    Awaitable,
    Callable,
    Dict,
    List,
    Optional,
    Sequence,
    Tuple,
    TypeVar,
)

from . import _core, _durable, _ops
from ._core import KeyT, Release, Renewal
from ._lanes import AsyncLanes
from ._lost import AsyncLostSignal
from ._ops import Effect, Op, Step, Stepper
from . import _sync
from .errors import AcquireTimeout, DlockError

from redis.exceptions import TimeoutError as RedisTimeoutError

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
T = TypeVar("T")
_UNSET: Any = _ops.UNSET


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


# ---------------------------------------------------------------------------
# The driver: performs the effects of an operation on the running loop


async def _perform(st: Stepper[Any], eff: Effect) -> Any:
    if isinstance(eff, _durable.PinEffect):
        return await _durable.perform_async(eff)
    if isinstance(eff, _ops.Call):
        client = eff.target
        if eff.lane and client._lanes is not None:
            return await client._lanes.call(eff.args, eff.bound, park=eff.park,
                                            fresh=eff.fresh, drain=eff.drain)
        kw: Dict[str, Any] = {}
        if eff.any_node and client._cluster:
            await client.redis.initialize()  # loads the slots map (no-op when done)
            kw["target_nodes"] = client.redis.get_random_node()
        if getattr(client.redis, "dlock_adapter", None):  # GLIDE: its own clients
            kw.update(park=eff.park, own=eff.own)
            return await _call_within(client.redis.execute_command(*eff.args, **kw), eff.bound)
        reply = await _call_within(client.redis.execute_command(*eff.args, **kw), eff.bound)
        return (reply, None) if eff.park else reply
    if isinstance(eff, _ops.Invoke):
        r = eff.fn(*eff.args, **eff.kwargs)
        return (await r) if inspect.isawaitable(r) else r
    if isinstance(eff, _ops.CallAll):
        fns = [functools.partial(t.redis.execute_command, *a) for t, a in eff.calls]
        return await _on_all(fns, eff.timeout)
    if isinstance(eff, _ops.NextMessage):
        return await _listen(st.listen, eff.timeout)
    if isinstance(eff, _ops.Sleep):
        await asyncio.sleep(eff.seconds)
    elif isinstance(eff, _ops.Unsubscribe):
        await _close(st)
    elif isinstance(eff, _ops.Subscribe):
        if not hasattr(eff.target.redis, "pubsub"):
            raise DlockError(
                f"WaitMode.NOTIFY needs pub/sub, which this client ({eff.target.redis!r}) "
                "lacks; use WaitMode.SERVER (or, for a redis-py cluster, a newer redis-py)"
            )
        st.pubsub = eff.target.redis.pubsub()
        if not eff.target._cluster:
            await _guarded(st.pubsub.subscribe(eff.channel))
            st.listen = st.pubsub.get_message
        else:
            await _guarded(st.pubsub.ssubscribe(eff.channel))
            st.listen = st.pubsub.get_sharded_message
    else:  # pragma: no cover
        raise TypeError(f"unknown effect {eff!r}")
    return None


async def _close(st: Stepper[Any]) -> None:
    ps, st.pubsub = st.pubsub, None
    close = getattr(ps, "aclose", None) or getattr(ps, "close", None)
    try:
        if close is not None:
            r = close()
            if inspect.isawaitable(r):
                await r
    except Exception:  # pragma: no cover
        pass


async def _run(op: Op[T]) -> T:
    """Runs an operation to its end in the running task."""
    st: Stepper[T] = Stepper(op)
    try:
        while True:
            eff = st.next()
            if eff is None:
                return st.result  # type: ignore[no-any-return]
            try:
                st.answer(await _perform(st, eff))
            except BaseException as e:  # noqa: BLE001 - CancelledError too: the op cleans up
                st.fail(e)
    finally:
        if st.pubsub is not None:
            await _close(st)


async def _listen(get: Callable[..., Awaitable[Any]], timeout: float) -> Any:
    return await _guarded(get(timeout=timeout))


async def _guarded(aw: Awaitable[Any]) -> Any:
    """``await aw`` (a redis-py pub/sub call) in a task of its own, so that a
    cancellation of the caller always gets through: redis-py 8's pub/sub may take a
    cancellation that meets one of its own timeouts for that timeout, and go on. The
    call left behind ends when its pub/sub is closed (the caller's next step)."""
    task = asyncio.ensure_future(aw)
    try:
        await asyncio.wait({task})
    except BaseException:
        task.cancel()
        _ORPHANS.add(task)
        task.add_done_callback(_orphaned)
        raise
    return task.result()


#: Calls left behind at their bound, still ending (kept so they are not collected).
_ORPHANS: "set[asyncio.Task[Any]]" = set()


def _orphaned(t: "asyncio.Task[Any]") -> None:
    _ORPHANS.discard(t)
    if not t.cancelled():
        t.exception()  # retrieved: it was the caller's, who has gone


def _call_within(coro: Awaitable[Any], bound: Optional[float]) -> Awaitable[Any]:
    """``coro``, but the caller waits at most ``bound`` s (then ``TimeoutError``) — for
    transports without dlock's own connections (a cluster, the GLIDE adapter). The
    call is cancelled then, and not waited for: cancelling it may itself take the
    transport a while (a GLIDE client connecting)."""
    if bound is None:
        return coro

    async def bounded() -> Any:
        task = asyncio.ensure_future(coro)
        try:
            done, _ = await asyncio.wait({task}, timeout=bound)
        except BaseException:
            task.cancel()
            _ORPHANS.add(task)
            task.add_done_callback(_orphaned)
            raise
        if task in done:
            return task.result()
        task.cancel()
        _ORPHANS.add(task)
        task.add_done_callback(_orphaned)
        raise RedisTimeoutError(f"no reply within {bound:.3f} s")

    return bounded()


class _Notices:
    """The asyncio flavour's listener on a client's locks' channels: one pub/sub (the
    redis-py client's ``pubsub()``; sharded on a cluster) read by one task; the same
    rules as the sync flavour's (``dlock._sync._Notices``)."""

    LINGER = 5.0
    TICK = 0.1

    def __init__(self, client: Any) -> None:
        self._client = client
        self._want: Dict[Any, List[Any]] = {}
        self._task: Optional["asyncio.Task[None]"] = None
        self._wakeup: Optional[asyncio.Event] = None
        self._closed = False
        self.supported = hasattr(client.redis, "pubsub")

    def watch(self, key: KeyT) -> None:
        if not self.supported or self._closed:
            return
        ch = _core.channel_for(key)
        w = self._want.get(ch)
        if w is None:
            self._want[ch] = [key, 1, 0.0]
        else:
            w[1] += 1
        if self._task is None or self._task.done():
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return
            self._wakeup = asyncio.Event()
            self._task = loop.create_task(self._run())
        elif self._wakeup is not None:
            self._wakeup.set()

    def unwatch(self, key: KeyT) -> None:
        w = self._want.get(_core.channel_for(key))
        if w is not None and w[1] > 0:
            w[1] -= 1
            if w[1] == 0:
                w[2] = time.monotonic()

    async def aclose(self) -> None:
        self._closed = True
        t, self._task = self._task, None
        if t is not None and not t.done():
            t.cancel()
            try:
                await t
            except BaseException:  # noqa: BLE001 - cancelled
                pass

    def _wanted(self) -> Dict[Any, Any]:
        now = time.monotonic()
        for ch in [c for c, w in self._want.items() if w[1] == 0 and now - w[2] >= self.LINGER]:
            del self._want[ch]
        return {c: w[0] for c, w in self._want.items()}

    async def _run(self) -> None:
        ps: Any = None
        subscribed: Dict[Any, Any] = {}
        pause = 0.1
        cluster = self._client._cluster
        try:
            while not self._closed:
                wanted = self._wanted()
                if not wanted:
                    if ps is not None:
                        await _aclose_quietly(ps)
                        ps, subscribed = None, {}
                    assert self._wakeup is not None
                    self._wakeup.clear()
                    try:
                        await asyncio.wait_for(self._wakeup.wait(), self.LINGER)
                    except asyncio.TimeoutError:
                        pass
                    continue
                try:
                    if ps is None:
                        ps = self._client.redis.pubsub()
                        subscribed = {}
                    add = [c for c in wanted if c not in subscribed]
                    drop = [c for c in subscribed if c not in wanted]
                    if add:
                        await _guarded((ps.ssubscribe if cluster else ps.subscribe)(*add))
                        subscribed.update((c, wanted[c]) for c in add)
                    if drop:
                        await _guarded((ps.sunsubscribe if cluster else ps.unsubscribe)(*drop))
                        for c in drop:
                            subscribed.pop(c, None)
                    get = ps.get_sharded_message if cluster else ps.get_message
                    msg = await _listen(get, self.TICK)
                    self._watch_bound()  # first: a resubscription's check may be about it
                    while msg is not None:
                        self._handle(msg, subscribed)
                        msg = await _listen(get, 0)
                    pause = 0.1
                except asyncio.CancelledError:
                    raise
                except Exception as e:  # noqa: BLE001 - reconnect and subscribe again
                    log.debug("dlock: the notice listener's connection failed: %s", e)
                    await _aclose_quietly(ps)
                    ps, subscribed = None, {}
                    self._watch_bound()
                    await asyncio.sleep(pause)
                    pause = min(pause * 2, 2.0)
        finally:
            if ps is not None:
                await _aclose_quietly(ps)

    def _watch_bound(self) -> None:
        """A BIND hold's own connection closed by the server is a notice for it."""
        for hold, conn in self._client._parked():
            reader = getattr(conn, "_reader", None)
            if not conn.is_connected or (reader is not None and reader.at_eof()):
                self._client._bound_closed(hold, conn)

    _handle = _sync._Notices._handle


async def _aclose_quietly(ps: Any) -> None:
    close = getattr(ps, "aclose", None) or getattr(ps, "close", None)
    try:
        if close is not None:
            r = close()
            if inspect.isawaitable(r):
                await r
    except Exception:  # noqa: BLE001 - closing is best effort
        pass


def _background(client: Any, op: Op[Any]) -> None:
    """Runs ``op`` as a task of the running loop; ``close()`` cancels what is left."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return

    async def run() -> None:
        try:
            await _run(op)
        except asyncio.CancelledError:
            pass
        except Exception as e:  # noqa: BLE001 - background work reports nothing
            log.debug("dlock: background operation failed: %s", e)

    tasks = client.__dict__.setdefault("_tasks", set())
    t = loop.create_task(run())
    tasks.add(t)
    t.add_done_callback(tasks.discard)


class _Watchdog(_ops.Watchdog):
    """Renews a lease while the hold lives: one asyncio task per hold."""

    def _start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        state = self._state
        while True:
            now = time.monotonic()
            step, value = state.due(now)
            if step is Step.WAIT:
                await asyncio.sleep(max(0.0, value - now))
                continue
            if step is Step.LOST:
                self._on_lost(value)
            if step is not Step.RENEW:
                return
            try:
                outcome = await asyncio.wait_for(_run(self._renew(value)), value)
            except asyncio.CancelledError:
                raise
            except Exception:
                outcome = Renewal.FAILED
            reason = state.done(outcome, now, time.monotonic())
            if reason is not None:
                self._on_lost(reason)
                return

    def stop(self) -> None:
        self._state.stopped = True
        if not self._task.done():
            self._task.cancel()


_FLAVOUR = _ops.Flavour(
    signal=AsyncLostSignal, watchdog=_Watchdog, tag=_core.task_tag, who="task",
    redis_module="redis.asyncio", lanes=AsyncLanes.of, notices=_Notices,
    background=_background, spawn=asyncio.ensure_future,
)


class Client(_ops.ClientCore[AsyncLostSignal, "Lock", "FairLock", "RWLock", "Semaphore", "Latch"]):
    """dlock on one ``redis.asyncio`` client. Parameters as for :class:`dlock.Client`;
    ``on_lost`` may be a coroutine function."""

    _flavour = _FLAVOUR

    def owner(self) -> str:
        """The owner id of the running task: ``<uuid>:task<n>``."""
        return self._owner_id()

    async def aclose(self) -> None:
        """Ends what this client runs in the background (watchdog tasks, the notice
        listener, a pending ``DLOCK.CANCEL``) and closes its own connections (BIND holds
        on them end). Holds it still has are reported lost (``unreachable``). The
        redis-py client passed in is left open. Idempotent."""
        if not self._close_holds():
            return
        await self._notices.aclose()
        tasks = list(self.__dict__.get("_tasks", ()))
        for t in tasks:
            t.cancel()
        for t in tasks:
            try:
                await t
            except BaseException:  # noqa: BLE001 - cancelled
                pass
        if self._lanes is not None:
            await self._lanes.close()

    close = aclose

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def execute(self, *args: Any, own_errors: bool = True) -> Any:
        return await _run(self._op_execute(args, own_errors))

    async def info(self, key: KeyT) -> Optional[Dict[str, Any]]:
        return await _run(self._op_info(key))

    async def force_release(self, key: KeyT) -> bool:
        return await _run(self._op_force_release(key))

    async def check(self, key: KeyT, token: int) -> bool:
        return await _run(self._op_check(key, token))

    async def fenced(self, key: KeyT, token: int, *command: Any) -> Any:
        return await _run(self._op_fenced(key, token, command))

    async def has_command(self, name: str) -> bool:
        return await _run(self._op_has_command(name))

    async def scan(self, cursor: int = 0, **filters: Any) -> Tuple[int, List[Any]]:
        """See :meth:`dlock.Client.scan`."""
        return await _run(self._op_scan(cursor, **filters))

    async def scan_iter(self, **kwargs: Any) -> AsyncIterator[Any]:
        cursor = 0
        while True:
            cursor, keys = await self.scan(cursor, **kwargs)
            for k in keys:
                yield k
            if cursor == 0:
                return

    async def stats(self) -> Dict[str, Dict[str, List[Tuple[int, int]]]]:
        return await _run(self._op_stats(False))

    async def stats_reset(self) -> None:
        await _run(self._op_stats(True))

    async def slowlog_get(self, n: int = 10) -> List[Dict[str, Any]]:
        return await _run(self._op_slowlog("GET", int(n)))

    async def slowlog_len(self) -> int:
        return int(await _run(self._op_slowlog("LEN")))

    async def slowlog_reset(self) -> None:
        await _run(self._op_slowlog("RESET"))


W = TypeVar("W", bound="_With")


class _With:
    """``async with``: :meth:`acquire` (``AcquireTimeout`` when its ``timeout`` passes
    first), :meth:`release` on the way out."""

    timeout: Optional[float]

    async def acquire(self) -> bool:  # pragma: no cover - every kind defines it
        raise NotImplementedError

    async def release(self) -> Any:  # pragma: no cover - every kind defines it
        raise NotImplementedError

    def _what(self) -> str:  # pragma: no cover - every kind defines it
        raise NotImplementedError

    async def __aenter__(self: W) -> W:
        if not await self.acquire():
            raise AcquireTimeout(f"could not acquire {self._what()} within {self.timeout} s")
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.release()


class _Base(_ops.LockCore[Client, AsyncLostSignal], _With):
    @property
    def owner(self) -> str:
        """The owner id this lock acts with from the running task."""
        return self._owner_id()

    async def locked(self) -> bool:
        """Whether anyone holds this lock now (``DLOCK.INFO``)."""
        return await _run(self._op_locked())

    async def renew(self, lease: Optional[float] = None) -> bool:
        """``DLOCK.RENEW``; see :meth:`dlock.Lock.renew`."""
        return await _run(self._op_renew(lease))

    async def check(self) -> bool:
        return await _run(self._op_check())

    async def fenced(self, *command: Any) -> Any:
        return await _run(self._op_fenced(command))

    async def owned(self) -> bool:
        """See :meth:`dlock.Lock.owned` (redis-py's ``owned()``)."""
        return await _run(self._op_owned())

    async def extend(self, additional_time: float, replace_ttl: bool = False) -> bool:
        """See :meth:`dlock.Lock.extend` (redis-py's ``extend()``)."""
        return await _run(self._op_extend(additional_time, replace_ttl))

    async def reacquire(self) -> bool:
        """See :meth:`dlock.Lock.reacquire` (redis-py's ``reacquire()``)."""
        return await _run(self._op_reacquire())

    def __repr__(self) -> str:
        return f"<aio.{type(self).__name__} {self.name!r} kind={self._kind.value}>"


class Lock(_Base):
    """A reentrant mutex (``DLOCK.ACQUIRE``), reentrant per task. See :class:`dlock.Lock`."""

    async def acquire(self, blocking: Optional[bool] = None, timeout: Optional[float] = _UNSET,
                      lease: Optional[float] = _UNSET, *, bind: Optional[bool] = None,
                      lock_delay: Optional[float] = None, replicas: Optional[int] = None,
                      replicas_timeout: Optional[float] = None,
                      blocking_timeout: Optional[float] = _UNSET) -> bool:
        wait = _ops.wait_of(timeout, blocking_timeout)
        return await _run(self._op_acquire(None, blocking, wait, lease, bind, lock_delay,
                                           replicas, replicas_timeout))

    async def release(self) -> Release:
        return await _run(self._op_release())


class FairLock(_ops.FairKind, Lock):
    pass


class ReadLock(_ops.ReadKind, Lock):
    pass


class WriteLock(_ops.WriteKind, Lock):
    pass


class RWLock(_ops.RWLockCore[Client, ReadLock, WriteLock]):
    _sides = (ReadLock, WriteLock)


class Semaphore(_Base, _ops.SemaphoreCore[Client, AsyncLostSignal]):
    async def acquire(self, permits: Optional[int] = None, blocking: Optional[bool] = None,
                      timeout: Optional[float] = _UNSET, lease: Optional[float] = _UNSET, *,
                      bind: Optional[bool] = None, lock_delay: Optional[float] = None,
                      replicas: Optional[int] = None, replicas_timeout: Optional[float] = None,
                      blocking_timeout: Optional[float] = _UNSET) -> bool:
        return await _run(self._op_acquire(permits, blocking,
                                           _ops.wait_of(timeout, blocking_timeout), lease,
                                           bind, lock_delay, replicas, replicas_timeout))

    async def release(self, permits: Optional[int] = None) -> Release:
        return await _run(self._op_release(permits))


class Latch(_ops.LatchCore[Client]):
    async def try_set_count(self, count: int) -> bool:
        return await _run(self._op_try_set_count(count))

    async def count_down(self) -> int:
        return await _run(self._op_count_down())

    async def count(self) -> int:
        return await _run(self._op_count())

    async def wait(self, timeout: Optional[float] = None) -> bool:
        return await _run(self._op_wait(timeout))


class MultiLock(_ops.MultiLockCore[_Base, AsyncLostSignal], _With):
    """All of several locks or none; see :class:`dlock.MultiLock`."""

    async def acquire(self, blocking: bool = True, timeout: Optional[float] = _UNSET, lease: Optional[float] = _UNSET) -> bool:
        return await _run(self._op_acquire(blocking, timeout, lease))

    async def release(self) -> List[Release]:
        return await _run(self._op_release())


class RedLock(_ops.RedLockCore[Client, AsyncLostSignal], _With):
    """The Redlock algorithm over N independent servers; see :class:`dlock.RedLock`."""

    _client_type = Client

    async def acquire(self, blocking: bool = True, timeout: Optional[float] = _UNSET, lease: Optional[float] = _UNSET) -> bool:
        return await _run(self._op_acquire(blocking, timeout, lease))

    async def release(self) -> Release:
        return await _run(self._op_release())


Client._kinds = (Lock, FairLock, RWLock, Semaphore, Latch)
