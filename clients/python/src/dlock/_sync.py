"""The sync flavour: on ``redis.Redis`` or ``redis.RedisCluster``; one owner per thread.

The operations themselves are in :mod:`dlock._ops` (shared with :mod:`dlock.aio`); this
module drives them with blocking redis-py calls (:func:`_run`) and adds the sync parts:
the watchdog scheduler thread, the timer thread and the public methods."""

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
    Iterator,
    List,
    Optional,
    Sequence,
    Tuple,
    TypeVar,
    Union,
)

from . import _core, _durable, _ops
from ._core import KeyT, Release, Renewal
from ._lanes import Lanes
from ._lost import LostSignal
from ._ops import Call, CallAll, Effect, NextMessage, Op, Sleep, Step, Stepper, Subscribe
from .errors import AcquireTimeout, DlockError

from redis.exceptions import TimeoutError as RedisTimeoutError

log = logging.getLogger("dlock")
T = TypeVar("T")
_UNSET: Any = _ops.UNSET


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


# ---------------------------------------------------------------------------
# The driver: performs the effects of an operation with blocking calls


def _within(fn: Callable[[], T], bound: Optional[float]) -> T:
    """``fn()``, but the caller waits at most ``bound`` s (then ``TimeoutError``; the
    call runs on in a daemon thread until its transport gives up) — for transports
    without dlock's own connections (a cluster, the GLIDE adapter)."""
    if bound is None:
        return fn()
    box: List[Any] = []
    done = threading.Event()

    def run() -> None:
        try:
            box.append((True, fn()))
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            box.append((False, e))
        done.set()

    threading.Thread(target=run, name="dlock-call", daemon=True).start()
    if not done.wait(bound):
        raise RedisTimeoutError(f"no reply within {bound:.3f} s")
    ok, value = box[0]
    if ok:
        return value  # type: ignore[no-any-return]
    raise value


def _perform(st: Stepper[Any], eff: Effect) -> Any:
    if isinstance(eff, _durable.PinEffect):
        return _durable.perform_sync(eff)
    if isinstance(eff, Call):
        client = eff.target
        if eff.lane and client._lanes is not None:
            return client._lanes.call(eff.args, eff.bound, park=eff.park, fresh=eff.fresh,
                                      drain=eff.drain)
        r = client.redis
        kw: Dict[str, Any] = {}
        if eff.any_node and client._cluster:
            kw["target_nodes"] = r.get_random_node()
        if getattr(r, "dlock_adapter", None):  # GLIDE: its own clients for lock commands
            kw.update(park=eff.park, own=eff.own)
            return _within(functools.partial(r.execute_command, *eff.args, **kw), eff.bound)
        reply = _within(functools.partial(r.execute_command, *eff.args, **kw), eff.bound)
        return (reply, None) if eff.park else reply
    if isinstance(eff, _ops.Invoke):
        return eff.fn(*eff.args, **eff.kwargs)
    if isinstance(eff, CallAll):
        fns = [functools.partial(t.redis.execute_command, *a) for t, a in eff.calls]
        return _on_all(fns, eff.timeout)
    if isinstance(eff, Sleep):
        time.sleep(eff.seconds)
    elif isinstance(eff, Subscribe):
        if not hasattr(eff.target.redis, "pubsub"):
            raise DlockError(
                f"WaitMode.NOTIFY needs pub/sub, which this client ({eff.target.redis!r}) "
                "lacks; use WaitMode.SERVER"
            )
        st.pubsub = ps = eff.target.redis.pubsub()
        if eff.target._cluster:
            ps.ssubscribe(eff.channel)
            st.listen = ps.get_sharded_message
        else:
            ps.subscribe(eff.channel)
            st.listen = ps.get_message
    elif isinstance(eff, NextMessage):
        return st.listen(timeout=eff.timeout)
    elif isinstance(eff, _ops.Unsubscribe):
        _close(st)
    else:  # pragma: no cover
        raise TypeError(f"unknown effect {eff!r}")
    return None


