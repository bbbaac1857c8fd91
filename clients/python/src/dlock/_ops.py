"""The sans-IO core of both flavours: every operation that talks to a server, written once.

Each operation (acquire with its waiting and retries, release, renew, a watchdog renewal,
MultiLock, RedLock, latches, fencing, …) is a generator that *yields effects* — send
this command to this node (:class:`Call`), these commands to these nodes in parallel
(:class:`CallAll`), read the clock (:data:`NOW`), sleep (:class:`Sleep`), listen on a
channel (:class:`Subscribe` / :class:`NextMessage` / :data:`UNSUBSCRIBE`) — and receives
their results (an error is thrown in where the effect was yielded). It does no I/O
itself: the sync flavour (:mod:`dlock._sync`) drives the same generators with blocking
redis-py calls and ``time.sleep``, the asyncio flavour (:mod:`dlock.aio`) with
``redis.asyncio`` and ``asyncio.sleep``, and a test can drive them with a fake
(:class:`Stepper`). The state the operations keep (holds, lost signals, the
watchdog's state machine) lives here too; each flavour supplies the few things that
differ (:class:`Flavour`: its lost signal, timers, watchdog driver and owner tag).
"""

from __future__ import annotations

import enum
import functools
import importlib
import inspect
import logging
import threading
import time
from typing import (
    Any,
    Callable,
    ClassVar,
    Dict,
    Generator,
    Generic,
    Iterable,
    List,
    Optional,
    Protocol,
    Sequence,
    Tuple,
    Type,
    TypeVar,
    Union,
    cast,
)

from redis.exceptions import ResponseError

from . import _core, _durable
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
from .errors import DlockError, NotHeld, map_error

from ._lost import _Base as _Signal

log = logging.getLogger("dlock")

T = TypeVar("T")
S = TypeVar("S", bound=_Signal)
OnLost = Callable[[KeyT, LostReason], Any]
#: The default of ``timeout`` / ``lease`` arguments: "the lock's own default".
UNSET: Any = object()


# ---------------------------------------------------------------------------
# Effects


class Effect:
    """Something an operation asks its driver to do."""

    __slots__ = ()


class Call(Effect):
    """Send ``args`` to ``target`` (a flavour's ``Client``) through its redis-py client.
    Answer: the reply; an error reply is thrown in as redis-py raised it. ``any_node``:
    on a cluster, to any one node (the command has no key)."""

    __slots__ = ("target", "args", "any_node")

    def __init__(self, target: Any, args: Sequence[Any], any_node: bool = False) -> None:
        self.target = target
        self.args = tuple(args)
        self.any_node = any_node

    def __repr__(self) -> str:
        return f"Call{self.args!r}"


class CallAll(Effect):
    """Send each ``(target, args)`` in parallel. Answer: one entry per call, the reply
    or the exception (``TimeoutError`` for a call not answered within ``timeout`` s)."""

    __slots__ = ("calls", "timeout")

    def __init__(self, calls: Sequence[Tuple[Any, Sequence[Any]]], timeout: float) -> None:
        self.calls = [(t, tuple(a)) for t, a in calls]
        self.timeout = timeout


class Sleep(Effect):
    """Pause ``seconds``. Answer: None."""

    __slots__ = ("seconds",)

    def __init__(self, seconds: float) -> None:
        self.seconds = max(0.0, seconds)

    def __repr__(self) -> str:
        return f"Sleep({self.seconds!r})"


class Now(Effect):
    """Read the monotonic clock. Answer: seconds (``time.monotonic()``)."""

    __slots__ = ()


class Subscribe(Effect):
    """Subscribe to ``channel`` on ``target`` (sharded pub/sub on a cluster), until
    :data:`UNSUBSCRIBE`. Answer: None."""

    __slots__ = ("target", "channel")

    def __init__(self, target: Any, channel: KeyT) -> None:
        self.target = target
        self.channel = channel


class NextMessage(Effect):
    """Wait at most ``timeout`` s for a message on the subscription. Answer: the
    message or None."""

    __slots__ = ("timeout",)

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout


class Unsubscribe(Effect):
    """Close the subscription. Answer: None."""

    __slots__ = ()


