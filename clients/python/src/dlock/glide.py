"""Valkey GLIDE adapter: :class:`dlock.aio.Client` on a GLIDE client (PyPI
``valkey-glide``, asyncio), standalone (``GlideClient``) or cluster
(``GlideClusterClient``).

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

import asyncio
import copy
import re
from typing import Any, Dict, List

from redis import exceptions as _rex

from ._core import DEFAULT_WAIT_SLICE

__all__ = ["GlideRedis"]

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


class GlideRedis:
    """The face of a GLIDE client that :class:`dlock.aio.Client` talks to.

    :param client: a ``glide.GlideClient`` or ``glide.GlideClusterClient`` (created), or
        the configuration of one (``GlideClientConfiguration`` /
        ``GlideClusterClientConfiguration``): then it is created at the first command
        (and closed by :meth:`aclose`).
    :param wait_slice: the longest single server-side wait (s) the dlock client will
        send; the waiting clients get a request timeout above it. Pass the same value
        as the dlock client's ``wait_slice`` if you change that.
    :param max_waiting_clients: idle waiting clients kept for reuse.
    """

    #: For the parts of dlock that need redis-py objects: what to say instead.
    dlock_adapter = "GLIDE"

    def __init__(self, client: Any, *, wait_slice: float = DEFAULT_WAIT_SLICE,
                 max_waiting_clients: int = 8) -> None:
        from glide_shared.config import BaseClientConfiguration, GlideClusterClientConfiguration

        self._owned = isinstance(client, BaseClientConfiguration)
        if self._owned:
            import glide

            cfg = client
            self._kind: Any = (
                glide.GlideClusterClient
                if isinstance(cfg, GlideClusterClientConfiguration) else glide.GlideClient
            )
            self.client: Any = None
        else:
            cfg = getattr(client, "config", None)
            self._kind = type(client)
            self.client = client
        self._config = cfg
        self._creating: Any = None
        self.wait_slice = float(wait_slice)
        self.max_waiting_clients = int(max_waiting_clients)
        self._idle: List[Any] = []
        self._all_waiting: List[Any] = []
        self.wait_timeout = self.wait_slice * 1.5 + 1.0
        addrs = getattr(cfg, "addresses", None) or []
        first = addrs[0] if addrs else None
        kwargs: Dict[str, Any] = {
            # The slice is cut below the waiting clients' timeout (see the module doc).
            "socket_timeout": self.wait_timeout,
            "host": getattr(first, "host", ""),
            "port": getattr(first, "port", ""),
            "db": getattr(cfg, "database_id", None) or 0,
        }
        self.connection_pool = _PoolFace(kwargs)

    def __repr__(self) -> str:
        return f"GlideRedis({type(self.client).__name__})"

    @property
    def request_timeout(self) -> float:
        """The passed client's request timeout (s)."""
        t = getattr(self._config, "request_timeout", None)
        return t / 1000.0 if t else GLIDE_DEFAULT_TIMEOUT

    async def _waiting_client(self) -> Any:
        if self._idle:
            return self._idle.pop()
        if self._config is None:
            raise _rex.ConnectionError(
                "the GLIDE client has no configuration to make a waiting client from"
            )
        cfg = copy.copy(self._config)
        cfg.request_timeout = int(self.wait_timeout * 1000)
        c = await self._create(cfg)
        self._all_waiting.append(c)
        return c

    async def _create(self, cfg: Any) -> Any:
        from glide_shared.exceptions import GlideError

        try:
            return await self._kind.create(cfg)
        except GlideError as e:
            raise _rex.ConnectionError(f"GLIDE could not connect: {e}") from e

    async def _main(self) -> Any:
        if self.client is None:
            if self._creating is None:
                self._creating = asyncio.ensure_future(self._create(self._config))
            try:
                self.client = await asyncio.shield(self._creating)
            except _rex.ConnectionError:
                self._creating = None  # the next command tries again
                raise
        return self.client

    def _give_back(self, c: Any, healthy: bool) -> None:
        if healthy and len(self._idle) < self.max_waiting_clients:
            self._idle.append(c)
        else:
            self._all_waiting.remove(c)
            asyncio.ensure_future(_close_quietly(c))

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        """Sends one command through ``custom_command``; GLIDE's errors become redis-py's
        (``ResponseError`` with the server's text, ``TimeoutError``, ``ConnectionError``)
        so dlock maps them as it maps redis-py's."""
        cmd = [_arg(a) for a in args]
        if not _waits(cmd):
            return await self._send((await self._main()), cmd)
        c = await self._waiting_client()
        healthy = False
        try:
            r = await self._send(c, cmd)
            healthy = True
            return r
        except _rex.ResponseError:
            healthy = True
            raise
        finally:
            # Cancelled or timed out mid-wait: that client may still be blocked on
            # the server; it is closed (which ends the wait there), not reused.
            self._give_back(c, healthy)

    @staticmethod
    async def _send(client: Any, cmd: List[Any]) -> Any:
        from glide_shared.exceptions import (
            ClosingError,
            ConnectionError as GConnectionError,
            RequestError,
            TimeoutError as GTimeoutError,
        )

        try:
            return await client.custom_command(cmd)
        except GTimeoutError as e:
            raise _rex.TimeoutError(f"GLIDE request timed out: {e}") from e
        except (GConnectionError, ClosingError) as e:
            raise _rex.ConnectionError(f"GLIDE: {e}") from e
        except RequestError as e:
            raise _rex.ResponseError(_server_text(str(e))) from e

    async def aclose(self) -> None:
        """Closes the clients this adapter made: the waiting clients, and the main one
        when it was given as a configuration (not a client passed in)."""
        waiting, self._all_waiting, self._idle = self._all_waiting, [], []
        if self._owned and self.client is not None:
            waiting.append(self.client)
            self.client, self._creating = None, None
        for c in waiting:
            await _close_quietly(c)

    close = aclose


async def _close_quietly(c: Any) -> None:
    try:
        await c.close()
    except Exception:  # noqa: BLE001 - closing is best effort
        pass