def _close(st: Stepper[Any]) -> None:
    ps, st.pubsub = st.pubsub, None
    if ps is not None:
        try:
            ps.close()
        except Exception:  # pragma: no cover
            pass


def _run(op: Op[T]) -> T:
    """Runs an operation to its end on the calling thread."""
    st: Stepper[T] = Stepper(op)
    try:
        eff = st.next()
        while eff is not None:
            try:
                st.answer(_perform(st, eff))
            except BaseException as e:  # noqa: BLE001 - the operation decides
                st.fail(e)
            eff = st.next()
        return st.result  # type: ignore[no-any-return]
    finally:
        _close(st)


# ---------------------------------------------------------------------------
# Timers and the watchdog


class _Watchdog(_ops.Watchdog):
    """Renews a lease while the hold lives.

    No thread per hold: one scheduler thread per process (``_WATCHDOGS``) wakes each
    watchdog when it is due and runs the renewal in a short-lived daemon thread; the
    scheduler itself enforces the end of the lease, so a renewal that never answers (a
    frozen server, a client without socket timeout) cannot keep the lock from being
    reported lost in time."""

    def _start(self) -> None:
        self.wake = self._state.plan.wake_at()
        self._counted = False
        _WATCHDOGS.add(self)

    @property
    def _stopped(self) -> bool:
        return self._state.stopped

    def _inflight(self) -> bool:
        return self._state.inflight

    def stop(self) -> None:
        with _WATCHDOGS.cv:
            self._state.stopped = True  # the scheduler drops it at its next wake-up
            if not self._state.inflight:
                _WATCHDOGS.done(self)

    # -- called by the scheduler, under its lock --------------------------------

    def _due(self, now: float) -> Optional[float]:
        """Acts at ``now``; the next wake-up, or None when done."""
        step, value = self._state.due(now)
        if step is Step.WAIT:
            return float(value)
        if step is Step.LOST:
            threading.Thread(target=self._on_lost, args=(value,), daemon=True).start()
        elif step is Step.RENEW:
            threading.Thread(
                target=self._attempt, args=(now, value), name="dlock-renew", daemon=True
            ).start()
            return self._state.plan.lost_at()
        return None

    def _attempt(self, started: float, timeout: float) -> None:
        try:
            outcome = _run(self._renew(timeout))
        except Exception:
            outcome = Renewal.FAILED
        with _WATCHDOGS.cv:
            reason = self._state.done(outcome, started, time.monotonic())
            if reason is None and not self._state.stopped:
                _WATCHDOGS.push(self, self._state.plan.wake_at())
            else:
                _WATCHDOGS.done(self)
        if reason is not None:
            self._on_lost(reason)


class _WatchdogScheduler:
    """The process's watchdog thread: it ends when no watchdog is left (and starts
    again with the next one)."""

    def __init__(self) -> None:
        self.cv = threading.Condition(threading.RLock())
        self._heap: List[Tuple[float, int, _Watchdog]] = []
        self._seq = itertools.count()
        self._thread: Optional[threading.Thread] = None
        self._live = 0

    def add(self, wd: _Watchdog) -> None:
        with self.cv:
            self._live += 1
            wd._counted = True
            self.push(wd, wd.wake)

    def done(self, wd: _Watchdog) -> None:
        """``wd`` will not be due again (caller holds ``cv``)."""
        if wd._counted:
            wd._counted = False
            self._live -= 1
            if self._live == 0:
                self._heap.clear()
            self.cv.notify()

    def push(self, wd: _Watchdog, when: float) -> None:
        """(Re)schedules ``wd`` (caller holds ``cv``); older entries become stale."""
        wd.wake = when
        heapq.heappush(self._heap, (when, next(self._seq), wd))
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="dlock-watchdog", daemon=True)
            self._thread.start()
        self.cv.notify()

    def _run(self) -> None:
        with self.cv:
            while True:
                if not self._heap:
                    self._thread = None
                    return
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
                elif not wd._inflight():
                    self.done(wd)


