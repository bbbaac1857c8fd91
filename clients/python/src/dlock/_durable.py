"""Durable grants: after a grant, ``WAIT replicas ms`` on the connection that got it;
when fewer replicas acknowledge, the grant is released and :class:`~dlock.NotDurable`
raised (or the acquire tried again, ``replicas_retries`` times).

Replication is asynchronous: a grant the replicas never received is lost when one of
them is promoted. ``WAIT`` answers how many replicas have everything *its connection*
wrote — so it must go on the very connection that sent the acquire (and got the grant,
also one handed over while it waited blocked on the server: Redis ≥ 7.0.12 and Valkey
count those). redis-py picks a pooled connection per command, so a durable acquire
takes one connection out of the pool (:class:`Pin`), sends the acquire, the
re-anchoring RENEW if any and the ``WAIT`` on it with no reconnect and no retry in
between (a ``WAIT`` on a fresh connection would count nothing of the grant), and puts
it back (:class:`Unpin`; disconnected first when something failed on it).
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence, Tuple

from redis.exceptions import ResponseError

from . import _core
from ._core import Kind, KeyT
from .errors import DlockError, NotDurable, map_error


class Durable:
    """What a durable acquire asks: ``replicas`` acknowledgements within ``timeout`` s,
    and how many more tries after a short count (``retries``)."""

    __slots__ = ("replicas", "timeout", "retries")

    def __init__(self, replicas: int, timeout: float, retries: int = 0) -> None:
        if int(replicas) < 0:
            raise ValueError(f"replicas must be 0 or more, got {replicas!r}")
        if not timeout or float(timeout) <= 0:
            raise ValueError(f"replicas_timeout must be a positive number of seconds, got {timeout!r}")
        if int(retries) < 0:
            raise ValueError(f"replicas_retries must be 0 or more, got {retries!r}")
        self.replicas = int(replicas)
        self.timeout = float(timeout)
        self.retries = int(retries)

    def wait_args(self) -> Tuple[Any, ...]:
        return ("WAIT", self.replicas, max(1, _core.ceil_ms(self.timeout)))

    def __repr__(self) -> str:
        return f"Durable(replicas={self.replicas}, timeout={self.timeout}, retries={self.retries})"


def durable_of(
    replicas: Optional[int], timeout: Optional[float], retries: Optional[int], defaults: Any
) -> Optional[Durable]:
    """The :class:`Durable` of an acquire: its own settings, else the lock's or client's
    (``defaults`` has ``replicas``, ``replicas_timeout``, ``replicas_retries``); None
    when no replica is asked for."""
    n = replicas if replicas is not None else getattr(defaults, "replicas", None)
    if not n:
        return None
    t = timeout if timeout is not None else getattr(defaults, "replicas_timeout", None)
    r = retries if retries is not None else getattr(defaults, "replicas_retries", None)
    return Durable(n, t if t is not None else DEFAULT_TIMEOUT, r or 0)


#: ``replicas_timeout`` when none is given (s).
DEFAULT_TIMEOUT = 1.0


# ---------------------------------------------------------------------------
# Effects (performed by each flavour's driver: :func:`perform_sync`, :func:`perform_async`)


class PinEffect:
    __slots__ = ()


class Pin(PinEffect):
    """Take one connection out of ``target``'s pool (on a cluster: of the node serving
    ``key``). Answer: a handle for :class:`PinnedCall` and :class:`Unpin`."""

    __slots__ = ("target", "key")

    def __init__(self, target: Any, key: KeyT) -> None:
        self.target = target
        self.key = key


class PinnedCall(PinEffect):
    """Send ``args`` on the pinned connection and read the reply (no reconnect, no
    retry). Answer: the raw reply; an error reply is thrown in."""

    __slots__ = ("pin", "args")

    def __init__(self, pin: Any, args: Sequence[Any]) -> None:
        self.pin = pin
        self.args = tuple(args)


class Unpin(PinEffect):
    """Give the pinned connection back (disconnected first when ``broken``)."""

    __slots__ = ("pin", "broken")

    def __init__(self, pin: Any, broken: bool) -> None:
        self.pin = pin
        self.broken = broken


def _get_connection(pool: Any) -> Any:
    try:
        return pool.get_connection()
    except TypeError:  # redis-py < 5.3 wants a command name
        return pool.get_connection("DLOCK")


def perform_sync(eff: PinEffect) -> Any:
    if isinstance(eff, Pin):
        r = eff.target.redis
        if eff.target._cluster:
            node = r.get_node_from_key(eff.key)
            r = node.redis_connection or r.get_redis_connection(node)
        pool = r.connection_pool
        return (pool, _get_connection(pool))
    if isinstance(eff, PinnedCall):
        _, conn = eff.pin
        conn.send_command(*eff.args)
        return conn.read_response()
    if isinstance(eff, Unpin):
        pool, conn = eff.pin
        if eff.broken:
            conn.disconnect()
        pool.release(conn)
        return None
    raise TypeError(f"unknown effect {eff!r}")  # pragma: no cover


async def perform_async(eff: PinEffect) -> Any:
    if isinstance(eff, Pin):
        r = eff.target.redis
        if eff.target._cluster:
            await r.initialize()
            node = r.get_node_from_key(eff.key)
            return (node, node.acquire_connection())
        pool = r.connection_pool
        return (pool, await _get_connection(pool))
    if isinstance(eff, PinnedCall):
        _, conn = eff.pin
        await conn.send_command(*eff.args)
        return await conn.read_response()
    if isinstance(eff, Unpin):
        owner, conn = eff.pin
        if eff.broken:
            await conn.disconnect()
        release = getattr(owner, "release", None)
        if release is None:  # redis-py 5's asyncio ClusterNode: its free list
            owner._free.append(conn)
            return None
        r = release(conn)
        if r is not None and hasattr(r, "__await__"):
            await r
        return None
    raise TypeError(f"unknown effect {eff!r}")  # pragma: no cover


# ---------------------------------------------------------------------------
# The operation


def _pinned(pin: Any, args: Sequence[Any]) -> Any:
    try:
        return (yield PinnedCall(pin, args))
    except ResponseError as e:
        mapped = map_error(e)
        if mapped is e:
            raise
        raise mapped from e


def op_attempt(
    client: Any,
    kind: Kind,
    key: KeyT,
    owner: str,
    lease_s: float,
    lms: int,
    extra: Dict[str, Any],
    durable: Durable,
    wms: int,
    bound: Optional[float] = None,
) -> Any:
    """One acquire that waits at most ``wms`` on the server, made durable (on a
    connection of the redis-py client's pool, pinned; ``bound`` is not applied there):
    ``(token, lease start)``, None when not granted, or :class:`NotDurable` once the
    tries are used up (nothing is held then)."""
    adapter = getattr(client.redis, "dlock_adapter", None)
    if adapter is not None:
        raise DlockError(
            f"durable grants (replicas=) need a redis-py client (WAIT on the connection "
            f"that got the grant); the {adapter} adapter has no pinned connections"
        )
    st = _core.socket_timeout_of(client.redis)
    if st is not None and durable.timeout >= st:
        raise ValueError(
            f"replicas_timeout ({durable.timeout} s) must be shorter than the redis client's "
            f"socket_timeout ({st} s): the WAIT reply would time out"
        )
    retries = durable.retries
    while True:
        try:
            return (yield from _once(client, kind, key, owner, lease_s, lms, extra, durable, wms))
        except NotDurable:
            if retries <= 0:
                raise
            retries -= 1


def _once(
    client: Any,
    kind: Kind,
    key: KeyT,
    owner: str,
    lease_s: float,
    lms: int,
    extra: Dict[str, Any],
    durable: Durable,
    wms: int,
) -> Any:
    from ._ops import NOW  # the effect constant (no import cycle at module load)

    pin = yield Pin(client, key)
    broken = False
    granted = False
    try:
        sent = yield NOW
        reply = yield from _pinned(pin, _core.acquire_args(kind, key, owner, lms, wms, **extra))
        token = _core.parse_token(reply)
        if token is None:
            return None
        granted = True
        start = sent
        now = yield NOW
        if now - sent > _core.lease_clock_slack(lease_s):
            # A late grant: restart the lease now — on this connection, so the WAIT
            # covers the renewal too. 0: it had lapsed already (nothing held).
            if not _core.parse_renewed((yield from _pinned(pin, _core.renew_args(key, owner, lms)))):
                granted = False
                return None
            start = now
        acked = yield from _pinned(pin, durable.wait_args())
        if not isinstance(acked, int) or isinstance(acked, bool):
            from .errors import UnexpectedReply

            raise UnexpectedReply(f"WAIT answered {acked!r}, expected a number of replicas")
        if acked < durable.replicas:
            raise NotDurable(durable.replicas, acked)
        granted = False  # durable: the caller keeps it
        return (token, start)
    except BaseException as e:
        if not isinstance(e, (ResponseError, NotDurable)):
            broken = True  # the connection may still owe a reply
        if granted:
            yield from _undo(client, kind, key, owner, extra)
        raise
    finally:
        yield Unpin(pin, broken)


def _undo(client: Any, kind: Kind, key: KeyT, owner: str, extra: Dict[str, Any]) -> Any:
    """Releases a grant that is not durable (on any pooled connection). Errors are
    swallowed: the caller raises its own, and an unreachable server ends the lease."""
    from ._ops import command

    args = _core.release_args(kind, key, owner, extra.get("permits"))
    try:
        yield from command(client, *args)
    except Exception:
        pass
