"""Valkey GLIDE adapters: :class:`dlock.aio.Client` on a GLIDE asyncio client (PyPI
``valkey-glide``: :class:`GlideRedis`) and :class:`dlock.Client` on a GLIDE sync client
(PyPI ``valkey-glide-sync``: :class:`GlideRedisSync`), standalone (``GlideClient``) or
cluster (``GlideClusterClient``). Both are one sans-IO core (:class:`_GlideCore`,
operations of :mod:`dlock._ops`) driven by the flavour's driver.

>>> from glide import GlideClient, GlideClientConfiguration, NodeAddress  # doctest: +SKIP
>>> import dlock.aio, dlock.glide                                         # doctest: +SKIP
>>> g = await GlideClient.create(GlideClientConfiguration([NodeAddress("127.0.0.1", 6379)]))  # doctest: +SKIP
>>> locks = dlock.aio.Client(dlock.glide.GlideRedis(g))                   # doctest: +SKIP
>>> async with locks.lock("orders"):                                      # doctest: +SKIP
...     ...

GLIDE sends module commands with ``custom_command`` (in a cluster, routed by the key,
the command's first argument). Two things of GLIDE need care, and the adapter takes it:

* **The request timeout.** GLIDE cuts every request at its ``request_timeout`` (250 ms
  unless configured), and gives a longer one only to its own list of blocking commands —
  a ``DLOCK.ACQUIRE … WAIT 5000`` would be cut after 250 ms. Waits on the server are
  sent on *waiting clients* whose request timeout is above the wait slice
  (``wait_slice`` + 50 % + 1 s), so a wait is never cut.
* **One multiplexed connection per node.** A command that waits on the server blocks
  every command queued behind it on that connection — a release or a watchdog renewal
  of the same client would wait for someone else's wait. So every wait goes out on a
  waiting client of its own (GLIDE clients made with the same configuration, kept in a
  small idle list and reused), as redis-py gives each waiting thread a pooled
  connection; everything else uses the client you passed.

What needs redis-py objects is refused with a message naming it: ``WaitMode.NOTIFY``
(pub/sub), durable grants (``replicas=``: a pinned connection), the ``Election`` recipe
(pub/sub, a pipeline, a dedicated connection). Locks, fair locks, read-write locks,
semaphores, latches, MultiLock, RedLock (one adapter per node), fencing and
``run_once`` work. GLIDE answers in RESP3 (maps), which the client reads as it reads
redis-py's.
"""

from __future__ import annotations

import copy
import importlib
import re
from typing import Any, Dict, List, Optional

from redis import exceptions as _rex

from ._core import DEFAULT_WAIT_SLICE
from ._ops import Invoke, Op

__all__ = ["GlideRedis", "GlideRedisSync"]

#: GLIDE's request timeout when none is configured (s).
GLIDE_DEFAULT_TIMEOUT = 0.25

# "An error was signalled by the server: - ResponseError: <text>" (ERR replies) and
# "<CODE>: <text>" (other error codes): back to the server's "<CODE> <text>".
_SIGNALLED = re.compile(r"^An error was signalled by the server:\s*-\s*\w+:\s?(.*)$", re.S)
_CODED = re.compile(r"^([A-Z][A-Z0-9_]*): (.*)$", re.S)


def _server_text(msg: str) -> str:
    m = _SIGNALLED.match(msg)
    if m:
        return m.group(1).rstrip()
    m = _CODED.match(msg)
    if m:
        return f"{m.group(1)} {m.group(2)}"
    return msg


def _arg(a: Any) -> Any:
    if isinstance(a, (bytes, str)):
        return a
    if isinstance(a, bool):
        return str(int(a))
    return str(a)


def _waits(args: List[Any]) -> bool:
    """Whether the command waits on the server (a ``WAIT`` above 0 ms)."""
    for i in range(len(args) - 1):
        a = args[i]
        if (a == "WAIT" or a == b"WAIT") and str(args[i + 1]) not in ("0", "b'0'"):
            return True
    return False


class _PoolFace:
    """What dlock reads of a redis-py connection pool: the connections' settings."""

    def __init__(self, kwargs: Dict[str, Any]) -> None:
        self.connection_kwargs = kwargs


def _glide_errors() -> Any:
    return importlib.import_module("glide_shared.exceptions")