_WATCHDOGS = _WatchdogScheduler()

# ---------------------------------------------------------------------------
# Prompt notice: one listener thread per client on its locks' channels


class _Notices:
    """The client's listener on its locks' channels: one pub/sub connection (the
    redis-py client's ``pubsub()``; sharded on a cluster), used by one daemon thread
    only. Subscribed while the client has holds on a channel (and ``LINGER`` s after
    the last, so that a key locked again and again is not subscribed anew each time);
    every message — and every (re)subscription, after which a message may have been
    missed — makes the client check its holds on that key. A connection that fails is
    made anew and every channel subscribed again."""

    LINGER = 5.0
    #: How long the thread blocks in one read (it then applies (un)subscriptions).
    TICK = 0.1

    def __init__(self, client: Any) -> None:
        self._client = client
        self._cv = threading.Condition()
        #: channel -> [key, holds watching it, when the last one stopped]
        self._want: Dict[Any, List[Any]] = {}
        self._thread: Optional[threading.Thread] = None
        self._closed = False
        self.supported = hasattr(client.redis, "pubsub")

    def watch(self, key: KeyT) -> None:
        if not self.supported:
            return
        ch = _core.channel_for(key)
        with self._cv:
            if self._closed:
                return
            w = self._want.get(ch)
            if w is None:
                self._want[ch] = [key, 1, 0.0]
            else:
                w[1] += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="dlock-notices", daemon=True)
                self._thread.start()
            self._cv.notify()

    def unwatch(self, key: KeyT) -> None:
        ch = _core.channel_for(key)
        with self._cv:
            w = self._want.get(ch)
            if w is not None and w[1] > 0:
                w[1] -= 1
                if w[1] == 0:
                    w[2] = time.monotonic()

    def close(self) -> None:
        with self._cv:
            self._closed = True
            t = self._thread
            self._cv.notify()
        if t is not None and t is not threading.current_thread():
            t.join(5.0)

    def _wanted(self) -> Optional[Dict[Any, Any]]:
        """The channels to be subscribed (channel -> key); None once closed. Blocks
        while there is nothing to listen to."""
        with self._cv:
            while True:
                if self._closed:
                    return None
                now = time.monotonic()
                for ch in [c for c, w in self._want.items()
                           if w[1] == 0 and now - w[2] >= self.LINGER]:
                    del self._want[ch]
                if self._want:
                    return {c: w[0] for c, w in self._want.items()}
                self._cv.wait()

    def _run(self) -> None:
        ps: Any = None
        subscribed: Dict[Any, Any] = {}
        pause = 0.1
        cluster = self._client._cluster
        while True:
            wanted = self._wanted()
            if wanted is None:
                break
            try:
                if ps is None:
                    ps = self._client.redis.pubsub()
                    subscribed = {}
                add = [c for c in wanted if c not in subscribed]
                drop = [c for c in subscribed if c not in wanted]
                if add:
                    (ps.ssubscribe if cluster else ps.subscribe)(*add)
                    subscribed.update((c, wanted[c]) for c in add)
                if drop:
                    (ps.sunsubscribe if cluster else ps.unsubscribe)(*drop)
                    for c in drop:
                        subscribed.pop(c, None)
                get = ps.get_sharded_message if cluster else ps.get_message
                msg = get(timeout=self.TICK)
                self._watch_bound()  # first: a resubscription's check may be about it
                while msg is not None:
                    self._handle(msg, subscribed)
                    msg = get(timeout=0)
                pause = 0.1
            except Exception as e:  # noqa: BLE001 - reconnect and subscribe again
                log.debug("dlock: the notice listener's connection failed: %s", e)
                _close_quietly(ps)
                ps, subscribed = None, {}
                self._watch_bound()
                with self._cv:
                    if not self._closed:
                        self._cv.wait(pause)
                pause = min(pause * 2, 2.0)
        _close_quietly(ps)

    def _watch_bound(self) -> None:
        """A BIND hold's own connection closed by the server is a notice for it."""
        for hold, conn in self._client._parked():
            try:
                closed = conn._sock is None or bool(conn.can_read(timeout=0))
            except Exception:  # noqa: BLE001 - "Connection closed by server."
                closed = True
            if closed:
                self._client._bound_closed(hold, conn)

    def _handle(self, msg: Any, subscribed: Dict[Any, Any]) -> None:
        if not isinstance(msg, dict):
            return
        kind = msg.get("type")
        if isinstance(kind, bytes):
            kind = kind.decode()
        ch = msg.get("channel")
        key = subscribed.get(ch)
        if key is None and isinstance(ch, (bytes, str)):
            alt = ch.decode() if isinstance(ch, bytes) else ch.encode()
            key = subscribed.get(alt)
        if key is None:
            return
        if kind in ("message", "smessage"):
            data = msg.get("data")
            self._client._notice(key, data.decode("utf-8", "replace") if isinstance(data, bytes) else str(data))
        elif kind in ("subscribe", "ssubscribe"):
            self._client._notice(key, None)  # anything before it may have been missed


