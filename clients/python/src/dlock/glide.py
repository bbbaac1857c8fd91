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
  a ``DLOCK.ACQUIRE … WAIT 4000`` would be cut after 250 ms. Waits on the server are
  sent on *waiting clients* whose request timeout is ``2 × wait_slice + 1 s``: a wait
  is never cut, and a full slice stays under the time after which GLIDE logs a slow
  reply (half the request timeout: ``Response wait took …``).
* **One multiplexed connection per node.** A command that waits on the server blocks
  every command queued behind it on that connection — a release or a watchdog renewal
  of the same client would wait for someone else's wait. So every wait goes out on a
  waiting client of its own (GLIDE clients made with the same configuration, kept in a
  small idle list and reused), as redis-py gives each waiting thread a pooled
  connection; everything else uses the client you passed.

* **Pub/sub.** dlock's notice listener (the prompt notice of a hold ended on the
  server) and ``WaitMode.NOTIFY`` subscribe on a GLIDE client of their own (made from
  the configuration, with GLIDE's dynamic subscriptions: ``valkey-glide`` 2.x), which
  GLIDE subscribes again after a reconnect.

What needs redis-py objects is refused with a message naming it: durable grants
(``replicas=``: a pinned connection), the ``Election`` recipe (a pipeline, a dedicated
connection). Locks, fair locks, read-write locks, semaphores, latches, MultiLock,
RedLock (one adapter per node), fencing, ``WaitMode.NOTIFY`` and ``run_once`` work.
GLIDE answers in RESP3 (maps), which the client reads as it reads redis-py's.
"""

from __future__ import annotations

import copy
import importlib
import queue
import re
from typing import Any, Dict, List, Optional, Set

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
        send; the waiting clients get a request timeout of twice that + 1 s. Pass the
        same value as the dlock client's ``wait_slice`` if you change that.
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
        self._own: Any = None
        self._closing: Set[Any] = set()
        # GLIDE logs every reply that took more than half its request timeout: a full
        # slice must stay under that.
        self.wait_timeout = self.wait_slice * 2.0 + 1.0
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
        """A GLIDE client of the adapter's own (a waiting client, a subscriber, its own
        client, the main one made from a configuration). Made with ``lazy_connect``
        unless the configuration says otherwise: GLIDE's ``create`` connects in a
        blocking call (the event loop too stops for up to its connection timeout when
        the server does not answer), so the connection is made at its first command
        instead, within that command's bound."""
        if getattr(cfg, "lazy_connect", False) is None:
            cfg = copy.copy(cfg)
            cfg.lazy_connect = True
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
        if healthy:
            yield from _op_close(c)
        else:
            # Cancelled or timed out (a deadline): closing may take GLIDE a while on a
            # dead link, and the caller must not wait for it.
            self._close_later(c)

    def _close_later(self, c: Any) -> None:  # pragma: no cover - every flavour defines it
        raise NotImplementedError

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
            text = str(e)
            if _SIGNALLED.match(text) or _CODED.match(text):
                raise _rex.ResponseError(_server_text(text)) from e
            # Not the server's reply: GLIDE could not reach it (a lazy connection that
            # failed: "Standalone connect failed - IoError: …").
            raise _rex.ConnectionError(f"GLIDE: {text}") from e

    def _op_own(self) -> Op[Any]:
        """The adapter's own client for dlock's own calls that no caller waits for
        (renewals, checks after a notice, cancels): made from the configuration with
        the waiting clients' request timeout — a renewal must not fail at GLIDE's
        default 250 ms when the network is slower than that; dlock bounds each call
        itself — so the client passed in is left as it is (it still carries the
        caller's acquires and releases, with the caller's timeout)."""
        if self._own is None:
            if self._config is None:
                return (yield from self._op_main())
            cfg = copy.copy(self._config)
            cfg.request_timeout = int(self.wait_timeout * 1000)
            c = yield from self._op_create(cfg)
            if self._own is None:
                self._own = c
            else:  # another caller made it meanwhile
                yield from _op_close(c)
        return self._own

    def _op_execute(self, args: Any, park: bool = False, own: bool = False) -> Op[Any]:
        """One command through ``custom_command``; GLIDE's errors become redis-py's
        (``ResponseError`` with the server's text, ``TimeoutError``, ``ConnectionError``)
        so dlock maps them as it maps redis-py's. A wait goes out on a waiting client;
        a call of dlock's own (``own``: a renewal, a check, a cancel) on the adapter's
        own client; anything else on the client passed in.
        ``park`` (a BIND acquire): on a waiting client too, answered as ``(reply,
        client)``, the client kept for the hold when the reply is a grant (a BIND hold
        is bound to its connection: nothing else may use, or close, it) until
        :meth:`give_back`."""
        cmd = [_arg(a) for a in args]
        if not park and not _waits(cmd):
            client = yield from (self._op_own() if own else self._op_main())
            return (yield from self._op_send(client, cmd))
        c = yield from self._op_waiting_client()
        healthy = False
        kept = False
        try:
            r = yield from self._op_send(c, cmd)
            healthy = True
            if not park:
                return r
            kept = isinstance(r, int) and not isinstance(r, bool) and r > 0
            return (r, c if kept else None)
        except _rex.ResponseError:
            healthy = True
            raise
        finally:
            # Cancelled or timed out mid-wait: that client may still be blocked on
            # the server; it is closed (which ends the wait there), not reused.
            if not kept:
                yield from self._op_give_back(c, healthy)

    def give_back(self, handle: Any) -> None:
        """A client kept for a BIND hold comes back (the hold is over)."""
        if handle is None or handle not in self._all_waiting:
            return
        if len(self._idle) < self.max_waiting_clients:
            self._idle.append(handle)
        else:
            self._all_waiting.remove(handle)
            self._close_later(handle)

    def _op_close(self) -> Op[None]:
        """Closes the clients this adapter made: the waiting clients, and the main one
        when it was given as a configuration (not a client passed in)."""
        waiting, self._all_waiting, self._idle = self._all_waiting, [], []
        own, self._own = self._own, None
        if own is not None:
            waiting.append(own)
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

        return await _run(self._op_execute(args, bool(options.get("park")),
                                           bool(options.get("own"))))

    async def aclose(self) -> None:
        from .aio import _run

        await _run(self._op_close())

    close = aclose

    def pubsub(self, **_: Any) -> "_AsyncPubSub":
        """A redis-py-shaped pub/sub on a GLIDE client of its own."""
        return _AsyncPubSub(self)

    def _close_later(self, c: Any) -> None:
        import asyncio

        from .aio import _run

        try:
            t = asyncio.get_running_loop().create_task(_run(_op_close(c)))
        except RuntimeError:
            return
        self._closing.add(t)
        t.add_done_callback(self._closing.discard)


