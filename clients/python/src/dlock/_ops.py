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

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from . import _core, _durable
from ._core import (
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
from .errors import AcquireTimeout, DlockError, NotHeld, WrongKind, map_error

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
    on a cluster, to any one node (the command has no key).

    A lock command (``lane``) goes on the client's own connections when it has them
    (:mod:`dlock._lanes`: no retries, bounded), else through the redis-py client.
    ``bound``: the call fails (``TimeoutError``) when it has not answered within that
    many seconds, connecting included (None: the transport's own timeouts). ``park``:
    the answer is ``(reply, handle)`` — for a grant on the client's own connections,
    that connection, set aside for the (BIND) hold (else None). ``fresh``: on a newly
    made connection. ``drain``: a command that queues nothing on the server (a renewal,
    a check, a release): a reply late for the bound is read in the background and the
    connection reused. ``own``: a call of the client's own that no caller waits for (a
    renewal, a check after a notice, a cancel) — a transport adapter may send it on a
    connection it made itself, with a longer reply timeout (GLIDE)."""

    __slots__ = ("target", "args", "any_node", "bound", "lane", "park", "fresh", "drain", "own")

    def __init__(self, target: Any, args: Sequence[Any], any_node: bool = False,
                 bound: Optional[float] = None, lane: bool = False, park: bool = False,
                 fresh: bool = False, drain: bool = False, own: bool = False) -> None:
        self.target = target
        self.args = tuple(args)
        self.any_node = any_node
        self.bound = bound
        self.lane = lane
        self.park = park
        self.fresh = fresh
        self.drain = drain
        self.own = own

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


def command(target: Any, *args: Any, own_errors: bool = True, **call: Any) -> Op[Any]:
    """One command; error replies become the package's exceptions. ``call``: the
    :class:`Call`'s ``bound``, ``lane``, ``park``, ``fresh``."""
    try:
        return (yield Call(target, args, **call))
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


#: What a connection that failed raises (redis-py's, GLIDE's as mapped, the OS's).
CONNECTION_ERRORS = (RedisConnectionError, RedisTimeoutError, OSError)
#: How long past a caller's deadline a call may still take: the reply to a last slice
#: that ends at the deadline (the contract keeps deadlines within 250 ms).
DEADLINE_GRACE = 0.1
#: First pause between tries when the server cannot be reached during a wait (doubles
#: up to 1 s, never past the deadline).
RETRY_PAUSE = 0.05
#: The bound of a call no caller waits for (a background DLOCK.CANCEL, a release on a
#: transport with no timeout of its own), in seconds.
BACKGROUND_BOUND = 5.0


def cancel(target: Any, key: KeyT, owner: str) -> Op[int]:
    """``DLOCK.CANCEL key owner``: gives up the owner's queue places (a fair-queue
    place, a wait blocked on the server), best effort — a module older than the
    command (unknown command; remembered on ``target``) or any other failure answers 0.
    Bounded (the transport's timeout, or :data:`BACKGROUND_BOUND`); it runs in the
    background (:meth:`ClientCore._give_up`), never inside a caller's deadline."""
    if getattr(target, "_no_cancel", False):
        return 0
    bound = getattr(target, "transport_timeout", None) or BACKGROUND_BOUND
    try:
        return int((yield Call(target, ("DLOCK.CANCEL", key, owner), lane=True, bound=bound,
                               drain=True, own=True)))
    except ResponseError as e:
        if "unknown command" in str(e).lower():
            target._no_cancel = True
        else:
            log.debug("dlock: DLOCK.CANCEL %r %r failed: %s", key, owner, e)
    except Exception as e:  # noqa: BLE001 - giving up must not fail on this
        log.debug("dlock: DLOCK.CANCEL %r %r failed: %s", key, owner, e)
    return 0


Attempt = Callable[[int, Optional[float]], Op[Optional[T]]]


def _min(a: Optional[float], b: Optional[float]) -> Optional[float]:
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)


