"""The sync flavour: on ``redis.Redis`` or ``redis.RedisCluster``; one owner per thread."""

from __future__ import annotations

import functools
import heapq
import itertools
import logging
import threading
import time
from typing import (
    Any,
    Callable,
    Dict,
    Iterable,
    List,
    Optional,
    Sequence,
    Tuple,
    TypeVar,
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
from ._lost import LostSignal
from .errors import AcquireTimeout, DlockError, NotHeld, map_error

log = logging.getLogger("dlock")

T = TypeVar("T")
OnLost = Callable[[KeyT, LostReason], Any]
_UNSET: Any = object()


def _is_cluster(r: Any) -> bool:
    try:
        from redis.cluster import RedisCluster
    except ImportError:  # pragma: no cover
        return False
    return isinstance(r, RedisCluster)


def _on_all(calls: Sequence[Callable[[], T]], timeout: float) -> List[Union[T, BaseException]]:
    """Runs every call in parallel; each result, or its exception (``TimeoutError`` for
    a call that did not finish within ``timeout``)."""
    results: List[Union[T, BaseException]] = [TimeoutError("no answer in time")] * len(calls)

    def run(i: int, fn: Callable[[], T]) -> None:
        try:
            results[i] = fn()
        except BaseException as e:  # noqa: BLE001
            results[i] = e

    threads = [
        threading.Thread(target=run, args=(i, fn), name="dlock-node", daemon=True)
        for i, fn in enumerate(calls)
    ]
    for t in threads:
        t.start()
    end = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.0, end - time.monotonic()))
    return [r for r in results]