def _close_quietly(ps: Any) -> None:
    if ps is None:
        return
    try:
        ps.close()
    except Exception:  # noqa: BLE001 - closing is best effort
        pass


def _background(client: Any, op: Op[Any]) -> None:
    """Runs ``op`` in a daemon thread (it ends with the client's connections)."""

    def run() -> None:
        try:
            _run(op)
        except Exception as e:  # noqa: BLE001 - background work reports nothing
            log.debug("dlock: background operation failed: %s", e)

    threading.Thread(target=run, name="dlock-background", daemon=True).start()


_FLAVOUR = _ops.Flavour(
    signal=LostSignal, watchdog=_Watchdog, tag=_core.thread_tag, who="thread",
    redis_module="redis", lanes=Lanes.of, notices=_Notices, background=_background,
)


# ---------------------------------------------------------------------------
# The public API


class Client(_ops.ClientCore[LostSignal, "Lock", "FairLock", "RWLock", "Semaphore", "Latch"]):
    """dlock on one redis-py client (``redis.Redis`` or ``redis.RedisCluster``).

    :param redis: the redis-py client; its settings (host, timeouts, TLS, auth,
        Sentinel) are used as they are. Lock commands go on connections of the client's
        own made with those settings (no retries of their own, bounded by deadlines);
        other commands through ``redis``. Waits on the server are cut into slices
        shorter than its ``socket_timeout``.
    :param watchdog_lease: lease (s) of locks taken without an explicit lease.
    :param renew_interval: how often the watchdog renews (default: a third of the
        lease; it must be below the lease).
    :param wait_slice: the longest single server-side ``WAIT`` (s; 4 by default).
    :param owner_prefix: replaces the random uuid at the start of owner ids.
    :param on_lost: ``callback(key, reason)`` called (from the watchdog thread) when any
        lock of this client is found lost.
    :param replicas: durable grants for every acquire (0: off): after each grant,
        ``WAIT`` until that many replicas have it, at most ``replicas_timeout`` s; when
        fewer do, the grant is released and :class:`~dlock.NotDurable` raised, after
        ``replicas_retries`` more tries.
    """

    _flavour = _FLAVOUR

    def owner(self) -> str:
        """The owner id of the calling thread: ``<uuid>:<thread>``."""
        return self._owner_id()

    def close(self) -> None:
        """Stops what this client runs in the background (watchdogs, the notice
        listener) and closes its own connections (BIND holds on them end). Holds it
        still has are reported lost (``unreachable``: nothing renews them; their leases
        end on the server). The redis-py client passed in is left open. Idempotent."""
        if not self._close_holds():
            return
        self._notices.close()
        if self._lanes is not None:
            self._lanes.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- plain commands ---------------------------------------------------------

    def execute(self, *args: Any, own_errors: bool = True) -> Any:
        """Sends one command; error replies become the package's exceptions."""
        return _run(self._op_execute(args, own_errors))

    def info(self, key: KeyT) -> Optional[Dict[str, Any]]:
        """``DLOCK.INFO key`` as a dict (None when no lock exists)."""
        return _run(self._op_info(key))

    def force_release(self, key: KeyT) -> bool:
        """``DLOCK.FORCERELEASE key`` (administrative): True when a lock was removed."""
        return _run(self._op_force_release(key))

    def check(self, key: KeyT, token: int) -> bool:
        """``DLOCK.CHECK key token``: is ``token`` the token of a live hold of ``key``?"""
        return _run(self._op_check(key, token))

    def fenced(self, key: KeyT, token: int, *command: Any) -> Any:
        """``DLOCK.FENCED key token command…``: runs ``command`` only while ``token`` is
        live; raises :class:`~dlock.errors.Fenced` otherwise (the command did not run)."""
        return _run(self._op_fenced(key, token, command))

    def has_command(self, name: str) -> bool:
        """Whether the server knows ``name`` (e.g. ``"dlock.semacquire"``)."""
        return _run(self._op_has_command(name))

    def scan(self, cursor: int = 0, **filters: Any) -> Tuple[int, List[Any]]:
        """``DLOCK.SCAN``: ``(next_cursor, keys)`` of lock keys (SCAN's contract).
        ``filters`` (keyword only): ``match``, ``count``, ``owner``, ``kind``,
        ``contended`` (see :meth:`dlock._ops.ClientCore._op_scan`)."""
        return _run(self._op_scan(cursor, **filters))

    def scan_iter(self, **kwargs: Any) -> Iterator[Any]:
        """Every lock key of a full ``DLOCK.SCAN`` iteration (a key may repeat)."""
        cursor = 0
        while True:
            cursor, keys = self.scan(cursor, **kwargs)
            yield from keys
            if cursor == 0:
                return

    def stats(self) -> Dict[str, Dict[str, List[Tuple[int, int]]]]:
        """``DLOCK.STATS``: ``{kind: {"waits": [(bound_us, count)], "holds": [...]}}``."""
        return _run(self._op_stats(False))

    def stats_reset(self) -> None:
        """``DLOCK.STATS RESET``."""
        _run(self._op_stats(True))

    def slowlog_get(self, n: int = 10) -> List[Dict[str, Any]]:
        """``DLOCK.SLOWLOG GET n`` (``-1``: all), newest first, as dicts."""
        return _run(self._op_slowlog("GET", int(n)))

    def slowlog_len(self) -> int:
        """``DLOCK.SLOWLOG LEN``."""
        return int(_run(self._op_slowlog("LEN")))

    def slowlog_reset(self) -> None:
        """``DLOCK.SLOWLOG RESET``."""
        _run(self._op_slowlog("RESET"))


