"""What the sync and the asyncio flavours share: commands, replies, owner ids,
the watchdog's schedule and the RedLock arithmetic. No I/O here."""

from __future__ import annotations

import enum
import importlib
import inspect
import itertools
import math
import random
import threading
import uuid
import weakref
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

KeyT = Union[str, bytes]

#: Lease of a lock taken without an explicit lease; the watchdog renews it.
DEFAULT_WATCHDOG_LEASE = 30.0
#: How often the watchdog renews (a third of the lease).
DEFAULT_RENEW_INTERVAL = 10.0
#: The longest single server-side ``WAIT`` (longer waits are split into slices): the
#: contract's default slice, under the time after which Valkey GLIDE warns about a slow
#: reply on the waiting clients the GLIDE adapter makes (half their request timeout).
DEFAULT_WAIT_SLICE = 4.0


class Release(enum.Enum):
    """What :meth:`release` found on the server."""

    #: This hold is gone; the owner holds the lock no more (``DLOCK.RELEASE`` answered 1).
    RELEASED = "released"
    #: The owner still holds the lock: it was taken more than once (reentrant) and an
    #: outer hold remains (``DLOCK.RELEASE`` answered 0).
    STILL_HELD = "still_held"
    #: The owner did not hold the lock any more: its lease ended or it was
    #: force-released (``NOTHELD``).
    #: Whatever it protected may have been changed by another holder meanwhile.
    LOST = "lost"
    #: The release did not get through: it failed on its connection and once more on a
    #: fresh one. The hold is not renewed any more and ends with its lease at the
    #: latest; the error is the lock's ``release_error``.
    UNKNOWN = "unknown"


Released = Release.RELEASED
StillHeld = Release.STILL_HELD
Lost = Release.LOST
Unknown = Release.UNKNOWN


class LostReason(enum.Enum):
    """Why a hold reports itself lost (the contract's loss reasons)."""

    #: The server ended it while this client held it: ``DLOCK.FORCERELEASE``, or the
    #: same owner released it elsewhere (a ``released`` notice, then ``DLOCK.CHECK``).
    FORCED = "forced"
    #: Its lease ended: an explicit lease ran out (no watchdog), or the server's
    #: ``expired`` notice.
    EXPIRED = "expired"
    #: Its key was deleted (``DEL``, ``FLUSHDB``, eviction: a ``deleted`` notice).
    DELETED = "deleted"
    #: Its ``BIND`` connection closed (a ``disconnected`` notice).
    DISCONNECTED = "disconnected"
    #: No renewal was acknowledged before the lease could end on the server (the lease
    #: clock: the last acknowledged grant or renewal's send time + lease − margin).
    UNREACHABLE = "unreachable"
    #: The server said it was gone (a renewal answered 0, a release ``NOTHELD``) and
    #: no notice said why.
    NOT_HELD = "not_held"
    #: RedLock: renewals no longer reach a majority of the servers.
    NO_QUORUM = "no_quorum"
    #: The old name of :attr:`EXPIRED` (deprecated; the same member).
    LEASE_ENDED = "expired"


#: The notice (a message on the lock's channel) that tells why a hold ended.
NOTICE_REASONS = {
    "released": LostReason.FORCED,
    "expired": LostReason.EXPIRED,
    "deleted": LostReason.DELETED,
    "disconnected": LostReason.DISCONNECTED,
}


class WaitMode(enum.Enum):
    """How a busy lock is waited for."""

    #: ``WAIT ms`` on the server, in bounded slices: FIFO among waiters, one grant per
    #: release, no polling. Holds one pooled connection per waiter while it waits.
    SERVER = "server"
    #: Subscribe to the lock's channel and ask again (``WAIT 0``) on every notice and at
    #: least once per slice. Blocks no connection on the server (for proxies and pools
    #: that must not hold a blocked connection) but is not FIFO.
    NOTIFY = "notify"