def wait_loop(client: Any, timeout: Optional[float], attempt: Attempt[T],
              what: str = "the lock") -> Op[Optional[T]]:
    """Asks ``attempt(wait_ms, bound)`` until it answers (not None) or ``timeout`` (s)
    passes: each server-side wait at most the client's slice (which fits its transport's
    timeout), each call bounded by what is left of the deadline. When the server cannot
    be reached, a try (``timeout`` 0) and a wait without deadline raise the connection
    error at once; a wait with a deadline tries again (pauses from 50 ms to 1 s) until
    the deadline, then raises :class:`~dlock.AcquireTimeout` from the last error."""
    slice_ = client._slice()
    deadline = None if timeout is None else (yield NOW) + max(0.0, timeout)
    pause = RETRY_PAUSE
    while True:
        now = yield NOW
        left = None if deadline is None else max(0.0, deadline - now)
        wait = slice_ if left is None else min(left, slice_)
        try:
            # A try (no wait) is bounded by the transport only: its deadline is about
            # waiting for the lock, not about how fast the server answers.
            bound = client._bound(wait, left if timeout else None)
            got = yield from attempt(int(wait * 1000), bound)
        except CONNECTION_ERRORS as e:
            if deadline is None or not timeout:
                raise
            now = yield NOW
            if now >= deadline:
                raise AcquireTimeout(
                    f"could not acquire {what} within {timeout} s: the server could not be "
                    f"reached ({e})"
                ) from e
            yield Sleep(min(pause, deadline - now))
            pause = min(pause * 2, 1.0)
            continue
        pause = RETRY_PAUSE
        if got is not None:
            return got
        now = yield NOW
        if deadline is not None and now >= deadline:
            return None


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
        lock is now lost, else None. An answer after the lease clock ran out does not
        revive the hold."""
        self.inflight = False
        if self.stopped:
            return None
        if now >= self.plan.lost_at():
            self.stopped = True
            return LostReason.UNREACHABLE
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


class Notices(Protocol):
    """A client's listener on its locks' channels (one subscriber connection per client
    object): a flavour's thread or task that calls ``client._notice(key, kind)`` for
    each message (``kind``: its text) and for each (re)subscription (``kind`` None)."""

    def watch(self, key: KeyT) -> None: ...

    def unwatch(self, key: KeyT) -> None: ...


class NoNotices:
    """For a transport that cannot subscribe: holds fall back to their lease clock."""

    supported = False

    def watch(self, key: KeyT) -> None:
        pass

    def unwatch(self, key: KeyT) -> None:
        pass


class Flavour(Generic[S]):
    """What differs between the sync and the asyncio flavour, apart from the driver."""

    def __init__(
        self,
        *,
        signal: Callable[..., S],
        watchdog: Callable[
            [RenewOp, float, float, float, Callable[[LostReason], None], LostReason],
            WatchdogHandle,
        ],
        tag: Callable[[], Any],
        who: str,
        redis_module: str,
        lanes: Callable[[Any], Any],
        notices: Callable[[Any], Any],
        background: Callable[[Any, Op[Any]], None],
        spawn: Optional[Callable[[Any], Any]] = None,
    ) -> None:
        #: A new lost signal: ``signal(deadline, reason)`` (the lease clock's end and
        #: the reason it reports then; None: none yet).
        self.signal = signal
        #: Starts a watchdog: ``(renew, lease, interval, confirmed, on_lost, reason)``.
        self.watchdog = watchdog
        #: The calling thread's (task's) part of owner ids.
        self.tag = tag
        #: "thread" or "task", for messages.
        self.who = who
        #: The redis-py module of this flavour (``redis`` or ``redis.asyncio``).
        self.redis_module = redis_module
        #: The client's own connections for lock commands (None: through the client).
        self.lanes = lanes
        #: The client's listener on its locks' channels (:class:`Notices`).
        self.notices = notices
        #: Runs an operation of the client in the background (a thread, a task that
        #: ``close()`` ends): giving a place up, checking holds after a notice.
        self.background = background
        #: Runs an awaitable returned by an ``on_lost`` callback (asyncio only).
        self.spawn = spawn


# ---------------------------------------------------------------------------
# Holds and the client


class Hold(Generic[S]):
    """One owner's hold of one lock (all its reentrant grants)."""

    __slots__ = ("kind", "key", "raw", "owner", "token", "depth", "lost", "watchdog",
                 "lease", "sent", "conn", "releasing", "watching")

    def __init__(self, kind: Kind, key: KeyT, owner: str, token: int, lost: S) -> None:
        self.kind = kind
        self.key = key
        self.raw = _core.raw_key(key)
        self.owner = owner
        self.token = token
        self.depth = 0
        self.lost = lost
        self.watchdog: Optional[WatchdogHandle] = None
        self.lease: Optional[float] = None
        #: When the request that granted it was sent (a notice older than this is not
        #: about this hold).
        self.sent = 0.0
        #: The connection a BIND grant is bound to, set aside while the hold lives.
        self.conn: Any = None
        #: Its last release is on its way: a notice is not about a loss.
        self.releasing = False
        #: Counted in the client's subscriptions.
        self.watching = False

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
        #: How often the watchdog renews: a third of the watchdog lease unless given
        #: (and then below it).
        self.renew_interval = (
            self.watchdog_lease / 3.0
            if renew_interval is None
            else _core.check_renew_interval(renew_interval, self.watchdog_lease)
        )
        self.wait_slice = _core.check_lease(wait_slice, "wait_slice")
        self.prefix = owner_prefix or _core.new_prefix()
        self.on_lost = on_lost
        self._mu = threading.RLock()
        self._holds: Dict[HoldKey, Hold[S]] = {}
        self._cluster = is_cluster(redis, self._flavour.redis_module + ".cluster")
        #: Set once the server answered DLOCK.CANCEL with "unknown command".
        self._no_cancel = False
        #: The transport's own reply timeout (s; None: none): redis-py's
        #: ``socket_timeout``, the GLIDE adapter's waiting clients' request timeout.
        self.transport_timeout = _core.socket_timeout_of(redis)
        #: The reply timeout of the caller's own connection (GLIDE: the client passed
        #: in), for the calls a caller waits for that do not wait on the server.
        self.call_timeout = getattr(redis, "request_timeout", self.transport_timeout) \
            if getattr(redis, "dlock_adapter", None) else self.transport_timeout
        #: The client's own connections for lock commands (None: through ``redis``).
        self._lanes = None if self._cluster else self._flavour.lanes(redis)
        #: The listener on the channels of this client's locks.
        self._notices = self._flavour.notices(self)
        #: The last notice per key: (its text, when it arrived).
        self._last_notice: Dict[bytes, Tuple[str, float]] = {}
        #: Keys whose holds are being checked after a notice (True: check again).
        self._checking: Dict[bytes, bool] = {}
        self._closed = False

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
        """The longest server-side wait: the contract's slice for the transport's
        timeout (``min(wait_slice, T − max(100 ms, T / 5))``, at least 10 ms)."""
        return _core.slice_for_timeout(self.transport_timeout, self.wait_slice)

    def _bound(self, wait: float, left: Optional[float], own: bool = False) -> Optional[float]:
        """How long a call that waits ``wait`` s on the server may take: the
        transport's timeout (which the slice fits; for a call that does not wait and
        is not one of the client's ``own``, the timeout of the caller's connection —
        the same but for GLIDE, whose waits and own calls go on clients of the
        adapter's), and never more than what is left of the caller's deadline
        (``left``) plus the time for a last slice's reply."""
        t = self.transport_timeout if wait > 0 or own else self.call_timeout
        bound = None if t is None else max(t, wait + DEADLINE_GRACE)
        if left is not None:
            bound = _min(bound, left + DEADLINE_GRACE)
        return bound

    def _check_open(self) -> None:
        if self._closed:
            raise DlockError("this dlock client is closed: make a new one")

    def _op_acquire(
        self,
        kind: Kind,
        key: KeyT,
        owner: str,
        lease: Optional[float],
        timeout: Optional[float],
        mode: WaitMode,
        extra: Dict[str, Any],
    ) -> Op[Optional[Tuple[Any, ...]]]:
        """Asks until granted or ``timeout`` passes: ``(token, lease start, parked
        connection)`` or None."""
        self._check_open()
        lease_s = self.watchdog_lease if lease is None else float(lease)
        lms = _core.lease_ms(lease_s)
        durable = extra.pop("durable", None)
        attempt: Attempt[Tuple[Any, ...]] = functools.partial(
            self._op_attempt, kind, key, owner, lease_s, lms, extra
        )
        if durable is not None:
            attempt = functools.partial(
                _durable.op_attempt, self, kind, key, owner, lease_s, lms, extra, durable
            )
        what = f"{key!r}"
        try:
            if mode is WaitMode.NOTIFY and timeout != 0:
                got = yield from self._op_acquire_notified(kind, key, timeout, attempt, what)
            else:
                got = yield from wait_loop(self, timeout, attempt, what)
        except BaseException as e:
            # Cancelled, interrupted, out of time: no place may stay behind.
            if gave_up(e):
                self._give_up(key, owner)
            raise
        if got is None and kind is Kind.FAIR:
            # A fair try keeps its queued place between polls: give it up now, so the
            # next in line is served at once instead of after fair-queue-timeout-ms.
            self._give_up(key, owner)
        return got

    def _give_up(self, key: KeyT, owner: str) -> None:
        """``DLOCK.CANCEL key owner`` in the background: bounded, and never inside the
        caller's deadline."""
        if not self._no_cancel and not self._closed:
            self._flavour.background(self, cancel(self, key, owner))

    def _op_attempt(
        self, kind: Kind, key: KeyT, owner: str, lease_s: float, lms: int,
        extra: Dict[str, Any], wms: int, bound: Optional[float] = None,
    ) -> Op[Optional[Tuple[Any, ...]]]:
        """One acquire that waits at most ``wms`` on the server."""
        sent = yield NOW
        bind = bool(extra.get("bind"))
        args = _core.acquire_args(kind, key, owner, lms, wms, **extra)
        reply = yield from command(self, *args, lane=True, bound=bound, park=bind)
        handle = None
        if bind:
            reply, handle = reply
        try:
            token = _core.parse_token(reply)
            if token is None:
                return None
            start = yield from self._op_anchor(key, owner, lms, lease_s, sent)
        except BaseException:
            self._give_back(handle)
            raise
        if start is None:
            self._give_back(handle)
            return None
        return (token, start, handle)

    def _give_back(self, handle: Any) -> None:
        """A connection kept for a BIND hold comes back (the client's own connections,
        or a transport adapter's that keeps them: GLIDE)."""
        if handle is None:
            return
        if self._lanes is not None:
            self._lanes.give_back(handle)
        else:
            give_back = getattr(self.redis, "give_back", None)
            if give_back is not None:
                give_back(handle)

    def _op_anchor(self, key: KeyT, owner: str, lms: int, lease_s: float, sent: float) -> Op[Optional[float]]:
        """The instant the lease surely started: ``sent``, or after a long wait, a RENEW
        sent now (None when the lease had already lapsed)."""
        now: float = yield NOW
        if now - sent <= _core.lease_clock_slack(lease_s):
            return sent
        args = _core.renew_args(key, owner, lms)
        renewed = yield from command(self, *args, lane=True, bound=self._bound(0, None),
                                     drain=True)
        if _core.parse_renewed(renewed):
            return now
        return None

    def _op_acquire_notified(
        self,
        kind: Kind,
        key: KeyT,
        timeout: Optional[float],
        attempt: Attempt[Tuple[Any, ...]],
        what: str,
    ) -> Op[Optional[Tuple[Any, ...]]]:
        start = yield NOW
        deadline = None if timeout is None else start + max(0.0, timeout)

        def left() -> Op[Optional[float]]:
            return None if deadline is None else max(0.0, deadline - (yield NOW))

        got = yield from attempt(0, self._bound(0, (yield from left())))
        if got is not None:
            return got
        slice_ = self.wait_slice
        if kind is Kind.FAIR:  # a polling owner keeps its queued place only if it asks again
            slice_ = min(slice_, 1.0)
        yield Subscribe(self, _core.channel_for(key))
        pause = RETRY_PAUSE
        try:
            while True:
                # Subscribed first, then asked: a release in between is not missed.
                try:
                    got = yield from attempt(0, self._bound(0, (yield from left())))
                except CONNECTION_ERRORS as e:
                    rest = yield from left()
                    if rest is None:
                        raise
                    if rest <= 0:
                        raise AcquireTimeout(
                            f"could not acquire {what} within {timeout} s: the server could "
                            f"not be reached ({e})"
                        ) from e
                    yield Sleep(min(pause, rest))
                    pause = min(pause * 2, 1.0)
                    continue
                pause = RETRY_PAUSE
                if got is not None:
                    return got
                rest = yield from left()
                if rest is not None and rest <= 0:
                    return None
                yield NextMessage(max(0.001, slice_ if rest is None else min(rest, slice_)))
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
        conn: Any = None,
    ) -> Hold[S]:
        hk = hold_key(kind, key, owner)
        check = False
        with self._mu:
            hold = self._holds.get(hk)
            new = hold is None or hold.token != token or hold.lost.is_set()
            if new:
                # A new hold on the server (a reentrant grant keeps its token).
                if hold is not None:
                    self._retire(hold)
                sig = self._flavour.signal(None)
                sig._add_listener(
                    functools.partial(run_callbacks, (on_lost, self.on_lost), key, self._flavour.spawn)
                )
                hold = Hold(kind, key, owner, token, sig)
                hold.sent = start
                self._holds[hk] = hold
                hold.watching = True
                self._notices.watch(key)
                # A notice that arrived since the request was sent may be about this
                # very hold (a FORCERELEASE right after the grant): check it.
                seen = self._last_notice.get(hold.raw)
                check = seen is not None and seen[1] >= start
            hold.depth += amount
            if conn is not None:
                if hold.conn is None:
                    hold.conn = conn
                else:
                    self._give_back(conn)
            if lease is None:
                wl = self.watchdog_lease
                until = start + wl - _core.lost_margin(wl)
                if hold.watchdog is None:
                    hold.lease = None
                    hold.lost._set_deadline(until, LostReason.UNREACHABLE)
                    hold.watchdog = self._start_watchdog(hold, start, on_lost)
                else:
                    hold.lost._extend(until)
            elif hold.watchdog is None:
                self._arm_deadline(hold, start, lease, on_lost)
        if check:
            self._notice(key, None)
        return hold

    def _arm_deadline(self, hold: Hold[S], start: float, lease: float, on_lost: Optional[OnLost]) -> None:
        """An explicit lease started at ``start``: the hold counts as lost (expired) at
        its end, less the margin."""
        hold.lease = lease
        hold.lost._set_deadline(start + lease - _core.lost_margin(lease), LostReason.EXPIRED)

    def _start_watchdog(self, hold: Hold[S], start: float, on_lost: Optional[OnLost]) -> WatchdogHandle:
        lease = self.watchdog_lease
        margin = _core.lost_margin(lease)
        args = _core.renew_args(hold.key, hold.owner, _core.lease_ms(lease))

        def renew(timeout: float) -> Op[Renewal]:
            sent = yield NOW
            try:
                v = yield from command(self, *args, lane=True, drain=True, own=True,
                                       bound=_min(timeout, self.transport_timeout))
            except Exception:
                return Renewal.FAILED
            answer = _core.parse_renewed(v)
            if answer is None:
                return Renewal.FAILED
            if not answer:
                return Renewal.LOST
            if not hold.lost._extend(sent + lease - margin):
                return Renewal.FAILED  # the clock ran out first: stays lost
            return Renewal.RENEWED

        return self._flavour.watchdog(
            renew,
            lease,
            self.renew_interval,
            start,
            lambda reason: self._lost(hold, reason, on_lost),
            LostReason.NOT_HELD,
        )

    def _lost(self, hold: Hold[S], reason: LostReason, on_lost: Optional[OnLost] = None) -> None:
        """The hold is gone: no more renewals, its signal set (its listener runs the
        callbacks). "Not held" takes the reason of a notice about it, if one came."""
        if reason is LostReason.NOT_HELD:
            reason = self._notice_reason(hold)
        with self._mu:
            hold.stop()
            conn, hold.conn = hold.conn, None
            self._unwatch(hold)
        self._give_back(conn)
        hold.lost._mark(reason)

    def _retire(self, hold: Hold[S]) -> None:
        """A hold that is over for this client (released, replaced): no renewals, its
        BIND connection back, no more notices for it (caller holds ``_mu``)."""
        hold.stop()
        conn, hold.conn = hold.conn, None
        self._give_back(conn)
        self._unwatch(hold)

    def _unwatch(self, hold: Hold[S]) -> None:
        if hold.watching:
            hold.watching = False
            self._notices.unwatch(hold.key)

    def _hold(self, kind: Kind, key: KeyT, owner: str) -> Optional[Hold[S]]:
        with self._mu:
            return self._holds.get(hold_key(kind, key, owner))

    # -- notices (prompt notice of a server-side end) -------------------------------

    def _notice(self, key: KeyT, kind: Optional[str]) -> None:
        """From the listener: a message (``kind``: ``released``, ``expired``,
        ``deleted``, ``disconnected``) on ``key``'s channel, or (None) a
        (re)subscription to it — something may have ended a hold on ``key``. Each
        hold this client has there is checked at once (``DLOCK.CHECK``), in the
        background, one check per key at a time."""
        raw = _core.raw_key(key)
        with self._mu:
            if kind is not None:
                if len(self._last_notice) > 4096:
                    self._prune_notices()
                self._last_notice[raw] = (kind, time.monotonic())
            if raw in self._checking:
                self._checking[raw] = True
                return
            if self._closed or not any(h.raw == raw for h in self._holds.values()):
                return
            self._checking[raw] = False
        self._flavour.background(self, self._op_check_key(raw))

    def _parked(self) -> List[Tuple[Hold[S], Any]]:
        """The BIND holds whose connection (one of the client's own) is set aside for
        them, with it."""
        if self._lanes is None:
            return []
        with self._mu:
            return [(h, h.conn) for h in self._holds.values()
                    if h.conn is not None and not h.releasing and not h.lost.is_set()]

    def _bound_closed(self, hold: Hold[S], conn: Any) -> None:
        """From the listener: the connection a BIND hold is bound to was closed by the
        server (CLIENT KILL, a restart) — a notice for that hold: it is checked at once.
        The connection goes back (to reconnect on its next use), so it is reported once."""
        with self._mu:
            if hold.conn is not conn:
                return
            hold.conn = None
        self._give_back(conn)
        self._notice(hold.key, "disconnected")

    def _prune_notices(self) -> None:
        old = time.monotonic() - 60.0
        held = {h.raw for h in self._holds.values()}
        for k in [k for k, (_, t) in self._last_notice.items() if t < old and k not in held]:
            del self._last_notice[k]

    def _notice_reason(self, hold: Hold[S]) -> LostReason:
        """The reason a notice gave for ``hold``'s end: the last notice on its key since
        its grant was asked for, else ``not_held``."""
        seen = self._last_notice.get(hold.raw)
        if seen is not None and seen[1] >= hold.sent:
            return _core.NOTICE_REASONS.get(seen[0], LostReason.NOT_HELD)
        return LostReason.NOT_HELD

    def _op_check_key(self, raw: bytes) -> Op[None]:
        try:
            while True:
                with self._mu:
                    self._checking[raw] = False
                    holds = [h for h in self._holds.values()
                             if h.raw == raw and not h.releasing and not h.lost.is_set()]
                by_token: Dict[int, List[Hold[S]]] = {}
                for h in holds:
                    by_token.setdefault(h.token, []).append(h)
                for token, hs in by_token.items():
                    now = yield NOW
                    ends = [h.lost.deadline for h in hs if h.lost.deadline is not None]
                    bound = self._bound(0, None, own=True)
                    if ends:  # past its lease clock the clock decides
                        bound = _min(bound, max(0.0, min(ends) - now))
                        if bound <= 0:
                            continue
                    try:
                        live = yield from command(self, "DLOCK.CHECK", hs[0].key, token,
                                                  lane=True, bound=bound, drain=True, own=True)
                    except Exception as e:  # noqa: BLE001 - the lease clock still decides
                        log.debug("dlock: DLOCK.CHECK after a notice failed: %s", e)
                        continue
                    if live == 0:
                        for h in hs:
                            if not h.releasing:
                                self._lost(h, LostReason.NOT_HELD)
                with self._mu:
                    if not self._checking.get(raw):
                        self._checking.pop(raw, None)
                        return
        except BaseException:
            with self._mu:
                self._checking.pop(raw, None)
            raise

    # -- releasing --------------------------------------------------------------

    def _release_bound(self) -> float:
        return self.call_timeout or BACKGROUND_BOUND

    def _op_release(
        self, kind: Kind, key: KeyT, owner: str, amount: int, on_lost: Optional[OnLost],
        permits: Optional[int],
    ) -> Op[Tuple[Release, Optional[BaseException]]]:
        """Gives ``amount`` back: the outcome, and for ``Unknown`` the error. A RELEASE
        that fails on its connection is sent once more, on a fresh one; either way, a
        last release ends the hold for this client (never renewed again)."""
        hk = hold_key(kind, key, owner)
        with self._mu:
            hold = self._holds.get(hk)
            final = hold is None or hold.depth <= amount
            if hold is not None and final:
                hold.stop()  # no renewal may race the last release
                hold.releasing = True
        args = _core.release_args(kind, key, owner, permits)
        error: Optional[BaseException] = None
        outcome = Release.UNKNOWN
        try:
            for fresh in (False, True):
                try:
                    reply = yield from command(self, *args, lane=True, drain=True,
                                               bound=self._release_bound(), fresh=fresh)
                    outcome = _core.parse_release(reply)
                    error = None
                    break
                except (NotHeld, WrongKind):  # WRONGTYPE too: no hold of ours is there
                    if hold is None:
                        raise
                    if isinstance(error, RedisTimeoutError):
                        # The first RELEASE went out and its answer did not come: it
                        # may be what ended the hold. Nobody can say: unknown.
                        break
                    outcome, error = Release.LOST, None
                    break
                except CONNECTION_ERRORS as e:
                    error = e
        except BaseException:
            if hold is not None and final:
                with self._mu:
                    hold.releasing = False
                    if self._holds.get(hk) is hold:
                        del self._holds[hk]
                    self._retire(hold)
            raise
        lost_now = False
        with self._mu:
            if hold is not None:
                if outcome is Release.STILL_HELD:
                    hold.depth -= amount
                    if hold.depth <= 0:  # the server counts more than this client
                        hold.stop()
                if outcome is not Release.STILL_HELD or hold.depth <= 0:
                    hold.depth = 0
                    if self._holds.get(hk) is hold:
                        del self._holds[hk]
                    self._retire(hold)
                if outcome in (Release.RELEASED, Release.UNKNOWN):
                    # The server's answer, even when the lease clock fired already: it
                    # is early by its margin, and a RELEASE that still found the hold
                    # took it from nobody. Released in time: never reported lost.
                    hold.lost._set_deadline(None)
                lost_now = outcome is Release.LOST and not hold.lost.is_set()
                hold.releasing = False
        if lost_now and hold is not None:
            hold.lost._mark(self._notice_reason(hold))
        if outcome is Release.UNKNOWN:
            log.warning("dlock: RELEASE of %r failed twice (%s); the hold is not renewed "
                        "and ends with its lease at the latest", key, error)
        return outcome, (error if outcome is Release.UNKNOWN else None)

    # -- closing ------------------------------------------------------------------

    def _close_holds(self) -> bool:
        """Marks the client closed; every hold it still has stops being renewed and
        is reported lost now (``unreachable``: nothing renews it any more; its lease
        ends on the server). False when it was closed already."""
        with self._mu:
            if self._closed:
                return False
            self._closed = True
            holds = list(self._holds.values())
            for h in holds:
                self._retire(h)
        for h in holds:
            if not h.releasing:
                h.lost._mark(LostReason.UNREACHABLE)
        return True


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