class _Timers:
    """One daemon thread per process that runs due callbacks (explicit-lease ends)."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._heap: List[Tuple[float, int, Callable[[], Any]]] = []
        self._seq = itertools.count()
        self._thread: Optional[threading.Thread] = None

    def call_at(self, when: float, fn: Callable[[], Any]) -> None:
        with self._cv:
            heapq.heappush(self._heap, (when, next(self._seq), fn))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="dlock-timers", daemon=True)
                self._thread.start()
            self._cv.notify()

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._heap:
                    self._cv.wait()
                when, _, fn = self._heap[0]
                now = time.monotonic()
                if now < when:
                    self._cv.wait(when - now)
                    continue
                heapq.heappop(self._heap)
            try:
                fn()
            except Exception:
                log.exception("dlock: timer callback failed")


_TIMERS = _Timers()


def _run_callbacks(callbacks: Sequence[Optional[OnLost]], key: KeyT, reason: LostReason) -> None:
    for cb in callbacks:
        if cb is not None:
            try:
                cb(key, reason)
            except Exception:
                log.exception("dlock: on_lost callback failed")


class _Watchdog:
    """Renews a lease while the hold lives.

    No thread per hold: one scheduler thread per process (``_WATCHDOGS``) wakes each
    watchdog when it is due and runs the renewal in a short-lived daemon thread; the
    scheduler itself enforces the end of the lease, so a renewal that never answers (a
    frozen server, a client without socket timeout) cannot keep the lock from being
    reported lost in time."""

    def __init__(
        self,
        renew: Callable[[float], Renewal],
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
        self._inflight = False
        self.last_renewed: Optional[float] = None
        self.wake = self._plan.wake_at()
        _WATCHDOGS.add(self)

    def stop(self) -> None:
        with _WATCHDOGS.cv:
            self._stopped = True  # the scheduler drops it at its next wake-up

    # -- called by the scheduler, under its lock --------------------------------

    def _due(self, now: float) -> Optional[float]:
        """Acts at ``now``; the next wake-up, or None when done."""
        plan = self._plan
        if self._stopped:
            return None
        if now >= plan.lost_at():
            self._stopped = True
            threading.Thread(
                target=self._on_lost, args=(LostReason.UNREACHABLE,), daemon=True
            ).start()
            return None
        if self._inflight:
            return plan.lost_at()
        if now >= plan.next:
            self._inflight = True
            threading.Thread(
                target=self._attempt, args=(now,), name="dlock-renew", daemon=True
            ).start()
            return plan.lost_at()
        return plan.wake_at()

    def _attempt(self, started: float) -> None:
        try:
            outcome = self._renew(self._plan.attempt_timeout(started))
        except Exception:
            outcome = Renewal.FAILED
        lost = False
        with _WATCHDOGS.cv:
            self._inflight = False
            if self._stopped:
                return
            if outcome is Renewal.RENEWED:
                self._plan.renewed(started)
                self.last_renewed = started
            elif outcome is Renewal.LOST:
                self._stopped = True
                lost = True
            else:
                self._plan.failed(time.monotonic())
            if not lost:
                _WATCHDOGS.push(self, self._plan.wake_at())
        if lost:
            self._on_lost(self._lost_reason)


class _WatchdogScheduler:
    def __init__(self) -> None:
        self.cv = threading.Condition(threading.RLock())
        self._heap: List[Tuple[float, int, _Watchdog]] = []
        self._seq = itertools.count()
        self._thread: Optional[threading.Thread] = None

    def add(self, wd: _Watchdog) -> None:
        with self.cv:
            self.push(wd, wd.wake)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="dlock-watchdog", daemon=True)
                self._thread.start()

    def push(self, wd: _Watchdog, when: float) -> None:
        """(Re)schedules ``wd`` (caller holds ``cv``); older entries become stale."""
        wd.wake = when
        heapq.heappush(self._heap, (when, next(self._seq), wd))
        self.cv.notify()

    def _run(self) -> None:
        with self.cv:
            while True:
                if not self._heap:
                    self.cv.wait()
                    continue
                when, _, wd = self._heap[0]
                if wd.wake != when or wd._stopped:
                    heapq.heappop(self._heap)  # stale entry, or stopped
                    continue
                now = time.monotonic()
                if now < when:
                    self.cv.wait(when - now)
                    continue
                heapq.heappop(self._heap)
                try:
                    nxt = wd._due(now)
                except Exception:  # pragma: no cover - never let the scheduler die
                    log.exception("dlock: watchdog failed")
                    nxt = None
                if nxt is not None:
                    self.push(wd, nxt)


_WATCHDOGS = _WatchdogScheduler()


class _Hold:
    """One owner's hold of one lock (all its reentrant grants)."""

    __slots__ = ("kind", "key", "owner", "token", "depth", "lost", "watchdog", "lease")

    def __init__(self, kind: Kind, key: KeyT, owner: str, token: int, lost: LostSignal) -> None:
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
    """dlock on one redis-py client (``redis.Redis`` or ``redis.RedisCluster``).

    :param redis: the redis-py client; its pool, timeouts, TLS and auth are used as they
        are. Waits on the server are cut into slices shorter than its ``socket_timeout``.
    :param watchdog_lease: lease (s) of locks taken without an explicit lease.
    :param renew_interval: how often the watchdog renews (default: a third of the lease).
    :param wait_slice: the longest single server-side ``WAIT`` (s).
    :param owner_prefix: replaces the random uuid at the start of owner ids.
    :param on_lost: ``callback(key, reason)`` called (from the watchdog thread) when any
        lock of this client is found lost.
    """

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
        self._mu = threading.RLock()
        self._holds: Dict[Tuple[str, bytes, str], _Hold] = {}
        self._cluster = _is_cluster(redis)

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> "Client":
        """A client on ``redis.Redis.from_url(url)``; ``kwargs`` go to :class:`Client`."""
        import redis as _redis

        return cls(_redis.Redis.from_url(url), **kwargs)

    # -- owner ids and factories ------------------------------------------------

    def owner(self) -> str:
        """The owner id of the calling thread: ``<uuid>:<thread>``."""
        return f"{self.prefix}:{_core.thread_tag()}"

    def lock(self, name: KeyT, **kwargs: Any) -> "Lock":
        """The reentrant mutex at key ``name`` (``DLOCK.ACQUIRE``)."""
        return Lock(self, name, **kwargs)

    def fair_lock(self, name: KeyT, **kwargs: Any) -> "FairLock":
        """The fair (FIFO) lock at key ``name`` (``DLOCK.FAIRACQUIRE``)."""
        return FairLock(self, name, **kwargs)

    def rwlock(self, name: KeyT, **kwargs: Any) -> "RWLock":
        """The read-write lock at key ``name`` (``DLOCK.RWACQUIRE``)."""
        return RWLock(self, name, **kwargs)

    def semaphore(self, name: KeyT, limit: int, **kwargs: Any) -> "Semaphore":
        """The semaphore of ``limit`` permits at key ``name`` (``DLOCK.SEMACQUIRE``)."""
        return Semaphore(self, name, limit, **kwargs)

    def latch(self, name: KeyT) -> "Latch":
        """The countdown latch at key ``name`` (``DLOCK.LATCHSET/COUNTDOWN/AWAIT``)."""
        return Latch(self, name)

    # -- plain commands ---------------------------------------------------------

    def execute(self, *args: Any, own_errors: bool = True) -> Any:
        """Sends one command; error replies become the package's exceptions."""
        try:
            return self.redis.execute_command(*args)
        except ResponseError as e:
            mapped = map_error(e, own_errors=own_errors)
            if mapped is e:
                raise
            raise mapped from e

    def info(self, key: KeyT) -> Optional[Dict[str, Any]]:
        """``DLOCK.INFO key`` as a dict (None when no lock exists)."""
        return _core.parse_info(self.execute("DLOCK.INFO", key))

    def force_release(self, key: KeyT) -> bool:
        """``DLOCK.FORCERELEASE key`` (administrative): True when a lock was removed."""
        return bool(self.execute("DLOCK.FORCERELEASE", key))

    def check(self, key: KeyT, token: int) -> bool:
        """``DLOCK.CHECK key token``: is ``token`` the token of a live hold of ``key``?"""
        return bool(self.execute("DLOCK.CHECK", key, int(token)))

    def fenced(self, key: KeyT, token: int, *command: Any) -> Any:
        """``DLOCK.FENCED key token command…``: runs ``command`` only while ``token`` is
        live; raises :class:`~dlock.errors.Fenced` otherwise (the command did not run)."""
        if not command:
            raise ValueError("fenced() needs a command to run")
        return self.execute("DLOCK.FENCED", key, int(token), *command, own_errors=False)

    def has_command(self, name: str) -> bool:
        """Whether the server knows ``name`` (e.g. ``"dlock.semacquire"``)."""
        # Sent without arguments: an arity error when the server knows the command,
        # "unknown command" when it does not (and nothing runs either way).
        # (On a cluster: any one node; every node loads the same module.)
        kw: Dict[str, Any] = {"target_nodes": self.redis.get_random_node()} if self._cluster else {}
        try:
            self.redis.execute_command(name, **kw)
        except ResponseError as e:
            return "unknown command" not in str(e).lower()
        return True

    # -- internals shared by the lock kinds -------------------------------------

    def _slice(self) -> float:
        return _core.wait_slice_for(self.redis, self.wait_slice)

    def _acquire(
        self,
        kind: Kind,
        key: KeyT,
        owner: str,
        lease: Optional[float],
        timeout: Optional[float],
        mode: WaitMode,
        extra: Dict[str, Any],
    ) -> Optional[Tuple[int, float]]:
        """Asks until granted or ``timeout`` passes: ``(token, lease start)`` or None."""
        lease_s = self.watchdog_lease if lease is None else float(lease)
        lms = _core.lease_ms(lease_s)
        if mode is WaitMode.NOTIFY and timeout != 0:
            return self._acquire_notified(kind, key, owner, lease_s, lms, timeout, extra)
        slice_ = self._slice()
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        while True:
            left = slice_ if deadline is None else max(0.0, deadline - time.monotonic())
            wms = int(min(left, slice_) * 1000)
            sent = time.monotonic()
            token = _core.parse_token(
                self.execute(*_core.acquire_args(kind, key, owner, lms, wms, **extra))
            )
            if token is not None:
                start = self._anchor(key, owner, lms, lease_s, sent)
                if start is not None:
                    return token, start
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return None
            if slice_ < 0.001:  # socket_timeout too short to wait on the server: poll
                time.sleep(min(0.05, slice_ if deadline is None else deadline - now))

    def _anchor(self, key: KeyT, owner: str, lms: int, lease_s: float, sent: float) -> Optional[float]:
        """The instant the lease surely started: ``sent``, or after a long wait, a RENEW
        sent now (None when the lease had already lapsed)."""
        if time.monotonic() - sent <= _core.lease_clock_slack(lease_s):
            return sent
        renew_sent = time.monotonic()
        if _core.parse_renewed(self.execute(*_core.renew_args(key, owner, lms))):
            return renew_sent
        return None

    def _acquire_notified(
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

        def attempt() -> Optional[Tuple[int, float]]:
            sent = time.monotonic()
            token = _core.parse_token(
                self.execute(*_core.acquire_args(kind, key, owner, lms, 0, **extra))
            )
            if token is None:
                return None
            start = self._anchor(key, owner, lms, lease_s, sent)
            return None if start is None else (token, start)

        got = attempt()
        if got is not None:
            return got
        slice_ = self.wait_slice
        if kind is Kind.FAIR:  # a polling owner keeps its queued place only if it asks again
            slice_ = min(slice_, 1.0)
        channel = _core.channel_for(key)
        ps = self.redis.pubsub()
        try:
            if self._cluster:
                ps.ssubscribe(channel)
                get = ps.get_sharded_message
            else:
                ps.subscribe(channel)
                get = ps.get_message
            while True:
                # Subscribed first, then asked: a release in between is not missed.
                got = attempt()
                if got is not None:
                    return got
                left = slice_ if deadline is None else deadline - time.monotonic()
                if left <= 0:
                    return None
                get(timeout=max(0.001, min(left, slice_)))
        finally:
            try:
                ps.close()
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
        with self._mu:
            hold = self._holds.get(hk)
            if hold is None or hold.token != token or hold.lost.is_set():
                # A new hold on the server (a reentrant grant keeps its token).
                if hold is not None:
                    hold.stop()
                sig = LostSignal()
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
        """An explicit lease started at ``start``: the hold counts as lost at its end."""
        hold.lease = lease
        deadline = start + lease - _core.lost_margin(lease)
        hold.lost._set_deadline(deadline)
        if on_lost is not None or self.on_lost is not None:
            # Callbacks run when the lease ends even if nobody looks.
            _TIMERS.call_at(deadline, hold.lost.is_set)

    def _start_watchdog(self, hold: _Hold, start: float, on_lost: Optional[OnLost]) -> _Watchdog:
        lease = self.watchdog_lease
        args = _core.renew_args(hold.key, hold.owner, _core.lease_ms(lease))

        def renew(timeout: float) -> Renewal:
            try:
                v = self.execute(*args)
            except Exception:
                return Renewal.FAILED
            answer = _core.parse_renewed(v)
            if answer is None:
                return Renewal.FAILED
            return Renewal.RENEWED if answer else Renewal.LOST

        return _Watchdog(
            renew,
            lease,
            self.renew_interval,
            start,
            lambda reason: self._lost(hold, reason, on_lost),
        )

    def _lost(self, hold: _Hold, reason: LostReason, on_lost: Optional[OnLost]) -> None:
        hold.lost._mark(reason)  # its listener runs the callbacks

    def _hold(self, kind: Kind, key: KeyT, owner: str) -> Optional[_Hold]:
        with self._mu:
            return self._holds.get(_hold_key(kind, key, owner))

    def _release(
        self, kind: Kind, key: KeyT, owner: str, amount: int, on_lost: Optional[OnLost], permits: Optional[int]
    ) -> Release:
        hk = _hold_key(kind, key, owner)
        with self._mu:
            hold = self._holds.get(hk)
            final = hold is None or hold.depth <= amount
            if hold is not None and final:
                hold.stop()  # no renewal may race the last release
        try:
            outcome = _core.parse_release(
                self.execute(*_core.release_args(kind, key, owner, permits))
            )
        except NotHeld:
            if hold is None:
                raise
            outcome = Release.LOST
        except BaseException:
            if hold is not None and final:
                with self._mu:
                    if self._holds.get(hk) is hold:
                        del self._holds[hk]
            raise
        with self._mu:
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
    """What every lock kind shares: owner, token, lost signal, acquire/release loop."""

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
        self._empty_lost = LostSignal()

    @property
    def kind(self) -> Kind:
        return self._kind

    @property
    def owner(self) -> str:
        """The owner id this lock acts with from the calling thread."""
        return self._owner if self._owner is not None else self.client.owner()

    def _current(self) -> Optional[_Hold]:
        return self.client._hold(self._kind, self.name, self.owner)

    @property
    def token(self) -> Optional[int]:
        """The fencing token of the calling thread's hold (None when not held)."""
        h = self._current()
        return None if h is None else h.token

    @property
    def lost(self) -> LostSignal:
        """The calling thread's lost-lock signal (an Event: ``is_set()``, ``wait()``)."""
        h = self._current()
        if h is not None:
            return h.lost
        return self._last_lost.get(self.owner, self._empty_lost)

    @property
    def _last_lost(self) -> Dict[str, LostSignal]:
        d = self.__dict__.get("_lost_by_owner")
        if d is None:
            d = self.__dict__.setdefault("_lost_by_owner", {})
        return d  # type: ignore[no-any-return]

    def held(self) -> bool:
        """Whether the calling thread holds this lock (as far as this client knows)."""
        h = self._current()
        return h is not None and not h.lost.is_set()

    def locked(self) -> bool:
        """Whether anyone holds this lock now (``DLOCK.INFO``)."""
        info = self.client.info(self.name)
        return bool(info and info.get("holders"))

    def renew(self, lease: Optional[float] = None) -> bool:
        """``DLOCK.RENEW``: restarts the lease of the calling thread's holds of this key
        — ``lease`` seconds, by default the hold's explicit lease (or the watchdog
        lease). True when renewed; False when the owner held nothing any more (then
        ``lost`` is set, ``NOT_HELD``). Locks under the watchdog need no renew()."""
        h = self._current()
        if lease is None:
            lease = h.lease if h is not None and h.lease else self.client.watchdog_lease
        sent = time.monotonic()
        args = _core.renew_args(self.name, self.owner, _core.lease_ms(lease))
        if _core.parse_renewed(self.client.execute(*args)):
            if h is not None and h.watchdog is None:
                with self.client._mu:
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

    def _do_acquire(
        self,
        blocking: bool,
        timeout: Any,
        lease: Any,
        amount: int,
        extra: Dict[str, Any],
    ) -> bool:
        timeout = self.timeout if timeout is _UNSET else timeout
        lease = self.lease if lease is _UNSET else lease
        if not blocking:
            timeout = 0
        owner = self.owner
        got = self.client._acquire(self._kind, self.name, owner, lease, timeout, self.wait_mode, extra)
        if got is None:
            return False
        hold = self.client._granted(
            self._kind, self.name, owner, got[0], got[1], lease, amount, self.on_lost
        )
        self._last_lost[owner] = hold.lost
        return True

    def _do_release(self, amount: int, permits: Optional[int] = None) -> Release:
        return self.client._release(self._kind, self.name, self.owner, amount, self.on_lost, permits)

    def check(self) -> bool:
        """``DLOCK.CHECK``: is the calling thread's token still the token of a live hold?"""
        return self.client.check(self.name, self._require_token())

    def fenced(self, *command: Any) -> Any:
        """``DLOCK.FENCED key <own token> command…``: runs ``command`` only while this
        hold is live; raises :class:`~dlock.errors.Fenced` otherwise."""
        return self.client.fenced(self.name, self._require_token(), *command)

    def release(self) -> Release:  # pragma: no cover - every kind defines it
        raise NotImplementedError

    def _require_token(self) -> int:
        t = self.token
        if t is None:
            raise DlockError(f"{self.name!r} is not held by {self.owner!r}; no token to check")
        return t

    def __enter__(self: Any) -> Any:
        if not self.acquire():
            raise AcquireTimeout(f"could not acquire {self.name!r} within {self.timeout} s")
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} kind={self._kind.value}>"