class GlideRedisSync(_GlideCore):
    __doc__ = (
        "For :class:`dlock.Client`: a GLIDE sync client (``glide_sync``, PyPI "
        "``valkey-glide-sync``).\n" + (_GlideCore.__doc__ or "").split("\n", 1)[1]
    )

    _package = "glide_sync"

    def execute_command(self, *args: Any, **options: Any) -> Any:
        from ._sync import _run

        return _run(self._op_execute(args, bool(options.get("park")), bool(options.get("own"))))

    def close(self) -> None:
        from ._sync import _run

        _run(self._op_close())

    def pubsub(self, **_: Any) -> "_SyncPubSub":
        """A redis-py-shaped pub/sub on a GLIDE client of its own."""
        return _SyncPubSub(self)

    def _close_later(self, c: Any) -> None:
        import threading

        from ._sync import _run

        threading.Thread(target=_run, args=(_op_close(c),), name="dlock-glide-close",
                         daemon=True).start()


class _PubSubCore:
    """A redis-py-shaped pub/sub (``subscribe``, ``unsubscribe``, ``ssubscribe``,
    ``sunsubscribe``, ``get_message(timeout)``, ``close``) on a GLIDE client of its own,
    made from the adapter's configuration: dlock's notice listener and
    ``WaitMode.NOTIFY`` use it as they use redis-py's. GLIDE subscribes again by itself
    after a reconnect."""

    def __init__(self, adapter: "_GlideCore") -> None:
        if adapter._config is None:
            raise _rex.ConnectionError(
                "the GLIDE client has no configuration to make a subscriber from"
            )
        self._adapter = adapter
        self._client: Any = None
        self._pending: List[Dict[str, Any]] = []

    def _config(self, callback: Any) -> Any:
        cfg = copy.copy(self._adapter._config)
        subs = type(cfg).PubSubSubscriptions
        cfg.pubsub_subscriptions = subs(channels_and_patterns={}, callback=callback, context=None)
        return cfg

    @staticmethod
    def _message(m: Any, kind: str = "message") -> Dict[str, Any]:
        return {"type": kind, "pattern": getattr(m, "pattern", None),
                "channel": getattr(m, "channel", None), "data": getattr(m, "message", None)}

    def _confirmed(self, channels: Any, kind: str) -> None:
        # GLIDE confirms a subscription by returning; redis-py by a message, which
        # dlock's listener takes as "look again" (something may have been missed).
        for ch in channels:
            self._pending.append({"type": kind, "pattern": None, "channel": ch, "data": 1})

    def _op_subscribe(self, channels: Any, sharded: bool) -> Op[None]:
        chs = {_text(c) for c in channels}
        if not chs:
            return
        client = yield from self._op_client()
        errors = _glide_errors()
        try:
            if sharded:
                yield Invoke(client.ssubscribe, chs, timeout_ms=SUBSCRIBE_TIMEOUT_MS)
            else:
                yield Invoke(client.subscribe, chs, timeout_ms=SUBSCRIBE_TIMEOUT_MS)
        except (errors.GlideError, TimeoutError) as e:
            raise _rex.ConnectionError(f"GLIDE could not subscribe: {e}") from e
        self._confirmed(channels, "ssubscribe" if sharded else "subscribe")

    def _op_unsubscribe(self, channels: Any, sharded: bool) -> Op[None]:
        chs = {_text(c) for c in channels}
        if not chs or self._client is None:
            return
        try:
            if sharded:
                yield Invoke(self._client.sunsubscribe, chs, timeout_ms=SUBSCRIBE_TIMEOUT_MS)
            else:
                yield Invoke(self._client.unsubscribe, chs, timeout_ms=SUBSCRIBE_TIMEOUT_MS)
        except Exception as e:  # noqa: BLE001 - it is going away either way
            raise _rex.ConnectionError(f"GLIDE could not unsubscribe: {e}") from e

    def _op_client(self) -> Op[Any]:  # pragma: no cover - every flavour defines it
        raise NotImplementedError
        yield

    def _op_close(self) -> Op[None]:
        c, self._client = self._client, None
        yield from _op_close(c)


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