#: Keywords of other Python lock libraries, and what dlock calls them (issue 45): a
#: lock made with one of them gets a ``TypeError`` that says so.
FOREIGN_KEYWORDS = {
    "expire": "python-redis-lock's expire= (seconds the lock lasts) is lease= here "
              "(leave it out for a lock the watchdog renews until release)",
    "auto_renewal": "python-redis-lock's auto_renewal=True is what dlock does by itself: "
                    "leave lease= out and the watchdog renews the lock until release",
    "id": "python-redis-lock's id= is owner= here (a fixed owner id, e.g. to release "
          "from another process)",
    "strict": "python-redis-lock's strict= has no use here: names and owners may be str "
              "or bytes",
    "signal_expire": "python-redis-lock's signal_expire= has no use here: the server wakes "
                     "its waiters itself",
    "auto_release_time": "pottery's auto_release_time= (seconds the lock lasts) is lease= "
                         "here (leave it out for a lock the watchdog renews)",
    "num_extensions": "pottery's num_extensions= has no use here: the watchdog renews "
                      "without limit while lease= is left out",
    "context_manager_blocking": "pottery's context_manager_blocking= is blocking= here",
    "context_manager_timeout": "pottery's context_manager_timeout= is blocking_timeout= "
                               "here (the wait of acquire() and `with`)",
    "raise_on_redis_errors": "pottery's raise_on_redis_errors= has no use here: errors "
                             "are always raised",
    "key": "pottery's key= is the lock's name here: RedLock(nodes, name), "
           "client.lock(name)",
    "masters": "pottery's masters= are RedLock's nodes here: RedLock(nodes, name)",
    "raise_on_release_error": "redis-py's raise_on_release_error= has no use here: "
                              "release() answers Released, StillHeld, Lost or Unknown",
    "lock_class": "redis-py's lock_class= has no use here: client.lock(), fair_lock(), "
                  "rwlock() and semaphore() make dlock's locks",
}