class Lock(_Base):
    """A reentrant mutex (``DLOCK.ACQUIRE``). Reentrant per thread: the same thread may
    acquire it again (the server counts), and must release it as often.

    Defaults for :meth:`acquire` and ``with``: ``timeout`` (None: wait as long as it
    takes), ``lease`` (None: the watchdog lease, renewed), ``wait_mode``, ``bind``,
    ``lock_delay``; ``owner`` fixes the owner id instead of ``<uuid>:<thread>``;
    ``on_lost(key, reason)`` is called when this lock is found lost.
    """

    def acquire(
        self,
        blocking: bool = True,
        timeout: Optional[float] = _UNSET,
        lease: Optional[float] = _UNSET,
        *,
        bind: Optional[bool] = None,
        lock_delay: Optional[float] = None,
    ) -> bool:
        """Takes the lock: True when granted, False when ``timeout`` (s) passed first
        (``timeout=0`` or ``blocking=False``: one try). ``lease`` (s): held for that long
        and never renewed; None: the watchdog lease, renewed until release.
        ``bind``: the hold ends when the connection that sent the grant closes.
        ``lock_delay`` (s): after a lease end (not a release) the lock stays excluded
        that much longer."""
        return self._do_acquire(blocking, timeout, lease, 1, self._extra(bind, lock_delay))

    def release(self) -> Release:
        """Takes one hold away: :data:`Released`, :data:`StillHeld` (reentrant) or
        :data:`Lost` (the lease had ended or it was force-released). Raises
        :class:`~dlock.errors.NotHeld` when this thread never held it."""
        return self._do_release(1)