class Invoke(Effect):
    """Call ``fn(*args)``, a method of one of the flavour's redis-py objects (a
    connection of its own, a pub/sub, a pipeline); the asyncio driver awaits what it
    returns when that is awaitable. Answer: its result."""

    __slots__ = ("fn", "args", "kwargs")

    def __init__(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        self.fn = fn
        self.args = args
        self.kwargs = kwargs

    def __repr__(self) -> str:
        return f"Invoke({getattr(self.fn, '__name__', self.fn)!r}{self.args!r})"


NOW = Now()
UNSUBSCRIBE = Unsubscribe()

#: An operation: yields effects, receives their answers, returns ``T``.
Op = Generator[Effect, Any, T]


class Stepper(Generic[T]):
    """Steps an operation for a driver: :meth:`next` gives the next effect to perform
    (None when the operation is done, its value in :attr:`result`); the driver answers
    with :meth:`answer` or :meth:`fail`. :data:`NOW` is answered here from ``clock``.
    ``pubsub`` and ``listen`` are the driver's subscription (:class:`Subscribe`)."""

    def __init__(self, op: Op[T], clock: Callable[[], float] = time.monotonic) -> None:
        self._op = op
        self._clock = clock
        self._value: Any = None
        self._error: Optional[BaseException] = None
        self.result: Any = None
        self.pubsub: Any = None
        self.listen: Any = None

    def next(self) -> Optional[Effect]:
        while True:
            value, error = self._value, self._error
            self._value, self._error = None, None
            try:
                effect = self._op.throw(error) if error is not None else self._op.send(value)
            except StopIteration as stop:
                self.result = stop.value
                return None
            if effect is NOW:
                self._value = self._clock()
                continue
            return effect

    def answer(self, value: Any) -> None:
        self._value = value

    def fail(self, error: BaseException) -> None:
        self._error = error


# ---------------------------------------------------------------------------
# Building blocks


def command(target: Any, *args: Any, own_errors: bool = True) -> Op[Any]:
    """One command; error replies become the package's exceptions."""
    try:
        return (yield Call(target, args))
    except ResponseError as e:
        mapped = map_error(e, own_errors=own_errors)
        if mapped is e:
            raise
        raise mapped from e


def on_all(calls: Sequence[Tuple[Any, Sequence[Any]]], timeout: float) -> Op[List[Any]]:
    """Commands in parallel: each reply, or its (mapped) exception."""
    answers = yield CallAll(calls, timeout)
    return [map_error(a) if isinstance(a, BaseException) else a for a in answers]


def gave_up(e: BaseException) -> bool:
    """Whether an acquire that ended with ``e`` may have left a queue place behind
    (everything but the server's refusal and an unreachable server; a closed
    generator sends nothing)."""
    from redis.exceptions import ConnectionError as _ConnError

    from .errors import DlockResponseError

    return not isinstance(e, (GeneratorExit, DlockResponseError, _ConnError))


def cancel(target: Any, key: KeyT, owner: str) -> Op[int]:
    """``DLOCK.CANCEL key owner``: gives up the owner's queue places (a fair-queue
    place, a wait blocked on the server), best effort — a module older than the
    command (unknown command; remembered on ``target``) or any other failure answers 0."""
    if getattr(target, "_no_cancel", False):
        return 0
    try:
        return int((yield Call(target, ("DLOCK.CANCEL", key, owner))))
    except ResponseError as e:
        if "unknown command" in str(e).lower():
            target._no_cancel = True
        else:
            log.debug("dlock: DLOCK.CANCEL %r %r failed: %s", key, owner, e)
    except Exception as e:  # noqa: BLE001 - giving up must not fail on this
        log.debug("dlock: DLOCK.CANCEL %r %r failed: %s", key, owner, e)
    return 0


def wait_loop(
    slice_: float, timeout: Optional[float], attempt: Callable[[int], Op[Optional[T]]]
) -> Op[Optional[T]]:
    """Asks ``attempt(wait_ms)`` until it answers (not None) or ``timeout`` (s) passes:
    each server-side wait at most ``slice_``; polls every 50 ms when the client's socket
    timeout is too short to wait on the server."""
    deadline = None if timeout is None else (yield NOW) + max(0.0, timeout)
    while True:
        now = yield NOW
        left = slice_ if deadline is None else max(0.0, deadline - now)
        got = yield from attempt(int(min(left, slice_) * 1000))
        if got is not None:
            return got
        now = yield NOW
        if deadline is not None and now >= deadline:
            return None
        if slice_ < 0.001:  # socket_timeout too short to wait on the server: poll
            yield Sleep(min(0.05, slice_ if deadline is None else deadline - now))


def run_callbacks(
    callbacks: Sequence[Optional[OnLost]],
    key: KeyT,
    spawn: Optional[Callable[[Any], Any]],
    reason: LostReason,
) -> None:
    """Calls each ``on_lost(key, reason)``; an awaitable result goes to ``spawn``."""
    for cb in callbacks:
        if cb is None:
            continue
        try:
            r = cb(key, reason)
            if spawn is not None and inspect.isawaitable(r):
                spawn(r)
        except Exception:
            log.exception("dlock: on_lost callback failed")


# ---------------------------------------------------------------------------
# The watchdog's state machine (each flavour drives it: a scheduler thread, or a task)


class Step(enum.Enum):
    #: Nothing more to do (stopped).
    DONE = "done"
    #: Report the lock lost (value: the reason).
    LOST = "lost"
    #: Renew now (value: the attempt's timeout); report the answer to :meth:`done`.
    RENEW = "renew"
    #: Nothing before the value (a ``time.monotonic()`` instant).
    WAIT = "wait"


class WatchdogState:
    """When a watchdog renews, gives up, or is lost — no I/O, no clock of its own."""

    def __init__(
        self, lease: float, interval: float, confirmed: float, lost_reason: LostReason
    ) -> None:
        self.plan = Schedule(lease, interval, confirmed)
        self.lost_reason = lost_reason
        self.stopped = False
        self.inflight = False
        self.last_renewed: Optional[float] = None

    def due(self, now: float) -> Tuple[Step, Any]:
        plan = self.plan
        if self.stopped:
            return Step.DONE, None
        if now >= plan.lost_at():
            self.stopped = True
            return Step.LOST, LostReason.UNREACHABLE
        if self.inflight:
            return Step.WAIT, plan.lost_at()
        if now >= plan.next:
            self.inflight = True
            return Step.RENEW, plan.attempt_timeout(now)
        return Step.WAIT, plan.wake_at()

    def done(self, outcome: Renewal, started: float, now: float) -> Optional[LostReason]:
        """The renewal started at ``started`` answered ``outcome``: the reason when the
        lock is now lost, else None."""
        self.inflight = False
        if self.stopped:
            return None
        if outcome is Renewal.RENEWED:
            self.plan.renewed(started)
            self.last_renewed = started
        elif outcome is Renewal.LOST:
            self.stopped = True
            return self.lost_reason
        else:
            self.plan.failed(now)
        return None


class WatchdogHandle(Protocol):
    @property
    def last_renewed(self) -> Optional[float]: ...

    def stop(self) -> None: ...


RenewOp = Callable[[float], Op[Renewal]]


class Watchdog:
    """A watchdog: :class:`WatchdogState` and the renewal operation; a flavour drives it
    from :meth:`_start` on (a scheduler thread, or a task)."""

    def __init__(
        self,
        renew: RenewOp,
        lease: float,
        interval: float,
        confirmed: float,
        on_lost: Callable[[LostReason], None],
        lost_reason: LostReason = LostReason.NOT_HELD,
    ) -> None:
        self._renew = renew
        self._state = WatchdogState(lease, interval, confirmed, lost_reason)
        self._on_lost = on_lost
        self._start()

    def _start(self) -> None:  # pragma: no cover - every flavour defines it
        raise NotImplementedError

    @property
    def last_renewed(self) -> Optional[float]:
        return self._state.last_renewed

    def stop(self) -> None:  # pragma: no cover - every flavour defines it
        raise NotImplementedError


def is_cluster(r: Any, module: str) -> bool:
    """Whether ``r`` is a ``RedisCluster`` of redis-py's ``module``."""
    try:
        cls = importlib.import_module(module).RedisCluster
    except (ImportError, AttributeError):  # pragma: no cover
        return False
    return isinstance(r, cls)


class Flavour(Generic[S]):
    """What differs between the sync and the asyncio flavour, apart from the driver."""

    def __init__(
        self,
        *,
        signal: Callable[[Optional[float]], S],
        call_at: Callable[[float, Callable[[], Any]], None],
        watchdog: Callable[
            [RenewOp, float, float, float, Callable[[LostReason], None], LostReason],
            WatchdogHandle,
        ],
        tag: Callable[[], Any],
        who: str,
        redis_module: str,
        spawn: Optional[Callable[[Any], Any]] = None,
    ) -> None:
        #: A new lost signal (with an explicit-lease deadline, or None).
        self.signal = signal
        #: Runs ``fn`` at a ``time.monotonic()`` instant.
        self.call_at = call_at
        #: Starts a watchdog: ``(renew, lease, interval, confirmed, on_lost, reason)``.
        self.watchdog = watchdog
        #: The calling thread's (task's) part of owner ids.
        self.tag = tag
        #: "thread" or "task", for messages.
        self.who = who
        #: The redis-py module of this flavour (``redis`` or ``redis.asyncio``).
        self.redis_module = redis_module
        #: Runs an awaitable returned by an ``on_lost`` callback (asyncio only).
        self.spawn = spawn


# ---------------------------------------------------------------------------
# Holds and the client


class Hold(Generic[S]):
    """One owner's hold of one lock (all its reentrant grants)."""

    __slots__ = ("kind", "key", "owner", "token", "depth", "lost", "watchdog", "lease")

    def __init__(self, kind: Kind, key: KeyT, owner: str, token: int, lost: S) -> None:
        self.kind = kind
        self.key = key
        self.owner = owner
        self.token = token
        self.depth = 0
        self.lost = lost
        self.watchdog: Optional[WatchdogHandle] = None
        self.lease: Optional[float] = None

    def stop(self) -> None:
        if self.watchdog is not None:
            self.watchdog.stop()
            self.watchdog = None


HoldKey = Tuple[str, bytes, str]


def hold_key(kind: Kind, key: KeyT, owner: str) -> HoldKey:
    raw = key.encode() if isinstance(key, str) else bytes(key)
    return (kind.value, raw, owner)


LockT = TypeVar("LockT")
FairT = TypeVar("FairT")
RWT = TypeVar("RWT")
SemT = TypeVar("SemT")
LatchT = TypeVar("LatchT")
CT = TypeVar("CT", bound="ClientCore[Any, Any, Any, Any, Any, Any]")


class ClientCore(Generic[S, LockT, FairT, RWT, SemT, LatchT]):
    """The client's state and operations; a flavour adds the public methods that talk
    to the server, and the classes its factories make (``_kinds``)."""

    _flavour: Flavour[S]
    #: The flavour's Lock, FairLock, RWLock, Semaphore and Latch (set once they exist).
    _kinds: ClassVar[Tuple[Callable[..., Any], ...]]

    def __init__(
        self,
        redis: Any,
        *,
        watchdog_lease: float = DEFAULT_WATCHDOG_LEASE,
        renew_interval: Optional[float] = None,
        wait_slice: float = DEFAULT_WAIT_SLICE,
        owner_prefix: Optional[str] = None,
        on_lost: Optional[OnLost] = None,
        replicas: int = 0,
        replicas_timeout: float = _durable.DEFAULT_TIMEOUT,
        replicas_retries: int = 0,
    ) -> None:
        self.redis = redis
        #: Durable grants by default (see :mod:`dlock._durable`): 0 = off.
        self.replicas = replicas
        self.replicas_timeout = replicas_timeout
        self.replicas_retries = replicas_retries
        self.watchdog_lease = _core.check_lease(watchdog_lease, "watchdog_lease")
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
        self._holds: Dict[HoldKey, Hold[S]] = {}
        self._cluster = is_cluster(redis, self._flavour.redis_module + ".cluster")
        #: Set once the server answered DLOCK.CANCEL with "unknown command".
        self._no_cancel = False

    @classmethod
    def from_url(cls: Type[CT], url: str, **kwargs: Any) -> CT:
        """A client on ``redis.Redis.from_url(url)``; ``kwargs`` go to :class:`Client`."""
        redis = importlib.import_module(cls._flavour.redis_module)
        return cls(redis.Redis.from_url(url), **kwargs)

    def _owner_id(self) -> str:
        return f"{self.prefix}:{self._flavour.tag()}"

    # -- factories (no I/O) -----------------------------------------------------

    def lock(self, name: KeyT, **kwargs: Any) -> LockT:
        """The reentrant mutex at key ``name`` (``DLOCK.ACQUIRE``)."""
        return cast(LockT, self._kinds[0](self, name, **kwargs))

    def fair_lock(self, name: KeyT, **kwargs: Any) -> FairT:
        """The fair (FIFO) lock at key ``name`` (``DLOCK.FAIRACQUIRE``)."""
        return cast(FairT, self._kinds[1](self, name, **kwargs))

    def rwlock(self, name: KeyT, **kwargs: Any) -> RWT:
        """The read-write lock at key ``name`` (``DLOCK.RWACQUIRE``)."""
        return cast(RWT, self._kinds[2](self, name, **kwargs))

    def semaphore(self, name: KeyT, limit: int, **kwargs: Any) -> SemT:
        """The semaphore of ``limit`` permits at key ``name`` (``DLOCK.SEMACQUIRE``)."""
        return cast(SemT, self._kinds[3](self, name, limit, **kwargs))

    def latch(self, name: KeyT) -> LatchT:
        """The countdown latch at key ``name`` (``DLOCK.LATCHSET/COUNTDOWN/AWAIT``)."""
        return cast(LatchT, self._kinds[4](self, name))

    # -- plain commands ---------------------------------------------------------

    def _op_execute(self, args: Sequence[Any], own_errors: bool) -> Op[Any]:
        return (yield from command(self, *args, own_errors=own_errors))

    def _op_info(self, key: KeyT) -> Op[Optional[Dict[str, Any]]]:
        return _core.parse_info((yield from command(self, "DLOCK.INFO", key)))

    def _op_force_release(self, key: KeyT) -> Op[bool]:
        return bool((yield from command(self, "DLOCK.FORCERELEASE", key)))

    def _op_check(self, key: KeyT, token: int) -> Op[bool]:
        return bool((yield from command(self, "DLOCK.CHECK", key, int(token))))

    def _op_fenced(self, key: KeyT, token: int, command_: Sequence[Any]) -> Op[Any]:
        if not command_:
            raise ValueError("fenced() needs a command to run")
        args = ("DLOCK.FENCED", key, int(token), *command_)
        return (yield from command(self, *args, own_errors=False))

    def _op_scan(
        self,
        cursor: int = 0,
        *,
        match: Optional[KeyT] = None,
        count: Optional[int] = None,
        owner: Optional[KeyT] = None,
        kind: Optional[str] = None,
        contended: bool = False,
    ) -> Op[Tuple[int, List[Any]]]:
        """``DLOCK.SCAN cursor [MATCH m] [COUNT n] [OWNER o] [KIND k] [CONTENDED]``."""
        args: List[Any] = ["DLOCK.SCAN", int(cursor)]
        for name, val in (("MATCH", match), ("COUNT", count), ("OWNER", owner), ("KIND", kind)):
            if val is not None:
                args += [name, val]
        if contended:
            args.append("CONTENDED")
        nxt, keys = yield from command(self, *args)
        return int(nxt), list(keys)

    def _op_stats(self, reset: bool) -> Op[Any]:
        if reset:
            return (yield from command(self, "DLOCK.STATS", "RESET"))
        return _core.parse_stats((yield from command(self, "DLOCK.STATS")))

    def _op_slowlog(self, sub: str, *args: Any) -> Op[Any]:
        r = yield from command(self, "DLOCK.SLOWLOG", sub, *args)
        return _core.parse_slowlog(r) if sub == "GET" else r

    def _op_has_command(self, name: str) -> Op[bool]:
        # Sent without arguments: an arity error when the server knows the command,
        # "unknown command" when it does not (and nothing runs either way).
        # (On a cluster: any one node; every node loads the same module.)
        try:
            yield Call(self, (name,), any_node=True)
        except ResponseError as e:
            return "unknown command" not in str(e).lower()
        return True

    # -- acquiring --------------------------------------------------------------

    def _slice(self) -> float:
        return _core.wait_slice_for(self.redis, self.wait_slice)

    def _op_acquire(
        self,
        kind: Kind,
        key: KeyT,
        owner: str,
        lease: Optional[float],
        timeout: Optional[float],
        mode: WaitMode,
        extra: Dict[str, Any],
    ) -> Op[Optional[Tuple[int, float]]]:
        """Asks until granted or ``timeout`` passes: ``(token, lease start)`` or None."""
        lease_s = self.watchdog_lease if lease is None else float(lease)
        lms = _core.lease_ms(lease_s)
        durable = extra.pop("durable", None)
        attempt = functools.partial(self._op_attempt, kind, key, owner, lease_s, lms, extra)
        if durable is not None:
            attempt = functools.partial(
                _durable.op_attempt, self, kind, key, owner, lease_s, lms, extra, durable
            )
        try:
            if mode is WaitMode.NOTIFY and timeout != 0:
                got = yield from self._op_acquire_notified(kind, key, timeout, attempt)
            else:
                got = yield from wait_loop(self._slice(), timeout, attempt)
        except BaseException as e:
            # Cancelled, interrupted, timed out on the socket: no place may stay behind.
            if gave_up(e):
                yield from cancel(self, key, owner)
            raise
        if got is None and kind is Kind.FAIR:
            # A fair try keeps its queued place between polls: give it up now, so the
            # next in line is served at once instead of after fair-queue-timeout-ms.
            yield from cancel(self, key, owner)
        return got

    def _op_attempt(
        self, kind: Kind, key: KeyT, owner: str, lease_s: float, lms: int,
        extra: Dict[str, Any], wms: int,
    ) -> Op[Optional[Tuple[int, float]]]:
        """One acquire that waits at most ``wms`` on the server."""
        sent = yield NOW
        reply = yield from command(self, *_core.acquire_args(kind, key, owner, lms, wms, **extra))
        token = _core.parse_token(reply)
        if token is None:
            return None
        start = yield from self._op_anchor(key, owner, lms, lease_s, sent)
        return None if start is None else (token, start)

    def _op_anchor(self, key: KeyT, owner: str, lms: int, lease_s: float, sent: float) -> Op[Optional[float]]:
        """The instant the lease surely started: ``sent``, or after a long wait, a RENEW
        sent now (None when the lease had already lapsed)."""
        now: float = yield NOW
        if now - sent <= _core.lease_clock_slack(lease_s):
            return sent
        if _core.parse_renewed((yield from command(self, *_core.renew_args(key, owner, lms)))):
            return now
        return None

    def _op_acquire_notified(
        self,
        kind: Kind,
        key: KeyT,
        timeout: Optional[float],
        attempt: Callable[[int], Op[Optional[Tuple[int, float]]]],
    ) -> Op[Optional[Tuple[int, float]]]:
        deadline = None if timeout is None else (yield NOW) + max(0.0, timeout)
        got = yield from attempt(0)
        if got is not None:
            return got
        slice_ = self.wait_slice
        if kind is Kind.FAIR:  # a polling owner keeps its queued place only if it asks again
            slice_ = min(slice_, 1.0)
        yield Subscribe(self, _core.channel_for(key))
        try:
            while True:
                # Subscribed first, then asked: a release in between is not missed.
                got = yield from attempt(0)
                if got is not None:
                    return got
                left = slice_ if deadline is None else deadline - (yield NOW)
                if left <= 0:
                    return None
                yield NextMessage(max(0.001, min(left, slice_)))
        finally:
            yield UNSUBSCRIBE

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
    ) -> Hold[S]:
        hk = hold_key(kind, key, owner)
        with self._mu:
            hold = self._holds.get(hk)
            if hold is None or hold.token != token or hold.lost.is_set():
                # A new hold on the server (a reentrant grant keeps its token).
                if hold is not None:
                    hold.stop()
                sig = self._flavour.signal(None)
                sig._add_listener(
                    functools.partial(run_callbacks, (on_lost, self.on_lost), key, self._flavour.spawn)
                )
                hold = Hold(kind, key, owner, token, sig)
                self._holds[hk] = hold
            hold.depth += amount
            if lease is None:
                hold.lost._set_deadline(None)
                if hold.watchdog is None:
                    hold.watchdog = self._start_watchdog(hold, start, on_lost)
            elif hold.watchdog is None:
                self._arm_deadline(hold, start, lease, on_lost)
        return hold

    def _arm_deadline(self, hold: Hold[S], start: float, lease: float, on_lost: Optional[OnLost]) -> None:
        """An explicit lease started at ``start``: the hold counts as lost at its end."""
        hold.lease = lease
        deadline = start + lease - _core.lost_margin(lease)
        hold.lost._set_deadline(deadline)
        if on_lost is not None or self.on_lost is not None:
            # Callbacks run when the lease ends even if nobody looks.
            self._flavour.call_at(deadline, hold.lost.is_set)

    def _start_watchdog(self, hold: Hold[S], start: float, on_lost: Optional[OnLost]) -> WatchdogHandle:
        lease = self.watchdog_lease
        args = _core.renew_args(hold.key, hold.owner, _core.lease_ms(lease))

        def renew(timeout: float) -> Op[Renewal]:
            try:
                v = yield from command(self, *args)
            except Exception:
                return Renewal.FAILED
            answer = _core.parse_renewed(v)
            if answer is None:
                return Renewal.FAILED
            return Renewal.RENEWED if answer else Renewal.LOST

        return self._flavour.watchdog(
            renew,
            lease,
            self.renew_interval,
            start,
            lambda reason: self._lost(hold, reason, on_lost),
            LostReason.NOT_HELD,
        )

    def _lost(self, hold: Hold[S], reason: LostReason, on_lost: Optional[OnLost]) -> None:
        hold.lost._mark(reason)  # its listener runs the callbacks

    def _hold(self, kind: Kind, key: KeyT, owner: str) -> Optional[Hold[S]]:
        with self._mu:
            return self._holds.get(hold_key(kind, key, owner))

    # -- releasing --------------------------------------------------------------

    def _op_release(
        self, kind: Kind, key: KeyT, owner: str, amount: int, on_lost: Optional[OnLost], permits: Optional[int]
    ) -> Op[Release]:
        hk = hold_key(kind, key, owner)
        with self._mu:
            hold = self._holds.get(hk)
            final = hold is None or hold.depth <= amount
            if hold is not None and final:
                hold.stop()  # no renewal may race the last release
        try:
            outcome = _core.parse_release(
                (yield from command(self, *_core.release_args(kind, key, owner, permits)))
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
                    if hold.lost.is_set():
                        # Already reported lost (its lease ended, as far as this
                        # client can tell): the release answers so, whatever the
                        # server still had.
                        outcome = Release.LOST
                    else:
                        hold.lost._set_deadline(None)  # let go in time: never "lost"
        if outcome is Release.LOST and hold is not None:
            self._lost(hold, LostReason.NOT_HELD, on_lost)
        return outcome


# ---------------------------------------------------------------------------
# Locks

C = TypeVar("C", bound="ClientCore[Any, Any, Any, Any, Any, Any]")


#: Why ``timeout=`` is refused where a lock is made (redis-py's ``Redis.lock``).
AMBIGUOUS_TIMEOUT = (
    "timeout= is ambiguous where a lock is made: redis-py's Redis.lock(timeout=) is the "
    "lease (how long the hold lasts), and a wait in threading/asyncio. Say which: "
    "lease= (seconds the hold lasts; leave it out for a lock renewed until release) or "
    "blocking_timeout= (seconds acquire() and `with` wait; None: as long as it takes). "
    "acquire(timeout=) stays the wait, as in threading.Lock.acquire."
)


def wait_of(timeout: Any, blocking_timeout: Any) -> Any:
    """``acquire``'s wait from ``timeout`` or its redis-py name ``blocking_timeout``."""
    if blocking_timeout is UNSET:
        return timeout
    if timeout is not UNSET:
        raise TypeError(
            "acquire() got both timeout= and blocking_timeout=: they are the same (the "
            "wait, in seconds); give one"
        )
    return blocking_timeout


class LockCore(Generic[C, S]):
    """What every lock kind shares: owner, token, lost signal, acquire/release.

    redis-py's ``Lock`` vocabulary is accepted where it means the same here:
    ``blocking_timeout`` (the default wait), ``blocking`` (False: acquire() tries once
    by default), ``sleep`` (accepted and unused: waiting is done on the server, not by
    polling), ``thread_local`` (True, the default: one owner per thread, as redis-py's
    per-thread token; False: one owner for every thread, so one thread may release
    what another acquired). ``timeout`` is refused (:data:`AMBIGUOUS_TIMEOUT`)."""

    _kind: Kind = Kind.MUTEX

    def __init__(
        self,
        client: C,
        name: KeyT,
        *,
        timeout: Any = UNSET,
        blocking_timeout: Optional[float] = None,
        blocking: bool = True,
        sleep: Optional[float] = None,
        thread_local: bool = True,
        lease: Optional[float] = None,
        wait_mode: WaitMode = WaitMode.SERVER,
        owner: Optional[str] = None,
        on_lost: Optional[OnLost] = None,
        bind: bool = False,
        lock_delay: Optional[float] = None,
        replicas: Optional[int] = None,
        replicas_timeout: Optional[float] = None,
        replicas_retries: Optional[int] = None,
    ) -> None:
        if timeout is not UNSET:
            raise TypeError(AMBIGUOUS_TIMEOUT)
        if sleep is not None and not (float(sleep) >= 0):
            raise ValueError(f"sleep must be a number of seconds >= 0, got {sleep!r}")
        self.client = client
        self.name = name
        #: Durable grants (None: the client's setting).
        self.replicas = replicas
        self.replicas_timeout = replicas_timeout
        self.replicas_retries = replicas_retries
        #: The default wait of acquire() and ``with`` (s; None: as long as it takes).
        self.timeout = blocking_timeout
        #: The default of acquire()'s ``blocking``.
        self.blocking = bool(blocking)
        #: redis-py's poll interval: unused (the wait is on the server).
        self.sleep = sleep
        if not thread_local and owner is None:
            owner = f"{client.prefix}:{_core.new_prefix()}"
        self.thread_local = bool(thread_local)
        self.lease = None if lease is None else _core.check_lease(lease)
        self.wait_mode = WaitMode(wait_mode)
        self._owner = owner
        self.on_lost = on_lost
        self.bind = bind
        self.lock_delay = lock_delay
        self._empty_lost: S = client._flavour.signal(None)
        self._lost_by_owner: Dict[str, S] = {}

    @property
    def kind(self) -> Kind:
        return self._kind

    def _owner_id(self) -> str:
        return self._owner if self._owner is not None else self.client._owner_id()

    def _current(self) -> Optional[Hold[S]]:
        return self.client._hold(self._kind, self.name, self._owner_id())

    @property
    def token(self) -> Optional[int]:
        """The fencing token of the calling thread's hold (None when not held)."""
        h = self._current()
        return None if h is None else h.token

    @property
    def lost(self) -> S:
        """The calling thread's lost-lock signal (an Event: ``is_set()``, ``wait()``)."""
        h = self._current()
        if h is not None:
            return h.lost
        return self._lost_by_owner.get(self._owner_id(), self._empty_lost)

    def held(self) -> bool:
        """Whether the calling thread holds this lock (as far as this client knows)."""
        h = self._current()
        return h is not None and not h.lost.is_set()

    def _op_locked(self) -> Op[bool]:
        info = yield from self.client._op_info(self.name)
        return bool(info and info.get("holders"))

    def _op_renew(self, lease: Optional[float]) -> Op[bool]:
        h = self._current()
        if lease is None:
            lease = h.lease if h is not None and h.lease else self.client.watchdog_lease
        sent = yield NOW
        args = _core.renew_args(self.name, self._owner_id(), _core.lease_ms(lease))
        if _core.parse_renewed((yield from command(self.client, *args))):
            if h is not None and h.watchdog is None:
                with self.client._mu:
                    self.client._arm_deadline(h, sent, lease, self.on_lost)
            return True
        if h is not None:
            self.client._lost(h, LostReason.NOT_HELD, self.on_lost)
        return False

    def _extra(self, bind: Optional[bool], lock_delay: Optional[float], amount: int) -> Dict[str, Any]:
        extra: Dict[str, Any] = {}
        if self.bind if bind is None else bind:
            extra["bind"] = True
        ld = self.lock_delay if lock_delay is None else lock_delay
        if ld:
            extra["lock_delay"] = _core.ceil_ms(ld)
        return extra

    def _amount(self, permits: Optional[int]) -> int:
        return 1

    @property
    def blocking_timeout(self) -> Optional[float]:
        """redis-py's name of the default wait (:attr:`timeout`)."""
        return self.timeout

    def _op_owned(self) -> Op[bool]:
        """redis-py's ``owned()``: whether the calling thread's hold is live on the
        server (``DLOCK.CHECK`` of its token; False when it holds nothing)."""
        h = self._current()
        if h is None:
            return False
        return bool((yield from self.client._op_check(self.name, h.token)))

    def _op_extend(self, additional_time: float, replace_ttl: bool) -> Op[bool]:
        """redis-py's ``extend()``: the lease becomes what is left of it plus
        ``additional_time`` s (``replace_ttl``: exactly ``additional_time`` s)."""
        h = self._current()
        if h is None or h.lost.is_set():
            raise NotHeld(
                f"NOTHELD cannot extend {self.name!r}: the calling {self.client._flavour.who} "
                "does not hold it (or it was lost)"
            )
        if h.watchdog is not None:
            raise DlockError(
                f"cannot extend {self.name!r}: its hold is renewed by the watchdog (taken "
                "without a lease); extend() is for holds taken with lease="
            )
        add = _core.check_lease(additional_time, "additional_time")
        if replace_ttl:
            lease = add
        else:
            info = yield from self.client._op_info(self.name)
            left = _core.remaining_of(info, self._owner_id())
            lease = add + (left or 0.0)
        granted = h.lease
        ok = yield from self._op_renew(lease)
        h.lease = granted  # reacquire() and renew() keep the lease it was taken with
        if not ok:
            raise NotHeld(f"NOTHELD cannot extend {self.name!r}: the hold had ended")
        return True

    def _op_reacquire(self) -> Op[bool]:
        """redis-py's ``reacquire()``: the lease starts again at its full length."""
        h = self._current()
        lease = h.lease if h is not None else None
        if h is None or h.lost.is_set():
            raise NotHeld(
                f"NOTHELD cannot reacquire {self.name!r}: the calling "
                f"{self.client._flavour.who} does not hold it (or it was lost)"
            )
        if lease is None:
            raise DlockError(
                f"cannot reacquire {self.name!r}: its hold is renewed by the watchdog "
                "(taken without a lease); reacquire() is for holds taken with lease="
            )
        if not (yield from self._op_renew(lease)):
            raise NotHeld(f"NOTHELD cannot reacquire {self.name!r}: the hold had ended")
        return True

    def _op_acquire(
        self,
        permits: Optional[int] = None,
        blocking: Optional[bool] = None,
        timeout: Optional[float] = UNSET,
        lease: Optional[float] = UNSET,
        bind: Optional[bool] = None,
        lock_delay: Optional[float] = None,
        replicas: Optional[int] = None,
        replicas_timeout: Optional[float] = None,
    ) -> Op[bool]:
        amount = self._amount(permits)
        extra = self._extra(bind, lock_delay, amount)
        durable = _durable.durable_of(
            replicas if replicas is not None else self.replicas,
            replicas_timeout if replicas_timeout is not None else self.replicas_timeout,
            self.replicas_retries,
            self.client,
        )
        if durable is not None:
            extra["durable"] = durable
        timeout = self.timeout if timeout is UNSET else timeout
        lease = self.lease if lease is UNSET else lease
        if not (self.blocking if blocking is None else blocking):
            timeout = 0
        owner = self._owner_id()
        got = yield from self.client._op_acquire(
            self._kind, self.name, owner, lease, timeout, self.wait_mode, extra
        )
        if got is None:
            return False
        hold = self.client._granted(
            self._kind, self.name, owner, got[0], got[1], lease, amount, self.on_lost
        )
        self._lost_by_owner[owner] = hold.lost
        return True

    def _op_release(self, permits: Optional[int] = None) -> Op[Release]:
        return (
            yield from self.client._op_release(
                self._kind, self.name, self._owner_id(), 1, self.on_lost, None
            )
        )

    def _op_check(self) -> Op[bool]:
        return (yield from self.client._op_check(self.name, self._require_token()))

    def _op_fenced(self, command_: Sequence[Any]) -> Op[Any]:
        return (yield from self.client._op_fenced(self.name, self._require_token(), command_))

    def _what(self) -> str:
        return repr(self.name)

    def _require_token(self) -> int:
        t = self.token
        if t is None:
            raise DlockError(f"{self.name!r} is not held by {self._owner_id()!r}; no token to check")
        return t


class SemaphoreCore(LockCore[C, S]):
    _kind = Kind.SEMAPHORE

    def __init__(self, client: C, name: KeyT, limit: int, *, permits: int = 1, **kwargs: Any) -> None:
        super().__init__(client, name, **kwargs)
        if limit < 1:
            raise ValueError("limit must be at least 1")
        self.limit = int(limit)
        self.permits = int(permits)

    def _amount(self, permits: Optional[int]) -> int:
        return self.permits if permits is None else int(permits)

    def _extra(self, bind: Optional[bool], lock_delay: Optional[float], amount: int) -> Dict[str, Any]:
        extra = super()._extra(bind, lock_delay, amount)
        extra.update(limit=self.limit, permits=amount)
        return extra

    def _op_release(self, permits: Optional[int] = None) -> Op[Release]:
        k = self._amount(permits)
        return (
            yield from self.client._op_release(
                self._kind, self.name, self._owner_id(), k, self.on_lost, k
            )
        )

    @property
    def held_permits(self) -> int:
        """How many permits the calling thread holds (as far as this client knows)."""
        h = self._current()
        return 0 if h is None else h.depth


class FairKind:
    _kind = Kind.FAIR


class ReadKind:
    _kind = Kind.READ


class WriteKind:
    _kind = Kind.WRITE


R = TypeVar("R")
W = TypeVar("W")


class RWLockCore(Generic[C, R, W]):
    """The two sides of a read-write lock (``_sides``: the flavour's classes)."""

    _sides: Tuple[Callable[..., R], Callable[..., W]]

    def __init__(self, client: C, name: KeyT, **kwargs: Any) -> None:
        self.client = client
        self.name = name
        self._read = self._sides[0](client, name, **kwargs)
        self._write = self._sides[1](client, name, **kwargs)

    def read(self) -> R:
        return self._read

    def write(self) -> W:
        return self._write


class LatchCore(Generic[C]):
    def __init__(self, client: C, name: KeyT) -> None:
        self.client = client
        self.name = name

    def _op_try_set_count(self, count: int) -> Op[bool]:
        return bool((yield from command(self.client, "DLOCK.LATCHSET", self.name, int(count))))

    def _op_count_down(self) -> Op[int]:
        return int((yield from command(self.client, "DLOCK.COUNTDOWN", self.name)))

    def _op_count(self) -> Op[int]:
        info = yield from self.client._op_info(self.name)
        return 0 if info is None else int(info.get("count", 0))

    def _op_wait(self, timeout: Optional[float]) -> Op[bool]:
        def attempt(wms: int) -> Op[Optional[bool]]:
            opened = (yield from command(self.client, "DLOCK.AWAIT", self.name, "WAIT", wms)) == 1
            return True if opened else None

        return bool((yield from wait_loop(self.client._slice(), timeout, attempt)))


# ---------------------------------------------------------------------------
# MultiLock

L = TypeVar("L", bound="LockCore[Any, Any]")


class MultiLockCore(Generic[L, S]):
    def __init__(
        self, locks: Iterable[L], *, timeout: Optional[float] = None, lease: Optional[float] = None
    ) -> None:
        items = list(locks)
        if not items:
            raise ValueError("a MultiLock needs at least one lock")
        items.sort(
            key=lambda l: _core.server_sort_key(_core.server_address(l.client.redis), l.name, l.kind)
        )
        self.locks: List[L] = items
        self.timeout = timeout
        self.lease = None if lease is None else _core.check_lease(lease)
        self._lost: Dict[str, S] = {}

    @property
    def names(self) -> List[KeyT]:
        """The keys, in the order they are taken."""
        return [l.name for l in self.locks]

    def _owner(self) -> str:
        return self.locks[0]._owner_id()

    def _what(self) -> str:
        return f"all of {self.names!r}"

    def _signal(self) -> S:
        return self.locks[0].client._flavour.signal(None)  # type: ignore[no-any-return]

    def _op_acquire(self, blocking: bool, timeout: Optional[float], lease: Optional[float]) -> Op[bool]:
        timeout = self.timeout if timeout is UNSET else timeout
        lease = self.lease if lease is UNSET else lease
        if not blocking:
            timeout = 0
        deadline = None if timeout is None else (yield NOW) + timeout
        taken: List[L] = []
        try:
            for l in self.locks:
                left = None if deadline is None else max(0.0, deadline - (yield NOW))
                if not (yield from l._op_acquire(None, True, left, lease)):
                    yield from self._op_rollback(taken)
                    return False
                taken.append(l)
        except BaseException:
            yield from self._op_rollback(taken)
            raise
        combined = self._signal()
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
    def _op_rollback(taken: List[L]) -> Op[None]:
        for l in reversed(taken):
            try:
                yield from l._op_release()
            except Exception:
                pass

    def _op_release(self) -> Op[List[Release]]:
        outcomes: List[Release] = []
        first: Optional[BaseException] = None
        for l in reversed(self.locks):
            try:
                outcomes.append((yield from l._op_release()))
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
    def lost(self) -> S:
        """Set when any of the locks is lost."""
        return self._lost.get(self._owner()) or self._signal()


# ---------------------------------------------------------------------------
# RedLock


class RedHold(Generic[S]):
    __slots__ = ("owner", "tokens", "valid_until", "lost", "watchdog")

    def __init__(self, owner: str, tokens: List[Optional[int]], valid_until: float, lost: S) -> None:
        self.owner = owner
        self.tokens = tokens
        self.valid_until = valid_until
        self.lost = lost
        self.watchdog: Optional[WatchdogHandle] = None


class RedLockCore(Generic[C, S]):
    _client_type: Type[C]

    @property
    def _flavour(self) -> Flavour[S]:
        return self._client_type._flavour

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
        ct = self._client_type
        self.nodes: List[C] = [n if isinstance(n, ct) else ct(n) for n in nodes]
        self.name = name
        self.node_timeout = max(node_timeout, 0.001)
        self.retry_delay = retry_delay
        self.watchdog_lease = _core.check_lease(watchdog_lease, "watchdog_lease")
        self.renew_interval = float(
            renew_interval if renew_interval is not None else self.watchdog_lease / 3.0
        )
        self.timeout = timeout
        self.lease = None if lease is None else _core.check_lease(lease)
        self._owner = owner
        self.prefix = _core.new_prefix()
        self.on_lost = on_lost
        self._holds: Dict[str, RedHold[S]] = {}
        self._mu = threading.Lock()

    @property
    def quorum(self) -> int:
        return _core.quorum_of(len(self.nodes))

    @property
    def owner(self) -> str:
        return self._owner if self._owner is not None else f"{self.prefix}:{self._flavour.tag()}"

    def _current(self) -> Optional[RedHold[S]]:
        with self._mu:
            return self._holds.get(self.owner)

    def _on_all(self, args: Sequence[Any], timeout: float) -> Op[List[Any]]:
        return (yield from on_all([(n, args) for n in self.nodes], timeout))

    def _op_acquire(self, blocking: bool, timeout: Optional[float], lease: Optional[float]) -> Op[bool]:
        timeout = self.timeout if timeout is UNSET else timeout
        lease = self.lease if lease is UNSET else lease
        if not blocking:
            timeout = 0
        owner = self.owner
        if self._current() is not None:
            raise DlockError(f"a RedLock is not reentrant: this {self._flavour.who} already holds it")
        lease_s = self.watchdog_lease if lease is None else float(lease)
        lms = _core.lease_ms(lease_s)
        deadline = None if timeout is None else (yield NOW) + max(0.0, timeout)
        acq = _core.acquire_args(Kind.MUTEX, self.name, owner, lms, 0)
        rel = _core.release_args(Kind.MUTEX, self.name, owner)
        while True:
            start = yield NOW
            answers = yield from self._on_all(acq, self.node_timeout)
            tokens: List[Optional[int]] = []
            for a in answers:
                try:
                    tokens.append(None if isinstance(a, BaseException) else _core.parse_token(a))
                except DlockError:
                    tokens.append(None)
            until = _core.granted_until(tokens, self.quorum, start, (yield NOW), lease_s)
            if until is not None:
                self._granted(owner, tokens, until, lease, start)
                return True
            # Failed attempt: release on every node (also where the answer was lost).
            yield from self._on_all(rel, self.node_timeout)
            now = yield NOW
            if deadline is not None and now >= deadline:
                return False
            pause = _core.retry_pause(self.retry_delay)
            if deadline is not None:
                pause = min(pause, deadline - now)
            yield Sleep(pause)

    def _granted(self, owner: str, tokens: List[Optional[int]], until: float, lease: Optional[float], start: float) -> None:
        fl = self._flavour
        lost = fl.signal(until if lease is not None else None)
        lost._add_listener(functools.partial(run_callbacks, (self.on_lost,), self.name, fl.spawn))
        if lease is not None and self.on_lost is not None:
            fl.call_at(until, lost.is_set)
        hold = RedHold(owner, tokens, until, lost)
        if lease is None:
            wl = self.watchdog_lease
            args = _core.renew_args(self.name, owner, _core.lease_ms(wl))

            def renew(timeout: float) -> Op[Renewal]:
                sent = yield NOW
                answers = yield from self._on_all(args, timeout)
                flags = [None if isinstance(a, BaseException) else _core.parse_renewed(a) for a in answers]
                outcome = _core.renewal_outcome(flags, self.quorum)
                if outcome is Renewal.RENEWED:
                    hold.valid_until = sent + wl - _core.drift(wl)
                return outcome

            hold.watchdog = fl.watchdog(
                renew, wl, self.renew_interval, start,
                lambda reason: self._lost(hold, reason),
                LostReason.NO_QUORUM,
            )
        with self._mu:
            self._holds[owner] = hold

    def _what(self) -> str:
        return f"RedLock {self.name!r}"

    def _lost(self, hold: RedHold[S], reason: LostReason) -> None:
        hold.lost._mark(reason)  # its listener runs the callback

    def _op_release(self) -> Op[Release]:
        owner = self.owner
        with self._mu:
            hold = self._holds.pop(owner, None)
        if hold is None:
            raise NotHeld(f"NOTHELD this {self._flavour.who} does not hold the RedLock {self.name!r}")
        if hold.watchdog is not None:
            hold.watchdog.stop()
        rel = _core.release_args(Kind.MUTEX, self.name, owner)
        answers = yield from self._on_all(rel, max(self.node_timeout, 1.0))
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
                    if hold.lost.is_set():  # reported lost before: stays so
                        return Release.LOST
                    hold.lost._set_deadline(None)
                return want
        answered = sum(1 for o in outcomes if isinstance(o, Release))
        if answered < self.quorum:
            raise next(o for o in outcomes if isinstance(o, BaseException))
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
    def lost(self) -> S:
        h = self._current()
        return h.lost if h is not None else self._flavour.signal(None)