class _GlideCore:
    """The face of a GLIDE client that a dlock client talks to, as operations.

    :param client: a GLIDE ``GlideClient`` or ``GlideClusterClient`` (created), or the
        configuration of one (``GlideClientConfiguration`` /
        ``GlideClusterClientConfiguration``): then it is created at the first command
        (and closed with the adapter).
    :param wait_slice: the longest single server-side wait (s) the dlock client will
        send; the waiting clients get a request timeout above it. Pass the same value
        as the dlock client's ``wait_slice`` if you change that.
    :param max_waiting_clients: idle waiting clients kept for reuse.
    """

    #: For the parts of dlock that need redis-py objects: what to say instead.
    dlock_adapter = "GLIDE"
    #: The GLIDE package of the flavour (``glide`` or ``glide_sync``).
    _package: str

    def __init__(self, client: Any, *, wait_slice: float = DEFAULT_WAIT_SLICE,
                 max_waiting_clients: int = 8) -> None:
        config = importlib.import_module("glide_shared.config")
        self._owned = isinstance(client, config.BaseClientConfiguration)
        if self._owned:
            pkg = importlib.import_module(self._package)
            cluster = isinstance(client, config.GlideClusterClientConfiguration)
            self._kind: Any = pkg.GlideClusterClient if cluster else pkg.GlideClient
            cfg: Any = client
            self.client: Any = None
        else:
            cfg = getattr(client, "config", None) or getattr(client, "_config", None)
            self._kind = type(client)
            self.client = client
        self._config = cfg
        self.wait_slice = float(wait_slice)
        self.max_waiting_clients = int(max_waiting_clients)
        self._idle: List[Any] = []
        self._all_waiting: List[Any] = []
        self.wait_timeout = self.wait_slice * 1.5 + 1.0
        addrs = getattr(cfg, "addresses", None) or []
        first = addrs[0] if addrs else None
        self.connection_pool = _PoolFace({
            # The slice is cut below the waiting clients' timeout (see the module doc).
            "socket_timeout": self.wait_timeout,
            "host": getattr(first, "host", ""),
            "port": getattr(first, "port", ""),
            "db": getattr(cfg, "database_id", None) or 0,
        })

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._kind.__name__})"

    @property
    def request_timeout(self) -> float:
        """The main client's request timeout (s)."""
        t = getattr(self._config, "request_timeout", None)
        return t / 1000.0 if t else GLIDE_DEFAULT_TIMEOUT

    def _op_create(self, cfg: Any) -> Op[Any]:
        try:
            return (yield Invoke(self._kind.create, cfg))
        except _glide_errors().GlideError as e:
            raise _rex.ConnectionError(f"GLIDE could not connect: {e}") from e

    def _op_main(self) -> Op[Any]:
        if self.client is None:
            c = yield from self._op_create(self._config)
            if self.client is None:
                self.client = c
            else:  # another caller made it meanwhile
                yield from _op_close(c)
        return self.client

    def _op_waiting_client(self) -> Op[Any]:
        if self._idle:
            return self._idle.pop()
        if self._config is None:
            raise _rex.ConnectionError("the GLIDE client has no configuration to make a waiting client from")
        cfg = copy.copy(self._config)
        cfg.request_timeout = int(self.wait_timeout * 1000)
        c = yield from self._op_create(cfg)
        self._all_waiting.append(c)
        return c

    def _op_give_back(self, c: Any, healthy: bool) -> Op[None]:
        if healthy and len(self._idle) < self.max_waiting_clients:
            self._idle.append(c)
            return
        if c in self._all_waiting:
            self._all_waiting.remove(c)
        yield from _op_close(c)

    @staticmethod
    def _op_send(client: Any, cmd: List[Any]) -> Op[Any]:
        errors = _glide_errors()
        try:
            return (yield Invoke(client.custom_command, cmd))
        except errors.TimeoutError as e:
            raise _rex.TimeoutError(f"GLIDE request timed out: {e}") from e
        except (errors.ConnectionError, errors.ClosingError) as e:
            raise _rex.ConnectionError(f"GLIDE: {e}") from e
        except errors.RequestError as e:
            raise _rex.ResponseError(_server_text(str(e))) from e

    def _op_execute(self, args: Any) -> Op[Any]:
        """One command through ``custom_command``; GLIDE's errors become redis-py's
        (``ResponseError`` with the server's text, ``TimeoutError``, ``ConnectionError``)
        so dlock maps them as it maps redis-py's. A wait goes out on a waiting client."""
        cmd = [_arg(a) for a in args]
        if not _waits(cmd):
            return (yield from self._op_send((yield from self._op_main()), cmd))
        c = yield from self._op_waiting_client()
        healthy = False
        try:
            r = yield from self._op_send(c, cmd)
            healthy = True
            return r
        except _rex.ResponseError:
            healthy = True
            raise
        finally:
            # Cancelled or timed out mid-wait: that client may still be blocked on
            # the server; it is closed (which ends the wait there), not reused.
            yield from self._op_give_back(c, healthy)

    def _op_close(self) -> Op[None]:
        """Closes the clients this adapter made: the waiting clients, and the main one
        when it was given as a configuration (not a client passed in)."""
        waiting, self._all_waiting, self._idle = self._all_waiting, [], []
        if self._owned and self.client is not None:
            waiting.append(self.client)
            self.client = None
        for c in waiting:
            yield from _op_close(c)


def _op_close(c: Optional[Any]) -> Op[None]:
    if c is None:
        return
    try:
        yield Invoke(c.close)
    except Exception:  # noqa: BLE001 - closing is best effort
        pass


class GlideRedis(_GlideCore):
    __doc__ = (
        "For :class:`dlock.aio.Client`: a GLIDE asyncio client (``glide``).\n"
        + (_GlideCore.__doc__ or "").split("\n", 1)[1]
    )

    _package = "glide"

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        from .aio import _run

        return await _run(self._op_execute(args))

    async def aclose(self) -> None:
        from .aio import _run

        await _run(self._op_close())

    close = aclose


class GlideRedisSync(_GlideCore):
    __doc__ = (
        "For :class:`dlock.Client`: a GLIDE sync client (``glide_sync``, PyPI "
        "``valkey-glide-sync``).\n" + (_GlideCore.__doc__ or "").split("\n", 1)[1]
    )

    _package = "glide_sync"

    def execute_command(self, *args: Any, **options: Any) -> Any:
        from ._sync import _run

        return _run(self._op_execute(args))

    def close(self) -> None:
        from ._sync import _run

        _run(self._op_close())