class FairLock(Lock):
    """A fair (FIFO) reentrant mutex (``DLOCK.FAIRACQUIRE``): granted in the order owners
    first asked. An owner that gives up (a try that returns False) keeps its queued place
    until ``dlock.fair-queue-timeout-ms`` (5 s by default) passes."""

    _kind = Kind.FAIR


class ReadLock(Lock):
    """The shared side of an :class:`RWLock`."""

    _kind = Kind.READ


class WriteLock(Lock):
    """The exclusive side of an :class:`RWLock`."""

    _kind = Kind.WRITE


class RWLock:
    """A read-write lock (``DLOCK.RWACQUIRE``): many readers or one writer, writer
    preference, reentrant per thread; a lone reader may upgrade, a writer may downgrade.
    ``kwargs`` are the defaults of both sides (see :class:`Lock`)."""

    def __init__(self, client: Client, name: KeyT, **kwargs: Any) -> None:
        self.client = client
        self.name = name
        self._read = ReadLock(client, name, **kwargs)
        self._write = WriteLock(client, name, **kwargs)

    def read(self) -> ReadLock:
        return self._read

    def write(self) -> WriteLock:
        return self._write

    def __repr__(self) -> str:
        return f"<RWLock {self.name!r}>"


class Semaphore(_Base):
    """A semaphore of ``limit`` permits (``DLOCK.SEMACQUIRE``) whose holds are leased,
    fenced and named like lock holds. ``permits`` is how many permits ``acquire()`` and
    ``with`` take by default."""

    _kind = Kind.SEMAPHORE

    def __init__(self, client: Client, name: KeyT, limit: int, *, permits: int = 1, **kwargs: Any) -> None:
        super().__init__(client, name, **kwargs)
        if limit < 1:
            raise ValueError("limit must be at least 1")
        self.limit = int(limit)
        self.permits = int(permits)

    def acquire(
        self,
        permits: Optional[int] = None,
        blocking: bool = True,
        timeout: Optional[float] = _UNSET,
        lease: Optional[float] = _UNSET,
        *,
        bind: Optional[bool] = None,
        lock_delay: Optional[float] = None,
    ) -> bool:
        """Takes ``permits`` permits (default :attr:`permits`); see :meth:`Lock.acquire`."""
        k = self.permits if permits is None else int(permits)
        extra = self._extra(bind, lock_delay)
        extra.update(limit=self.limit, permits=k)
        return self._do_acquire(blocking, timeout, lease, k, extra)

    def release(self, permits: Optional[int] = None) -> Release:
        """Gives ``permits`` permits back: :data:`Released` when the owner holds none
        any more, :data:`StillHeld` when some remain, :data:`Lost` when its hold had
        ended."""
        k = self.permits if permits is None else int(permits)
        return self._do_release(k, k)

    @property
    def held_permits(self) -> int:
        """How many permits the calling thread holds (as far as this client knows)."""
        h = self._current()
        return 0 if h is None else h.depth