W = TypeVar("W", bound="_With")


class _With:
    """``with``: :meth:`acquire` (``AcquireTimeout`` when its ``timeout`` passes first),
    :meth:`release` on the way out."""

    timeout: Optional[float]

    def acquire(self) -> bool:  # pragma: no cover - every kind defines it
        raise NotImplementedError

    def release(self) -> Any:  # pragma: no cover - every kind defines it
        raise NotImplementedError

    def _what(self) -> str:  # pragma: no cover - every kind defines it
        raise NotImplementedError

    def __enter__(self: W) -> W:
        if not self.acquire():
            raise AcquireTimeout(f"could not acquire {self._what()} within {self.timeout} s")
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


class _Base(_ops.LockCore[Client, LostSignal], _With):
    """What every lock kind shares: owner, token, lost signal, acquire/release loop."""

    @property
    def owner(self) -> str:
        """The owner id this lock acts with from the calling thread."""
        return self._owner_id()

    def locked(self) -> bool:
        """Whether anyone holds this lock now (``DLOCK.INFO``)."""
        return _run(self._op_locked())

    def renew(self, lease: Optional[float] = None) -> bool:
        """``DLOCK.RENEW``: restarts the lease of the calling thread's holds of this key
        — ``lease`` seconds, by default the hold's explicit lease (or the watchdog
        lease). True when renewed; False when the owner held nothing any more (then
        ``lost`` is set, ``NOT_HELD``). Locks under the watchdog need no renew()."""
        return _run(self._op_renew(lease))

    def check(self) -> bool:
        """``DLOCK.CHECK``: is the calling thread's token still the token of a live hold?"""
        return _run(self._op_check())

    def fenced(self, *command: Any) -> Any:
        """``DLOCK.FENCED key <own token> command…``: runs ``command`` only while this
        hold is live; raises :class:`~dlock.errors.Fenced` otherwise."""
        return _run(self._op_fenced(command))

    # redis-py's Lock vocabulary

    def owned(self) -> bool:
        """redis-py's ``owned()``: is the calling thread's hold live on the server?"""
        return _run(self._op_owned())

    def extend(self, additional_time: float, replace_ttl: bool = False) -> bool:
        """redis-py's ``extend()``: adds ``additional_time`` s to what is left of an
        explicit lease (``replace_ttl``: the lease becomes ``additional_time``). Raises
        :class:`~dlock.errors.NotHeld` when not held, :class:`DlockError` for a hold
        under the watchdog (it needs none)."""
        return _run(self._op_extend(additional_time, replace_ttl))

    def reacquire(self) -> bool:
        """redis-py's ``reacquire()``: restarts the explicit lease at its full length."""
        return _run(self._op_reacquire())

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

    def acquire(self, blocking: Optional[bool] = None, timeout: Optional[float] = _UNSET,
                lease: Optional[float] = _UNSET, *, bind: Optional[bool] = None,
                lock_delay: Optional[float] = None, replicas: Optional[int] = None,
                replicas_timeout: Optional[float] = None,
                blocking_timeout: Optional[float] = _UNSET) -> bool:
        """Takes the lock: True when granted, False when ``timeout`` (s) passed first
        (``timeout=0`` or ``blocking=False``: one try). ``lease`` (s): held for that long
        and never renewed; None: the watchdog lease, renewed until release.
        ``bind``: the hold ends when the connection that sent the grant closes.
        ``lock_delay`` (s): after a lease end (not a release) the lock stays excluded
        that much longer. ``replicas`` / ``replicas_timeout`` (s): a durable grant —
        ``WAIT`` for that many replicas after the grant; fewer: released again and
        :class:`~dlock.NotDurable` raised (None: the lock's, else the client's setting).
        ``blocking_timeout``: redis-py's name of ``timeout``."""
        return _run(self._op_acquire(None, blocking, _ops.wait_of(timeout, blocking_timeout),
                                     lease, bind, lock_delay, replicas, replicas_timeout))

    def release(self) -> Release:
        """Takes one hold away: :data:`Released`, :data:`StillHeld` (reentrant),
        :data:`Lost` (the lease had ended or it was force-released) or :data:`Unknown`
        (the release failed on its connection and on a fresh one: the hold is no longer
        renewed and ends with its lease; the error is :attr:`release_error`). After the
        last release the hold is never renewed again, whatever the outcome. Raises
        :class:`~dlock.errors.NotHeld` when this thread never held it."""
        return _run(self._op_release())