def refuse_keywords(where: str, unknown: Dict[str, Any]) -> None:
    """A ``TypeError`` for keywords ``where`` does not take, naming the dlock keyword
    for those of another lock library."""
    if not unknown:
        return
    notes = [
        f"{k}=: {FOREIGN_KEYWORDS[k]}" if k in FOREIGN_KEYWORDS else f"{k}=: not a dlock keyword"
        for k in unknown
    ]
    names = ", ".join(repr(k) for k in unknown)
    raise TypeError(f"{where}() got unexpected keyword argument(s) {names} — " + "; ".join(notes))


def _invalid(argument: str, message: str) -> Exception:
    from .errors import invalid

    return invalid(argument, message)


def _permits(permits: Any) -> int:
    if isinstance(permits, bool) or not isinstance(permits, int) or permits < 1:
        raise _invalid("permits", f"permits must be a whole number >= 1, got {permits!r}")
    return permits


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
        **unknown: Any,
    ) -> None:
        if timeout is not UNSET:
            raise TypeError(AMBIGUOUS_TIMEOUT)
        refuse_keywords(type(self).__name__, unknown)
        if sleep is not None and not (float(sleep) >= 0):
            raise ValueError(f"sleep must be a number of seconds >= 0, got {sleep!r}")
        name = _core.check_name(name)
        blocking_timeout = _core.check_wait(blocking_timeout, "blocking_timeout")
        self.client = client
        self.name = name
        #: The error of the last release that answered ``Unknown`` (None otherwise).
        self.release_error: Optional[BaseException] = None
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
        if owner is not None and not (isinstance(owner, str) and owner):
            raise _invalid("owner", f"owner must be a non-empty str, got {owner!r}")
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
        timeout = self.timeout if timeout is UNSET else _core.check_wait(timeout)
        lease = self.lease if lease is UNSET else (None if lease is None else _core.check_lease(lease))
        if not (self.blocking if blocking is None else blocking):
            timeout = 0
        owner = self._owner_id()
        got = yield from self.client._op_acquire(
            self._kind, self.name, owner, lease, timeout, self.wait_mode, extra
        )
        if got is None:
            return False
        hold = self.client._granted(
            self._kind, self.name, owner, got[0], got[1], lease, amount, self.on_lost,
            got[2] if len(got) > 2 else None,
        )
        self._lost_by_owner[owner] = hold.lost
        return True

    def _op_release(self, permits: Optional[int] = None) -> Op[Release]:
        outcome, self.release_error = yield from self.client._op_release(
            self._kind, self.name, self._owner_id(), 1, self.on_lost, None
        )
        return outcome

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
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise _invalid("limit", f"limit must be a whole number of permits >= 1, got {limit!r}")
        self.limit = int(limit)
        self.permits = _permits(permits)

    def _amount(self, permits: Optional[int]) -> int:
        return self.permits if permits is None else _permits(permits)

    def _extra(self, bind: Optional[bool], lock_delay: Optional[float], amount: int) -> Dict[str, Any]:
        extra = super()._extra(bind, lock_delay, amount)
        extra.update(limit=self.limit, permits=amount)
        return extra

    def _op_release(self, permits: Optional[int] = None) -> Op[Release]:
        k = self._amount(permits)
        outcome, self.release_error = yield from self.client._op_release(
            self._kind, self.name, self._owner_id(), k, self.on_lost, k
        )
        return outcome

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
        self.name = _core.check_name(name)

    def _op_try_set_count(self, count: int) -> Op[bool]:
        return bool((yield from command(self.client, "DLOCK.LATCHSET", self.name, int(count))))

    def _op_count_down(self) -> Op[int]:
        return int((yield from command(self.client, "DLOCK.COUNTDOWN", self.name)))

    def _op_count(self) -> Op[int]:
        info = yield from self.client._op_info(self.name)
        return 0 if info is None else int(info.get("count", 0))

    def _op_wait(self, timeout: Optional[float]) -> Op[bool]:
        timeout = _core.check_wait(timeout)

        def attempt(wms: int, bound: Optional[float]) -> Op[Optional[bool]]:
            args = ("DLOCK.AWAIT", self.name, "WAIT", wms)
            opened = (yield from command(self.client, *args, lane=True, bound=bound)) == 1
            return True if opened else None

        what = f"the latch {self.name!r} open"
        return bool((yield from wait_loop(self.client, timeout, attempt, what)))


