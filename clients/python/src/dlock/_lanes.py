"""dlock's own connections for its lock commands, made with the redis-py client's
settings (host, auth, TLS, timeouts, Sentinel, decoding — its pool's
``connection_class`` and ``connection_kwargs``) but under dlock's control:

* **Bounded.** Each command is given how long it may take (connecting included): the
  caller's deadline, a renewal's ``valid_until``, the transport's own timeout. A
  connection that has not answered by then is closed and the call fails — a server that
  is down, refuses connections or is partitioned cannot hold a caller past its
  deadline (docs/clients.md, rule 4). The reply is awaited with ``can_read(timeout)``,
  so no blocked read outlives the bound.
* **No retries of its own.** redis-py 8 retries a failed connect or command up to ten
  times with backoff (and would send an acquire again); here a failure is the
  operation's to handle: a try reports it at once, a wait retries until its deadline,
  a release retries once on a fresh connection (rule 3).
* **BIND holds keep their connection.** A grant made with ``BIND`` is bound to the
  connection that sent it, so that connection is set aside for the hold (no other
  command uses it, so nothing else can close it) until the hold ends.
* **A spare connection.** When a command takes the last idle connection, another one
  is made in the background, so that the next command — a renewal that must not be
  late — does not pay for a connection's handshake (two round trips with redis-py 8)
  under latency.
* **A late reply is waited for in the background** (``drain``: renewals, checks,
  releases — commands that queue nothing on the server): the caller has its answer at
  the bound, and the connection comes back once the reply arrives (within the
  transport's timeout, else it is closed), so a latency spike does not turn every
  late reply into a new connection — whose handshake, under that latency, would be
  late too.

The caller's own pool and connections are never touched: plain commands
(``execute``, ``info``, …) still go through the redis-py client.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import threading
import time
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from . import _core

log = logging.getLogger("dlock")

#: How long a late reply is waited for when the transport has no timeout (s).
DRAIN_FOR = 5.0


def _is_token(reply: Any) -> bool:
    return isinstance(reply, int) and not isinstance(reply, bool) and reply > 0


def _left(deadline: Optional[float]) -> Optional[float]:
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def _min(a: Optional[float], b: Optional[float]) -> Optional[float]:
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)


def _settings(redis: Any, module: str) -> Optional[Tuple[Any, Dict[str, Any]]]:
    """``(connection_class, kwargs)`` for dlock's connections to ``redis``'s server, or
    None when ``redis`` is not a standalone redis-py client (a cluster, an adapter)."""
    pool = getattr(redis, "connection_pool", None)
    cls = getattr(pool, "connection_class", None)
    kw = getattr(pool, "connection_kwargs", None)
    if cls is None or not isinstance(kw, dict) or getattr(redis, "dlock_adapter", None):
        return None
    retry = importlib.import_module(module + ".retry").Retry
    kwargs = dict(kw)
    kwargs["retry"] = retry(NoBackoff(), 0)
    kwargs.pop("retry_on_error", None)
    kwargs["retry_on_timeout"] = False
    return cls, kwargs


def _describe(conn: Any) -> str:
    host = getattr(conn, "host", None)
    if host:
        return f"{host}:{getattr(conn, 'port', '')}"
    path = getattr(conn, "path", None)
    return f"unix:{path}" if path else repr(conn)


def _no_reply(conn: Any, args: Sequence[Any], bound: float) -> RedisTimeoutError:
    cmd = args[0] if args else "?"
    return RedisTimeoutError(
        f"no reply from {_describe(conn)} to {cmd} within {bound:.3f} s (the connection "
        "was closed; the server may be down, partitioned or overloaded)"
    )


class Lanes:
    """The sync flavour's connections (thread-safe). ``timeout``: the transport's
    socket timeout (None: none)."""

    def __init__(self, cls: Any, kwargs: Dict[str, Any]) -> None:
        self._cls = cls
        self._kwargs = kwargs
        t = kwargs.get("socket_timeout", "unset")
        if t == "unset":
            t = _core._param_default(cls, "socket_timeout")
        self.timeout: Optional[float] = float(t) if t else None
        ct = kwargs.get("socket_connect_timeout")
        self._connect_timeout: Optional[float] = float(ct) if ct else self.timeout
        self._mu = threading.Lock()
        self._idle: List[Any] = []
        self._all: Set[Any] = set()
        self._closed = False
        self._warming = False
        self._pid = os.getpid()

    @classmethod
    def of(cls, redis: Any) -> Optional["Lanes"]:
        s = _settings(redis, "redis")
        return None if s is None else cls(*s)

    # -- connections ---------------------------------------------------------------

    def _checkout(self, fresh: bool) -> Any:
        with self._mu:
            if self._closed:
                raise RedisConnectionError("the dlock client is closed")
            if os.getpid() != self._pid:  # forked: the parent's sockets are not ours
                self._idle, self._all, self._pid = [], set(), os.getpid()
            conn = None if fresh or not self._idle else self._idle.pop()
            if not self._idle and not self._warming:
                self._warming = True
                threading.Thread(target=self._warm, name="dlock-spare", daemon=True).start()
            if conn is None:
                conn = self._cls(**self._kwargs)
                self._all.add(conn)
                return conn
        if getattr(conn, "_sock", None) is not None:
            try:
                if conn.can_read(timeout=0):  # data nobody asked for: not usable
                    conn.disconnect()
            except Exception:  # noqa: BLE001 - closed by the server (CLIENT KILL, …)
                conn.disconnect()
        return conn

    def _checkin(self, conn: Any, broken: bool) -> None:
        if broken:
            conn.disconnect()
        with self._mu:
            if not self._closed and conn in self._all:
                self._idle.append(conn)
                return
        conn.disconnect()

    def give_back(self, handle: Any) -> None:
        """A parked connection (a BIND hold's) goes back to the idle list."""
        if handle is not None:
            self._checkin(handle, broken=False)

    def _warm(self) -> None:
        """Makes the spare connection (connected within the transport's timeouts)."""
        conn = self._cls(**self._kwargs)
        with self._mu:
            if self._closed:
                self._warming = False
                return
            self._all.add(conn)
        ok = False
        try:
            self._connect(conn, None)
            ok = True
        except Exception as e:  # noqa: BLE001 - the next command connects itself
            log.debug("dlock: a spare connection failed: %s", e)
        finally:
            with self._mu:
                self._warming = False
        self._checkin(conn, broken=not ok)

    def _drain(self, conn: Any) -> None:
        """Reads a reply that came late for its caller, then gives the connection back
        (closed when the reply does not come within the transport's timeout)."""
        ok = False
        try:
            if conn.can_read(timeout=self.timeout or DRAIN_FOR):
                try:
                    conn.read_response()
                except ResponseError:
                    pass
                ok = True
        except Exception:  # noqa: BLE001 - closed below
            pass
        self._checkin(conn, broken=not ok)

    def _connect(self, conn: Any, deadline: Optional[float]) -> None:
        if getattr(conn, "_sock", None) is not None:
            return
        left = _left(deadline)
        if left is not None:
            left = max(left, 0.01)
        conn.socket_connect_timeout = _min(self._connect_timeout, left)
        conn.socket_timeout = _min(self.timeout, left)  # the handshake's replies
        conn.connect()

    # -- a command -----------------------------------------------------------------

    def call(self, args: Sequence[Any], bound: Optional[float], park: bool = False,
             fresh: bool = False, drain: bool = False) -> Any:
        """Sends ``args`` and reads the reply within ``bound`` s (None: the
        transport's own timeouts only). ``park``: answers ``(reply, handle)``, the
        connection kept aside when the reply is a grant. ``fresh``: on a new
        connection. ``drain``: a reply late for the bound is waited for in the
        background, then the connection is reused."""
        deadline = None if bound is None else time.monotonic() + bound
        conn = self._checkout(fresh)
        broken = True
        parked = False
        try:
            self._connect(conn, deadline)
            conn.send_command(*args)
            # The reply, awaited for what is left of the bound (else the transport's
            # timeout; None: as long as it takes) — whatever timeout the socket got
            # when it connected.
            wait = _left(deadline) if deadline is not None else self.timeout
            if not conn.can_read(timeout=wait):
                if drain and deadline is not None:
                    parked = True  # the drainer gives it back
                    threading.Thread(target=self._drain, args=(conn,), name="dlock-drain",
                                     daemon=True).start()
                raise _no_reply(conn, args, bound if bound is not None else wait or 0.0)
            reply = conn.read_response()
            broken = False
            if park:
                parked = _is_token(reply)
                return reply, (conn if parked else None)
            return reply
        except ResponseError:
            broken = False
            raise
        finally:
            if not parked:
                self._checkin(conn, broken)

    def close(self) -> None:
        """Closes every connection (parked ones too: their BIND holds end)."""
        with self._mu:
            self._closed = True
            conns, self._all, self._idle = list(self._all), set(), []
        for c in conns:
            try:
                c.disconnect()
            except Exception:  # noqa: BLE001 - closing is best effort
                pass


class AsyncLanes:
    """The asyncio flavour's connections (one event loop)."""

    def __init__(self, cls: Any, kwargs: Dict[str, Any]) -> None:
        self._cls = cls
        self._kwargs = kwargs
        t = kwargs.get("socket_timeout", "unset")
        if t == "unset":
            t = _core._param_default(cls, "socket_timeout")
        self.timeout: Optional[float] = float(t) if t else None
        self._idle: List[Any] = []
        self._all: Set[Any] = set()
        self._closed = False
        self._draining: Set[Any] = set()
        self._warming: Optional["asyncio.Future[None]"] = None

    @classmethod
    def of(cls, redis: Any) -> Optional["AsyncLanes"]:
        s = _settings(redis, "redis.asyncio")
        return None if s is None else cls(*s)

    async def _checkout(self, fresh: bool) -> Any:
        if self._closed:
            raise RedisConnectionError("the dlock client is closed")
        conn = None if fresh or not self._idle else self._idle.pop()
        if not self._idle and self._warming is None:
            self._warming = asyncio.ensure_future(self._warm())
        if conn is None:
            conn = self._cls(**self._kwargs)
            self._all.add(conn)
            return conn
        if conn.is_connected:
            # redis-py 8: can_read(); 5: can_read_destructive() (the same check).
            can_read = getattr(type(conn), "can_read", None) and conn.can_read
            try:
                if await (can_read or conn.can_read_destructive)():
                    await _disconnect(conn)
            except Exception:  # noqa: BLE001 - closed by the server
                await _disconnect(conn)
        return conn

    def give_back(self, handle: Any) -> None:
        if handle is not None and not self._closed and handle in self._all:
            self._idle.append(handle)

    async def _warm(self) -> None:
        """Makes the spare connection."""
        conn = self._cls(**self._kwargs)
        self._all.add(conn)
        ok = False
        try:
            await conn.connect()
            ok = True
        except asyncio.CancelledError:
            pass
        except Exception as e:  # noqa: BLE001 - the next command connects itself
            log.debug("dlock: a spare connection failed: %s", e)
        finally:
            self._warming = None
        if not ok:
            await _disconnect(conn)
        if not self._closed and conn in self._all:
            self._idle.append(conn)
        else:
            await _disconnect(conn)

    def _drain(self, conn: Any, task: "asyncio.Task[Any]") -> None:
        """``task`` (the exchange on ``conn``) came late for its caller: it runs on,
        at most the transport's timeout, and then ``conn`` comes back (closed when the
        reply did not come)."""
        self._draining.add(task)
        timer = asyncio.get_running_loop().call_later(self.timeout or DRAIN_FOR, task.cancel)

        def done(t: "asyncio.Task[Any]") -> None:
            timer.cancel()
            self._draining.discard(t)
            failed = t.cancelled() or (
                t.exception() is not None and not isinstance(t.exception(), ResponseError))
            if failed:
                closing = asyncio.ensure_future(_disconnect(conn))
                self._draining.add(closing)
                closing.add_done_callback(self._draining.discard)
            if not self._closed and conn in self._all:
                self._idle.append(conn)

        task.add_done_callback(done)

    async def _exchange(self, conn: Any, args: Sequence[Any]) -> Any:
        if not conn.is_connected:
            await conn.connect()
        await conn.send_command(*args)
        return await conn.read_response()

    async def call(self, args: Sequence[Any], bound: Optional[float], park: bool = False,
                   fresh: bool = False, drain: bool = False) -> Any:
        conn = await self._checkout(fresh)
        broken = True
        parked = False
        try:
            if bound is None:
                reply = await self._exchange(conn, args)
            elif drain:
                task = asyncio.ensure_future(self._exchange(conn, args))
                try:
                    done, _ = await asyncio.wait({task}, timeout=bound)
                except BaseException:  # cancelled: the reply is read in the background
                    parked = True
                    self._drain(conn, task)
                    raise
                if task not in done:
                    parked = True
                    self._drain(conn, task)
                    raise _no_reply(conn, args, bound)
                reply = task.result()
            else:
                reply = await _within(self._exchange(conn, args), bound, conn, args)
            broken = False
            if park:
                parked = _is_token(reply)
                return reply, (conn if parked else None)
            return reply
        except ResponseError:
            broken = False
            raise
        finally:
            if not parked:
                if broken:  # cancelled, timed out or failed: it may still owe a reply
                    await _disconnect(conn)
                if not self._closed and conn in self._all:
                    self._idle.append(conn)

    async def close(self) -> None:
        self._closed = True
        conns, self._all, self._idle = list(self._all), set(), []
        for t in list(self._draining):
            t.cancel()
        warming, self._warming = self._warming, None
        if warming is not None:
            warming.cancel()
        for c in conns:
            await _disconnect(c)


async def _disconnect(conn: Any) -> None:
    try:
        # nowait: a partitioned peer would never take the rest of the write buffer.
        await conn.disconnect(nowait=True)
    except Exception:  # noqa: BLE001 - closing is best effort
        pass


async def _within(aw: Any, bound: float, conn: Any, args: Sequence[Any]) -> Any:
    """``aw``, at most ``bound`` s. Not ``asyncio.wait_for``: before Python 3.12 it
    returns the result, and drops the caller's cancellation, when the two meet."""
    task = asyncio.ensure_future(aw)
    try:
        done, _ = await asyncio.wait({task}, timeout=bound)
    except BaseException:  # cancelled: the call goes too (the caller closes the connection)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        raise
    if task in done:
        return task.result()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    raise _no_reply(conn, args, bound)