class Latch:
    """A countdown latch (``DLOCK.LATCHSET`` / ``COUNTDOWN`` / ``AWAIT``)."""

    def __init__(self, client: Client, name: KeyT) -> None:
        self.client = client
        self.name = name

    def try_set_count(self, count: int) -> bool:
        """Creates the latch with ``count`` when none exists (True); False otherwise."""
        return bool(self.client.execute("DLOCK.LATCHSET", self.name, int(count)))

    def count_down(self) -> int:
        """Lowers the count by one; the new count (0: open, or there was no latch)."""
        return int(self.client.execute("DLOCK.COUNTDOWN", self.name))

    def count(self) -> int:
        """The current count (0 when no latch exists: it is open)."""
        info = self.client.info(self.name)
        return 0 if info is None else int(info.get("count", 0))

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Waits until the latch opens (True) or ``timeout`` (s) passes (False)."""
        slice_ = self.client._slice()
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        while True:
            left = slice_ if deadline is None else max(0.0, deadline - time.monotonic())
            wms = int(min(left, slice_) * 1000)
            if self.client.execute("DLOCK.AWAIT", self.name, "WAIT", wms) == 1:
                return True
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return False
            if slice_ < 0.001:
                time.sleep(min(0.05, slice_ if deadline is None else deadline - now))

    def __repr__(self) -> str:
        return f"<Latch {self.name!r}>"


# ---------------------------------------------------------------------------
# MultiLock


class MultiLock:
    """All of several locks (possibly on different servers) or none — like Redisson's
    MultiLock. The locks are taken one by one in a fixed order (server address, key,
    kind) whatever order they were given in, so two MultiLocks over the same locks
    cannot deadlock each other; when one is not granted within what is left of the
    timeout, those already taken are released again (reverse order)."""

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
        self._lost: Dict[str, LostSignal] = {}

    @property
    def names(self) -> List[KeyT]:
        """The keys, in the order they are taken."""
        return [l.name for l in self.locks]

    def _owner(self) -> str:
        return self.locks[0].owner

    def acquire(self, blocking: bool = True, timeout: Optional[float] = _UNSET, lease: Optional[float] = _UNSET) -> bool:
        timeout = self.timeout if timeout is _UNSET else timeout
        lease = self.lease if lease is _UNSET else lease
        if not blocking:
            timeout = 0
        deadline = None if timeout is None else time.monotonic() + timeout
        taken: List[_Base] = []
        try:
            for l in self.locks:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                if not l.acquire(timeout=left, lease=lease):  # type: ignore[attr-defined]
                    self._rollback(taken)
                    return False
                taken.append(l)
        except BaseException:
            self._rollback(taken)
            raise
        combined = LostSignal()
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
    def _rollback(taken: List[_Base]) -> None:
        for l in reversed(taken):
            try:
                l.release()
            except Exception:
                pass

    def release(self) -> List[Release]:
        """Releases every lock (reverse order); the outcomes in :attr:`names` order. The
        first error is raised after all were tried."""
        outcomes: List[Release] = []
        first: Optional[BaseException] = None
        for l in reversed(self.locks):
            try:
                outcomes.append(l.release())
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
    def lost(self) -> LostSignal:
        """Set when any of the locks is lost."""
        return self._lost.get(self._owner()) or LostSignal()

    def __enter__(self) -> "MultiLock":
        if not self.acquire():
            raise AcquireTimeout(f"could not acquire all of {self.names!r} within {self.timeout} s")
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


# ---------------------------------------------------------------------------
# RedLock


class _RedHold:
    __slots__ = ("owner", "tokens", "valid_until", "lost", "watchdog")

    def __init__(self, owner: str, tokens: List[Optional[int]], valid_until: float, lost: LostSignal) -> None:
        self.owner = owner
        self.tokens = tokens
        self.valid_until = valid_until
        self.lost = lost
        self.watchdog: Optional[_Watchdog] = None


class RedLock:
    """The Redlock algorithm over N independent dlock servers (no replication between
    them), with the module's mutex on each.

    One attempt sends ``DLOCK.ACQUIRE key owner PX lease`` to every node in parallel,
    each answer awaited at most ``node_timeout`` (s). The lock is held when a majority
    (N/2 + 1) granted and the validity ``lease − elapsed − drift`` (drift = 1 % of the
    lease + 2 ms) is still positive; otherwise it is released on every node and tried
    again after a random pause of up to ``retry_delay`` while the timeout allows.
    Without an explicit lease the watchdog renews on every node and keeps the lock while
    a majority renews; ``lost`` is set (``NO_QUORUM``) when a majority says the lock is
    gone, or (``UNREACHABLE``) when no majority answered before the validity ran out.

    ``nodes``: redis-py clients or :class:`Client` objects, one per server. Not
    reentrant: a thread must not take the same RedLock twice.
    """

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
        self._mu = threading.Lock()

    @property
    def quorum(self) -> int:
        return _core.quorum_of(len(self.nodes))

    @property
    def owner(self) -> str:
        return self._owner if self._owner is not None else f"{self.prefix}:{_core.thread_tag()}"

    def _current(self) -> Optional[_RedHold]:
        with self._mu:
            return self._holds.get(self.owner)

    def acquire(self, blocking: bool = True, timeout: Optional[float] = _UNSET, lease: Optional[float] = _UNSET) -> bool:
        timeout = self.timeout if timeout is _UNSET else timeout
        lease = self.lease if lease is _UNSET else lease
        if not blocking:
            timeout = 0
        owner = self.owner
        if self._current() is not None:
            raise DlockError("a RedLock is not reentrant: this thread already holds it")
        lease_s = self.watchdog_lease if lease is None else float(lease)
        lms = _core.lease_ms(lease_s)
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        acq = _core.acquire_args(Kind.MUTEX, self.name, owner, lms, 0)
        rel = _core.release_args(Kind.MUTEX, self.name, owner)
        while True:
            start = time.monotonic()
            answers = _on_all([functools.partial(n.execute, *acq) for n in self.nodes], self.node_timeout)
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
            # Failed attempt: release on every node (also where the answer was lost).
            _on_all([functools.partial(n.execute, *rel) for n in self.nodes], self.node_timeout)
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return False
            pause = _core.retry_pause(self.retry_delay)
            if deadline is not None:
                pause = min(pause, deadline - now)
            time.sleep(pause)

    def _granted(self, owner: str, tokens: List[Optional[int]], until: float, lease: Optional[float], start: float) -> None:
        lost = LostSignal(until if lease is not None else None)
        lost._add_listener(functools.partial(_run_callbacks, (self.on_lost,), self.name))
        if lease is not None and self.on_lost is not None:
            _TIMERS.call_at(until, lost.is_set)
        hold = _RedHold(owner, tokens, until, lost)
        if lease is None:
            wl = self.watchdog_lease
            args = _core.renew_args(self.name, owner, _core.lease_ms(wl))

            def renew(timeout: float) -> Renewal:
                sent = time.monotonic()
                answers = _on_all([functools.partial(n.execute, *args) for n in self.nodes], timeout)
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
        with self._mu:
            self._holds[owner] = hold

    def _lost(self, hold: _RedHold, reason: LostReason) -> None:
        hold.lost._mark(reason)  # its listener runs the callback

    def release(self) -> Release:
        """Releases on every node: :data:`Released` / :data:`StillHeld` when a majority
        says so, :data:`Lost` when a majority answered that the owner held nothing;
        raises when fewer than a majority answered."""
        owner = self.owner
        with self._mu:
            hold = self._holds.pop(owner, None)
        if hold is None:
            raise NotHeld(f"NOTHELD this thread does not hold the RedLock {self.name!r}")
        if hold.watchdog is not None:
            hold.watchdog.stop()
        rel = _core.release_args(Kind.MUTEX, self.name, owner)
        answers = _on_all([functools.partial(n.execute, *rel) for n in self.nodes], max(self.node_timeout, 1.0))
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
            err = next(o for o in outcomes if isinstance(o, BaseException))
            raise err
        self._lost(hold, LostReason.NO_QUORUM)
        return Release.LOST

    def validity(self) -> float:
        """Seconds the lock is certainly still held (0 when lost or not held)."""
        h = self._current()
        if h is None or h.lost.is_set():
            return 0.0
        return max(0.0, h.valid_until - time.monotonic())

    @property
    def tokens(self) -> List[Optional[int]]:
        """The fencing token from each node, in node order (None where not granted).
        Tokens of different nodes are unrelated."""
        h = self._current()
        return [] if h is None else list(h.tokens)

    @property
    def lost(self) -> LostSignal:
        h = self._current()
        return h.lost if h is not None else LostSignal()

    def __enter__(self) -> "RedLock":
        if not self.acquire():
            raise AcquireTimeout(f"could not acquire RedLock {self.name!r} within {self.timeout} s")
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()