# ---------------------------------------------------------------------------
# MultiLock

L = TypeVar("L", bound="LockCore[Any, Any]")


class MultiLockCore(Generic[L, S]):
    def __init__(
        self, locks: Iterable[L], *, timeout: Optional[float] = None, lease: Optional[float] = None
    ) -> None:
        items = list(locks)
        if not items:
            raise _invalid("locks", "a MultiLock needs at least one lock")
        items.sort(
            key=lambda l: _core.server_sort_key(_core.server_address(l.client.redis), l.name, l.kind)
        )
        self.locks: List[L] = items
        self.timeout = _core.check_wait(timeout)
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
        timeout = self.timeout if timeout is UNSET else _core.check_wait(timeout)
        lease = self.lease if lease is UNSET else (None if lease is None else _core.check_lease(lease))
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
        for l in self.locks:  # each part's lease clock and notices mark the whole
            l.lost._add_listener(combined._mark)
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
        nodes: Optional[Sequence[Any]] = None,
        name: Optional[KeyT] = None,
        *,
        node_timeout: float = 0.1,
        retry_delay: float = 0.2,
        watchdog_lease: float = DEFAULT_WATCHDOG_LEASE,
        renew_interval: Optional[float] = None,
        timeout: Optional[float] = None,
        lease: Optional[float] = None,
        owner: Optional[str] = None,
        on_lost: Optional[OnLost] = None,
        **unknown: Any,
    ) -> None:
        refuse_keywords("RedLock", unknown)
        if not nodes:
            raise _invalid("nodes", "a RedLock needs at least one server")
        self.name = _core.check_name(name)
        self.watchdog_lease = _core.check_lease(watchdog_lease, "watchdog_lease")
        self.renew_interval = (
            self.watchdog_lease / 3.0
            if renew_interval is None
            else _core.check_renew_interval(renew_interval, self.watchdog_lease)
        )
        self.timeout = _core.check_wait(timeout)
        self.lease = None if lease is None else _core.check_lease(lease)
        ct = self._client_type
        self.nodes: List[C] = [n if isinstance(n, ct) else ct(n) for n in nodes]
        self.node_timeout = max(node_timeout, 0.001)
        self.retry_delay = retry_delay
        self._owner = owner
        self.prefix = _core.new_prefix()
        self.on_lost = on_lost
        #: The first error of the last release that answered ``Unknown``.
        self.release_error: Optional[BaseException] = None
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
        timeout = self.timeout if timeout is UNSET else _core.check_wait(timeout)
        lease = self.lease if lease is UNSET else (None if lease is None else _core.check_lease(lease))
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
        lost = fl.signal(until, LostReason.EXPIRED if lease is not None else LostReason.UNREACHABLE)
        lost._add_listener(functools.partial(run_callbacks, (self.on_lost,), self.name, fl.spawn))
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
                    until = sent + wl - _core.lost_margin(wl)
                    if not hold.lost._extend(until):
                        return Renewal.FAILED  # the clock ran out first: stays lost
                    hold.valid_until = until
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
        self.release_error = None
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
                    hold.lost._set_deadline(None)  # the servers' answer, whatever the clock said
                return want
        answered = sum(1 for o in outcomes if isinstance(o, Release))
        if answered < self.quorum:
            # Not renewed any more; it ends with its lease at the latest.
            self.release_error = next(o for o in outcomes if isinstance(o, BaseException))
            hold.lost._set_deadline(None)
            return Release.UNKNOWN
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