class FairLock(_ops.FairKind, Lock):
    """A fair (FIFO) reentrant mutex (``DLOCK.FAIRACQUIRE``): granted in the order owners
    first asked. An owner that gives up (a try that returns False, a wait that is
    interrupted) gives its queued place up at once (``DLOCK.CANCEL``)."""


class ReadLock(_ops.ReadKind, Lock):
    """The shared side of an :class:`RWLock`."""


class WriteLock(_ops.WriteKind, Lock):
    """The exclusive side of an :class:`RWLock`."""


class RWLock(_ops.RWLockCore[Client, ReadLock, WriteLock]):
    """A read-write lock (``DLOCK.RWACQUIRE``): many readers or one writer, writer
    preference, reentrant per thread; a lone reader may upgrade, a writer may downgrade.
    ``kwargs`` are the defaults of both sides (see :class:`Lock`)."""

    _sides = (ReadLock, WriteLock)

    def __repr__(self) -> str:
        return f"<RWLock {self.name!r}>"


class Semaphore(_Base, _ops.SemaphoreCore[Client, LostSignal]):
    """A semaphore of ``limit`` permits (``DLOCK.SEMACQUIRE``) whose holds are leased,
    fenced and named like lock holds. ``permits`` is how many permits ``acquire()`` and
    ``with`` take by default."""

    def acquire(self, permits: Optional[int] = None, blocking: Optional[bool] = None,
                timeout: Optional[float] = _UNSET, lease: Optional[float] = _UNSET, *,
                bind: Optional[bool] = None, lock_delay: Optional[float] = None,
                replicas: Optional[int] = None, replicas_timeout: Optional[float] = None,
                blocking_timeout: Optional[float] = _UNSET) -> bool:
        """Takes ``permits`` permits (default :attr:`permits`); see :meth:`Lock.acquire`."""
        wait = _ops.wait_of(timeout, blocking_timeout)
        return _run(self._op_acquire(permits, blocking, wait, lease, bind, lock_delay,
                                     replicas, replicas_timeout))

    def release(self, permits: Optional[int] = None) -> Release:
        """Gives ``permits`` permits back: :data:`Released` when the owner holds none
        any more, :data:`StillHeld` when some remain, :data:`Lost` when its hold had
        ended."""
        return _run(self._op_release(permits))