class Kind(enum.Enum):
    MUTEX = "mutex"
    READ = "read"
    WRITE = "write"
    FAIR = "fair"
    SEMAPHORE = "semaphore"

    @property
    def command(self) -> str:
        return {
            Kind.MUTEX: "DLOCK.ACQUIRE",
            Kind.READ: "DLOCK.RWACQUIRE",
            Kind.WRITE: "DLOCK.RWACQUIRE",
            Kind.FAIR: "DLOCK.FAIRACQUIRE",
            Kind.SEMAPHORE: "DLOCK.SEMACQUIRE",
        }[self]


#: The longest lease the module takes (ms): 2^40 ms, about 34.8 years.
MAX_MS = 1 << 40


def ceil_ms(seconds: float) -> int:
    """Whole milliseconds of ``seconds``, rounded up."""
    return int(math.ceil(seconds * 1000.0 - 1e-9))


def _number(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        try:
            import decimal
            import fractions

            if not isinstance(v, (decimal.Decimal, fractions.Fraction)):
                return math.nan
        except ImportError:  # pragma: no cover
            return math.nan
    try:
        return float(v)
    except (TypeError, ValueError, OverflowError):
        return math.nan


def check_lease(seconds: Any, what: str = "lease") -> float:
    """``seconds`` as a float when it is a usable lease (1 ms .. 2^40 ms);
    :class:`~dlock.InvalidArgument` naming ``what`` otherwise (a zero or negative lease
    would end before anyone could use the lock), before anything is sent."""
    from .errors import invalid

    v = _number(seconds)
    if not (v > 0) or math.isinf(v):
        raise invalid(
            what,
            f"{what} must be a positive number of seconds, got {seconds!r} (a zero lease "
            "would end at once; for a lock renewed until release, leave the lease out)",
        )
    if ceil_ms(v) > MAX_MS:
        raise invalid(
            what,
            f"{what} must be at most 2^40 ms (about 34.8 years), got {seconds!r} s: the "
            "module refuses longer leases; for a lock renewed until release, leave the "
            "lease out",
        )
    return v


def check_renew_interval(interval: Any, lease: float, what: str = "renew_interval") -> float:
    """The watchdog's renew interval: a positive number of seconds below ``lease``
    (an interval not below the lease could not renew before the lease ends)."""
    from .errors import invalid

    v = _number(interval)
    if not (v > 0) or math.isinf(v):
        raise invalid(what, f"{what} must be a positive number of seconds, got {interval!r}")
    if v >= lease:
        raise invalid(
            what,
            f"{what} ({interval!r} s) must be below the watchdog lease ({lease!r} s): "
            "the lease would end before the renewal; leave it out for a third of the lease",
        )
    return v


def check_name(name: Any, what: str = "name") -> Any:
    """A lock key: a non-empty str or bytes; :class:`~dlock.InvalidArgument` otherwise."""
    from .errors import invalid

    if isinstance(name, (bytes, bytearray, memoryview)):
        if len(name) == 0:
            raise invalid(what, f"{what} (the lock's key) must not be empty")
        return bytes(name) if not isinstance(name, bytes) else name
    if isinstance(name, str):
        if not name:
            raise invalid(what, f"{what} (the lock's key) must not be empty")
        return name
    raise invalid(what, f"{what} (the lock's key) must be a str or bytes, got {name!r}")


def check_wait(timeout: Any, what: str = "timeout") -> Optional[float]:
    """A wait: None (as long as it takes) or a number of seconds >= 0 (``inf``: as long
    as it takes); :class:`~dlock.InvalidArgument` otherwise."""
    from .errors import invalid

    if timeout is None:
        return None
    v = _number(timeout)
    if math.isnan(v) or v < 0:
        raise invalid(
            what,
            f"{what} must be a number of seconds >= 0 (0: one try) or None (as long as it "
            f"takes), got {timeout!r}",
        )
    return None if math.isinf(v) else v


def lease_ms(seconds: float) -> int:
    return max(ceil_ms(check_lease(seconds)), 1)


def lost_margin(lease: float) -> float:
    """The contract's margin of the lease clock: 1 % of the lease for clock rate drift
    plus 50 ms for how late a timer may fire under load, at most half the lease."""
    return min(lease / 2.0, lease / 100.0 + 0.050)


#: The old name of :func:`lost_margin` (RedLock's "drift").
drift = lost_margin


def lease_clock_slack(lease: float) -> float:
    """A grant that took longer than this to arrive is re-anchored with a RENEW, so the
    lost-lock clock (which starts when the request was sent) keeps most of the lease."""
    return lease / 4.0


def raw_key(key: KeyT) -> bytes:
    """``key`` as bytes (how holds and channels are compared)."""
    return key.encode() if isinstance(key, str) else bytes(key)


def has_hash_tag(key: bytes) -> bool:
    open_ = key.find(b"{")
    if open_ < 0:
        return False
    close = key.find(b"}", open_ + 1)
    return close > open_ + 1


def channel_for(key: KeyT) -> KeyT:
    """The channel on which the module publishes ``released``, ``expired``, ``deleted``
    and ``disconnected`` for ``key``: ``dlock:`` + key when the key has a Redis Cluster
    hash tag, else ``dlock:{`` + key + ``}``.

    >>> channel_for("orders")
    'dlock:{orders}'
    >>> channel_for("{user1}:lock")
    'dlock:{user1}:lock'
    """
    raw = key.encode() if isinstance(key, str) else bytes(key)
    ch = b"dlock:" + raw if has_hash_tag(raw) else b"dlock:{" + raw + b"}"
    return ch.decode() if isinstance(key, str) else ch


# ---------------------------------------------------------------------------
# Owner ids

_thread_tags = itertools.count(1)
_thread_local = threading.local()
_task_tags: "weakref.WeakKeyDictionary[Any, int]" = weakref.WeakKeyDictionary()
_task_tags_lock = threading.Lock()


def thread_tag() -> int:
    """A small number unique to the calling thread within this process (never reused,
    unlike ``threading.get_ident()``)."""
    tag = getattr(_thread_local, "tag", None)
    if tag is None:
        tag = next(_thread_tags)
        _thread_local.tag = tag
    return tag


def task_tag() -> str:
    """``t<thread>.<n>``: unique to the running asyncio task (``<thread>`` outside a task)."""
    import asyncio

    try:
        task = asyncio.current_task()
    except RuntimeError:
        task = None
    if task is None:
        return str(thread_tag())
    with _task_tags_lock:
        tag = _task_tags.get(task)
        if tag is None:
            tag = next(_thread_tags)
            _task_tags[task] = tag
    return f"task{tag}"


def new_prefix() -> str:
    return str(uuid.uuid4())


# ---------------------------------------------------------------------------
# Commands


def acquire_args(
    kind: Kind,
    key: KeyT,
    owner: str,
    lease: int,
    wait: int,
    *,
    limit: Optional[int] = None,
    permits: Optional[int] = None,
    bind: bool = False,
    lock_delay: Optional[int] = None,
) -> List[Any]:
    args: List[Any] = [kind.command, key, owner]
    if kind is Kind.READ:
        args.append("READ")
    elif kind is Kind.WRITE:
        args.append("WRITE")
    elif kind is Kind.SEMAPHORE:
        args += ["LIMIT", int(limit or 0)]
        if permits is not None and permits != 1:
            args += ["PERMITS", int(permits)]
    args += ["PX", max(1, lease), "WAIT", max(0, wait)]
    if bind:
        args.append("BIND")
    if lock_delay:
        args += ["LOCKDELAY", int(lock_delay)]
    return args


def release_args(kind: Kind, key: KeyT, owner: str, permits: Optional[int] = None) -> List[Any]:
    args: List[Any] = ["DLOCK.RELEASE", key, owner]
    if kind is Kind.READ:
        args.append("READ")
    elif kind is Kind.WRITE:
        args.append("WRITE")
    elif kind is Kind.SEMAPHORE and permits is not None and permits != 1:
        args += ["PERMITS", int(permits)]
    return args


def renew_args(key: KeyT, owner: str, lease: int) -> List[Any]:
    return ["DLOCK.RENEW", key, owner, "PX", max(1, lease)]


def parse_token(v: Any) -> Optional[int]:
    if v is None:
        return None
    if isinstance(v, int) and not isinstance(v, bool) and v > 0:
        return v
    from .errors import UnexpectedReply

    raise UnexpectedReply(f"acquire answered {v!r}, expected a fencing token or nil")


def parse_release(v: Any) -> Release:
    if v == 1:
        return Release.RELEASED
    if v == 0:
        return Release.STILL_HELD
    from .errors import UnexpectedReply

    raise UnexpectedReply(f"DLOCK.RELEASE answered {v!r}, expected 1 or 0")


def parse_renewed(v: Any) -> Optional[bool]:
    if v == 1:
        return True
    if v == 0:
        return False
    return None


def _text(v: Any) -> Any:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else v


def parse_info(v: Any) -> Optional[Dict[str, Any]]:
    """``DLOCK.INFO`` as a dict with str keys (RESP2 flat arrays or RESP3 maps);
    ``holders`` and ``waiters`` as lists of dicts. Owners stay as sent (bytes when the
    client does not decode)."""

    def to_dict(x: Any) -> Dict[str, Any]:
        if isinstance(x, dict):
            items = list(x.items())
        else:
            items = [(x[i], x[i + 1]) for i in range(0, len(x) - 1, 2)]
        out: Dict[str, Any] = {}
        for k, val in items:
            k = _text(k)
            if k in ("holders", "waiters", "delayed") and isinstance(val, (list, tuple)):
                val = [to_dict(e) if isinstance(e, (list, tuple, dict)) else e for e in val]
            elif k in ("kind", "mode", "state"):
                val = _text(val)
            out[k] = val
        return out

    if v is None:
        return None
    return to_dict(v)


def remaining_of(info: Optional[Dict[str, Any]], owner: str) -> Optional[float]:
    """Seconds left of ``owner``'s hold in a parsed ``DLOCK.INFO`` (None: not a holder)."""
    for h in (info or {}).get("holders") or []:
        if isinstance(h, dict) and _text(h.get("owner")) == owner:
            ttl = h.get("ttl")
            return None if ttl is None else max(0.0, int(ttl) / 1000.0)
    return None


def parse_stats(v: Any) -> Dict[str, Dict[str, List[Tuple[int, int]]]]:
    """``DLOCK.STATS`` as ``{kind: {"waits": [(upper_bound_us, count), ...],
    "holds": [...]}}`` (RESP2 flat arrays or RESP3 maps)."""

    def pairs(x: Any) -> List[Tuple[Any, Any]]:
        if isinstance(x, dict):
            return list(x.items())
        return [(x[i], x[i + 1]) for i in range(0, len(x) - 1, 2)]

    out: Dict[str, Dict[str, List[Tuple[int, int]]]] = {}
    for kind, hists in pairs(v or []):
        out[_text(kind)] = {
            _text(name): [(int(b[0]), int(b[1])) for b in buckets]
            for name, buckets in pairs(hists)
        }
    return out


#: The fields of one ``DLOCK.SLOWLOG GET`` entry, in order.
SLOWLOG_FIELDS = (
    "id",
    "ended_ms",
    "phase",
    "key",
    "owner",
    "kind",
    "mode",
    "duration_ms",
    "outcome",
    "blocked_by",
)


def parse_slowlog(v: Any) -> List[Dict[str, Any]]:
    """``DLOCK.SLOWLOG GET`` as a list of dicts (newest first), keyed by
    :data:`SLOWLOG_FIELDS`; key, owner and ``blocked_by`` stay as sent."""
    out = []
    for e in v or []:
        d = dict(zip(SLOWLOG_FIELDS, e))
        for k in ("phase", "kind", "mode", "outcome"):
            d[k] = _text(d.get(k))
        d["blocked_by"] = list(d.get("blocked_by") or [])
        out.append(d)
    return out


def percentile(buckets: Sequence[Tuple[int, int]], p: float) -> Optional[int]:
    """The upper bound (µs) of the bucket holding the ``p``-th percentile of a
    ``DLOCK.STATS`` histogram (as ``INFO dlock`` computes it); None when empty."""
    total = sum(c for _, c in buckets)
    if total == 0:
        return None
    want = max(1, math.ceil(total * p / 100.0))
    seen = 0
    for bound, count in buckets:
        seen += count
        if seen >= want:
            return bound
    return buckets[-1][0]


# ---------------------------------------------------------------------------
# The watchdog's schedule (the same rules as dlock-client's)


class Renewal(enum.Enum):
    RENEWED = 1
    LOST = 2
    FAILED = 3


class Schedule:
    """When to renew and when to give up. Times are ``time.monotonic()`` seconds."""

    def __init__(self, lease: float, interval: float, confirmed: float) -> None:
        self.lease = lease
        self.interval = max(interval, 0.001)
        self.confirmed = confirmed
        self.next = confirmed + self.interval

    def lost_at(self) -> float:
        """When the lock counts as lost without a confirmed renewal."""
        return self.confirmed + self.lease - lost_margin(self.lease)

    def wake_at(self) -> float:
        return min(self.next, self.lost_at())

    def attempt_timeout(self, now: float) -> float:
        """Timeout of an attempt started at ``now``: never past the end of the lease
        clock, and two intervals at most (time for a new connection under latency;
        then the next attempt goes on a fresh one)."""
        return max(min(self.lost_at() - now, max(2.0 * self.interval, 0.2)), 0.001)

    def renewed(self, sent: float) -> None:
        self.confirmed = sent
        self.next = sent + self.interval

    def failed(self, now: float) -> None:
        self.next = now + min(max(self.lease / 10.0, 0.02), self.interval)


# ---------------------------------------------------------------------------
# RedLock arithmetic


def quorum_of(n: int) -> int:
    return n // 2 + 1


def granted_until(
    tokens: Sequence[Optional[int]], quorum: int, start: float, now: float, lease: float
) -> Optional[float]:
    """The end of the validity of an attempt sent at ``start``, evaluated at ``now``:
    ``start + lease - margin`` when at least ``quorum`` nodes granted and
    ``lease - elapsed - margin`` is still positive; else None."""
    granted = sum(1 for t in tokens if t is not None)
    if granted >= quorum and (now - start) + lost_margin(lease) < lease:
        return start + lease - lost_margin(lease)
    return None


def renewal_outcome(answers: Sequence[Optional[bool]], quorum: int) -> Renewal:
    yes = sum(1 for a in answers if a is True)
    no = sum(1 for a in answers if a is False)
    if yes >= quorum:
        return Renewal.RENEWED
    if no > len(answers) - quorum:
        return Renewal.LOST
    return Renewal.FAILED


def retry_pause(max_delay: float) -> float:
    return random.uniform(0.0, max_delay) if max_delay > 0 else 0.0


# ---------------------------------------------------------------------------
# Connection settings of a redis-py client


def connection_kwargs(r: Any) -> Dict[str, Any]:
    pool = getattr(r, "connection_pool", None)
    if pool is not None and hasattr(pool, "connection_kwargs"):
        return dict(pool.connection_kwargs)
    nm = getattr(r, "nodes_manager", None)
    if nm is not None and hasattr(nm, "connection_kwargs"):
        return dict(nm.connection_kwargs)
    get = getattr(r, "get_connection_kwargs", None)
    if callable(get):
        try:
            return dict(get())
        except Exception:  # pragma: no cover - exotic clients
            pass
    return {}


def _param_default(cls: Any, name: str) -> Any:
    """The default of ``name`` in the ``__init__`` of ``cls`` or of its bases."""
    for k in getattr(cls, "__mro__", (cls,)):
        init = vars(k).get("__init__")
        if init is None:
            continue
        try:
            p = inspect.signature(init).parameters.get(name)
        except (TypeError, ValueError):  # pragma: no cover - a C extension
            continue
        if p is not None and p.default is not inspect.Parameter.empty:
            return p.default
    return None


def _implied_socket_timeout(r: Any, kw: Dict[str, Any]) -> Any:
    """The socket timeout a connection of ``r`` gets when its settings name none:
    ``Redis.from_url`` of redis-py 8 leaves ``socket_timeout`` out of the pool's
    ``connection_kwargs``, and its connections then default to 5 s (redis-py 5: none)."""
    pool = getattr(r, "connection_pool", None)
    cls = getattr(pool, "connection_class", None) or kw.get("connection_class")
    if cls is None and getattr(r, "nodes_manager", None) is not None:
        # A sync cluster makes each node a ``Redis(**connection_kwargs)``; an asyncio
        # one a ``connection_class(**connection_kwargs)``.
        mod = type(r).__module__.rsplit(".", 1)[0]
        try:
            m = importlib.import_module(mod)
            cls = m.Redis if not mod.endswith("asyncio") else m.Connection
        except (ImportError, AttributeError):  # pragma: no cover
            cls = None
    return _param_default(cls, "socket_timeout") if cls is not None else None


def socket_timeout_of(r: Any) -> Optional[float]:
    """The read timeout (s) of ``r``'s connections, None when they have none: the one
    its settings name, else the one its connection class defaults to."""
    kw = connection_kwargs(r)
    t = kw["socket_timeout"] if "socket_timeout" in kw else _implied_socket_timeout(r, kw)
    return float(t) if t else None


#: The shortest server-side wait slice (s).
MIN_WAIT_SLICE = 0.010


def slice_for_timeout(t: Optional[float], wait_slice: float) -> float:
    """The contract's slice: ``min(wait_slice, T − max(100 ms, T / 5))``, at least
    10 ms; no transport timeout ``T``: ``wait_slice``."""
    if t is None:
        return wait_slice
    return max(MIN_WAIT_SLICE, min(wait_slice, t - max(0.100, t / 5.0)))


def wait_slice_for(r: Any, wait_slice: float) -> float:
    """The longest WAIT that fits in the client's ``socket_timeout`` with room to spare
    for the reply: a blocked connection must never hit redis-py's read timeout (which
    drops the connection, and with retries on, would send the acquire again)."""
    return slice_for_timeout(socket_timeout_of(r), wait_slice)


def server_address(r: Any) -> str:
    """``host:port/db`` (or the cluster's first startup node), for ordering MultiLocks."""
    kw = connection_kwargs(r)
    if "path" in kw and kw.get("path"):
        return f"unix:{kw['path']}/{kw.get('db', 0)}"
    host = kw.get("host", "")
    port = kw.get("port", "")
    if not host:
        nm = getattr(r, "nodes_manager", None)
        nodes = getattr(nm, "startup_nodes", None) if nm is not None else None
        if nodes:
            first = sorted(nodes)[0]
            return f"cluster:{first}"
    return f"{host}:{port}/{kw.get('db', 0)}"


def server_sort_key(addr: str, key: KeyT, kind: Kind) -> Tuple[str, bytes, str]:
    raw = key.encode() if isinstance(key, str) else bytes(key)
    return (addr, raw, kind.value)