#: How long a GLIDE (un)subscription may take to be confirmed (ms).
SUBSCRIBE_TIMEOUT_MS = 5000


class _AsyncPubSub(_PubSubCore):
    """Messages are read by one task (GLIDE's ``get_pubsub_message``, never cancelled
    while the pub/sub lives: a future GLIDE is completing as it is cancelled would drop
    its message) into a queue that :meth:`get_message` waits on."""

    def __init__(self, adapter: "_GlideCore") -> None:
        super().__init__(adapter)
        self._queue: Any = None
        self._reader: Any = None

    def _op_client(self) -> Op[Any]:
        if self._client is None:
            self._client = yield from self._adapter._op_create(self._config(None))
        return self._client

    def _start_reader(self) -> None:
        import asyncio

        if self._reader is not None or self._client is None:
            return
        self._queue = asyncio.Queue()
        client, q = self._client, self._queue

        async def read() -> None:
            while True:
                q.put_nowait(await client.get_pubsub_message())

        self._reader = asyncio.ensure_future(read())

    async def subscribe(self, *channels: Any) -> None:
        from .aio import _run

        await _run(self._op_subscribe(channels, False))
        self._start_reader()

    async def ssubscribe(self, *channels: Any) -> None:
        from .aio import _run

        await _run(self._op_subscribe(channels, True))
        self._start_reader()

    async def unsubscribe(self, *channels: Any) -> None:
        from .aio import _run

        await _run(self._op_unsubscribe(channels, False))

    async def sunsubscribe(self, *channels: Any) -> None:
        from .aio import _run

        await _run(self._op_unsubscribe(channels, True))

    async def get_message(self, timeout: float = 0.0, **_: Any) -> Optional[Dict[str, Any]]:
        import asyncio

        if self._pending:
            return self._pending.pop(0)
        q = self._queue
        if q is None:
            if timeout:
                await asyncio.sleep(timeout)
            return None
        if not q.empty() or not timeout:
            return None if q.empty() else self._message(q.get_nowait())
        try:
            return self._message(await asyncio.wait_for(q.get(), timeout))
        except asyncio.TimeoutError:
            return None

    get_sharded_message = get_message

    async def aclose(self) -> None:
        from .aio import _run

        reader, self._reader, self._queue = self._reader, None, None
        if reader is not None:
            reader.cancel()
        await _run(self._op_close())

    close = aclose


class _SyncPubSub(_PubSubCore):
    def __init__(self, adapter: "_GlideCore") -> None:
        super().__init__(adapter)
        self._queue: "queue.Queue[Any]" = queue.Queue()

    def _op_client(self) -> Op[Any]:
        if self._client is None:
            self._client = yield from self._adapter._op_create(
                self._config(lambda m, _ctx: self._queue.put(m))
            )
        return self._client

    def subscribe(self, *channels: Any) -> None:
        from ._sync import _run

        _run(self._op_subscribe(channels, False))

    def ssubscribe(self, *channels: Any) -> None:
        from ._sync import _run

        _run(self._op_subscribe(channels, True))

    def unsubscribe(self, *channels: Any) -> None:
        from ._sync import _run

        _run(self._op_unsubscribe(channels, False))

    def sunsubscribe(self, *channels: Any) -> None:
        from ._sync import _run

        _run(self._op_unsubscribe(channels, True))

    def get_message(self, timeout: float = 0.0, **_: Any) -> Optional[Dict[str, Any]]:
        if self._pending:
            return self._pending.pop(0)
        try:
            m = self._queue.get(timeout=timeout) if timeout else self._queue.get_nowait()
        except queue.Empty:
            return None
        return self._message(m)

    get_sharded_message = get_message

    def close(self) -> None:
        from ._sync import _run

        _run(self._op_close())