class Latch(_ops.LatchCore[Client]):
    """A countdown latch (``DLOCK.LATCHSET`` / ``COUNTDOWN`` / ``AWAIT``)."""

    def try_set_count(self, count: int) -> bool:
        """Creates the latch with ``count`` when none exists (True); False otherwise."""
        return _run(self._op_try_set_count(count))

    def count_down(self) -> int:
        """Lowers the count by one; the new count (0: open, or there was no latch)."""
        return _run(self._op_count_down())

    def count(self) -> int:
        """The current count (0 when no latch exists: it is open)."""
        return _run(self._op_count())

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Waits until the latch opens (True) or ``timeout`` (s) passes (False)."""
        return _run(self._op_wait(timeout))

    def __repr__(self) -> str:
        return f"<Latch {self.name!r}>"


# ---------------------------------------------------------------------------
# MultiLock


class MultiLock(_ops.MultiLockCore[_Base, LostSignal], _With):
    """All of several locks (possibly on different servers) or none — like Redisson's
    MultiLock. The locks are taken one by one in a fixed order (server address, key,
    kind) whatever order they were given in, so two MultiLocks over the same locks
    cannot deadlock each other; when one is not granted within what is left of the
    timeout, those already taken are released again (reverse order)."""

    def acquire(self, blocking: bool = True, timeout: Optional[float] = _UNSET, lease: Optional[float] = _UNSET) -> bool:
        return _run(self._op_acquire(blocking, timeout, lease))

    def release(self) -> List[Release]:
        """Releases every lock (reverse order); the outcomes in :attr:`names` order. The
        first error is raised after all were tried."""
        return _run(self._op_release())



# ---------------------------------------------------------------------------
# RedLock


class RedLock(_ops.RedLockCore[Client, LostSignal], _With):
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

    _client_type = Client

    def acquire(self, blocking: bool = True, timeout: Optional[float] = _UNSET, lease: Optional[float] = _UNSET) -> bool:
        return _run(self._op_acquire(blocking, timeout, lease))

    def release(self) -> Release:
        """Releases on every node: :data:`Released` / :data:`StillHeld` when a majority
        says so, :data:`Lost` when a majority answered that the owner held nothing;
        raises when fewer than a majority answered."""
        return _run(self._op_release())



Client._kinds = (Lock, FairLock, RWLock, Semaphore, Latch)
