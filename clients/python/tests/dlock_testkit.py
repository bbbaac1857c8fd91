"""One behaviour suite for both flavours.

Tests are written once, as coroutines, against ``api``:

* ``api.client(server, **opts)`` gives a dlock client of the flavour under test (sync:
  ``dlock.Client`` on ``redis.Redis``; async: ``dlock.aio.Client`` on
  ``redis.asyncio.Redis``; glide: ``dlock.aio.Client`` on the Valkey GLIDE adapter,
  :class:`dlock.glide.GlideRedis`, when ``valkey-glide`` is installed). In the sync flavour its objects are wrapped so that the
  calls that talk to the server are awaitable (they run, blocking, on the calling
  thread — so per-thread owner ids behave as in a plain sync program).
* ``api.spawn(coro_fn)`` starts an actor: a new *thread* with its own event loop in
  the sync flavour, a new *task* in the async flavour — each has its own owner id, as
  two threads (or two tasks) of a real program would. ``await api.join(actor)`` waits.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Awaitable, Callable, List, Optional

import redis
import redis.asyncio as aredis

import dlock
import dlock.aio

# Methods that talk to the server (coroutines in the async flavour).
IO = {
    "acquire", "release", "check", "fenced", "info", "force_release", "execute",
    "try_set_count", "count_down", "count", "wait", "has_command", "locked", "renew",
    "scan", "stats", "stats_reset", "slowlog_get", "slowlog_len", "slowlog_reset",
    "owned", "extend", "reacquire", "close",
}

_WRAPPED = (
    dlock.Client, dlock.Lock, dlock.RWLock, dlock.Semaphore, dlock.Latch,
    dlock.MultiLock, dlock.RedLock, dlock.LostSignal,
)


def wrap(v: Any) -> Any:
    return Aw(v) if isinstance(v, _WRAPPED) else v


def unwrap(v: Any) -> Any:
    return object.__getattribute__(v, "_o") if isinstance(v, Aw) else v


class Aw:
    """A sync dlock object whose server calls are awaitable (they block the thread)."""

    def __init__(self, obj: Any) -> None:
        object.__setattr__(self, "_o", obj)

    def __getattr__(self, name: str) -> Any:
        v = getattr(object.__getattribute__(self, "_o"), name)
        if callable(v) and name in IO:
            async def call(*a: Any, **k: Any) -> Any:
                return wrap(v(*a, **k))
            return call
        if callable(v) and not isinstance(v, type):
            def plain(*a: Any, **k: Any) -> Any:
                return wrap(v(*a, **k))
            return plain
        return wrap(v)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(object.__getattribute__(self, "_o"), name, value)

    async def __aenter__(self) -> "Aw":
        object.__getattribute__(self, "_o").__enter__()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        object.__getattribute__(self, "_o").__exit__(*exc)

    def __repr__(self) -> str:
        return f"Aw({object.__getattribute__(self, '_o')!r})"


class Actor:
    def __init__(self) -> None:
        self.result: Any = None
        self.error: Optional[BaseException] = None
        self.thread: Optional[threading.Thread] = None
        self.task: Optional["asyncio.Task[Any]"] = None


class Api:
    def __init__(self, flavour: str) -> None:
        self.flavour = flavour
        self.is_glide = flavour in ("glide", "glide-sync")
        self.is_async = flavour in ("async", "glide")
        self._clients: List[Any] = []
        self._dlocks: List[Any] = []
        self.actors: List[Actor] = []

    def __repr__(self) -> str:
        return f"Api({self.flavour})"

    def needs_redis_py(self, what: str) -> None:
        """Skips under the GLIDE adapter, which refuses ``what`` (test_pkg_glide checks
        that it says so)."""
        if self.is_glide:
            import pytest

            pytest.skip(f"{what}: refused by the GLIDE adapter (see test_pkg_glide)")

    # -- clients -------------------------------------------------------------------

    def redis(self, server: Any, **kw: Any) -> Any:
        """A redis-py client of the flavour on ``server`` (glide: the GLIDE adapter;
        ``socket_timeout`` becomes its request timeout, other settings are redis-py's)."""
        kw.setdefault("socket_connect_timeout", 10)
        if self.is_glide:
            from glide_shared.config import GlideClientConfiguration, NodeAddress

            import dlock.glide

            t = kw.get("socket_timeout")
            cfg = GlideClientConfiguration(
                [NodeAddress("127.0.0.1", server.port)],
                request_timeout=int((t if t else 10.0) * 1000),
            )
            adapter = dlock.glide.GlideRedis if self.is_async else dlock.glide.GlideRedisSync
            r = adapter(cfg)
        elif self.is_async:
            r = aredis.Redis(host="127.0.0.1", port=server.port, **kw)
        else:
            r = redis.Redis(host="127.0.0.1", port=server.port, **kw)
        self._clients.append(r)
        return r

    def client(self, server: Any, redis_kw: Optional[dict] = None, **opts: Any) -> Any:
        r = self.redis(server, **(redis_kw or {}))
        return self.wrap_client(r, **opts)

    def from_url(self, server: Any, **opts: Any) -> Any:
        """``Client.from_url`` of the flavour on ``server`` (the URL's own settings only:
        no socket timeout named)."""
        url = f"redis://127.0.0.1:{server.port}/0"
        if self.is_async:
            c = dlock.aio.Client.from_url(url, **opts)
            self._clients.append(c.redis)
            self._dlocks.append(c)
            return c
        c = dlock.Client.from_url(url, **opts)
        self._clients.append(c.redis)
        self._dlocks.append(c)
        return Aw(c)

    def wrap_client(self, r: Any, **opts: Any) -> Any:
        c = dlock.aio.Client(r, **opts) if self.is_async else dlock.Client(r, **opts)
        self._dlocks.append(c)
        return c if self.is_async else Aw(c)

    def multilock(self, locks: List[Any], **kw: Any) -> Any:
        if self.is_async:
            return dlock.aio.MultiLock(locks, **kw)
        return Aw(dlock.MultiLock([unwrap(l) for l in locks], **kw))

    def redlock(self, nodes: List[Any], name: str, **kw: Any) -> Any:
        if self.is_async:
            return dlock.aio.RedLock(nodes, name, **kw)
        return Aw(dlock.RedLock([unwrap(n) for n in nodes], name, **kw))

    async def aclose(self) -> None:
        for c in self._dlocks:  # the dlock clients first: their threads and tasks end
            try:
                if self.is_async:
                    await c.aclose()
                else:
                    c.close()
            except Exception:
                pass
        self._dlocks.clear()
        for r in self._clients:
            try:
                if self.is_async:
                    close = getattr(r, "aclose", None) or r.close
                    await close()
                else:
                    r.close()
            except Exception:
                pass
        self._clients.clear()

    # -- actors ----------------------------------------------------------------------

    def spawn(self, fn: Callable[[], Awaitable[Any]]) -> Actor:
        actor = Actor()
        self.actors.append(actor)
        if self.is_async:
            async def run_task() -> None:
                try:
                    actor.result = await fn()
                except BaseException as e:  # noqa: BLE001
                    actor.error = e
            actor.task = asyncio.ensure_future(run_task())
        else:
            def run_thread() -> None:
                try:
                    actor.result = asyncio.run(fn())
                except BaseException as e:  # noqa: BLE001
                    actor.error = e
            actor.thread = threading.Thread(target=run_thread, daemon=True)
            actor.thread.start()
        return actor

    async def join(self, actor: Actor, timeout: float = 30.0) -> Any:
        if actor.task is not None:
            await asyncio.wait_for(asyncio.shield(actor.task), timeout)
        elif actor.thread is not None:
            await asyncio.get_running_loop().run_in_executor(None, actor.thread.join, timeout)
            if actor.thread.is_alive():
                raise TimeoutError("actor thread did not finish in time")
        if actor.error is not None:
            raise actor.error
        return actor.result

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


def require_command(server: Any, command: str, why: str = "") -> None:
    """Skips the test when the loaded module lacks ``command`` (and only then)."""
    import os

    import pytest

    if not server.has_command(command):
        module = os.environ.get("DLOCK_MODULE") or "target/release/libdlock.so"
        pytest.skip(
            f"the loaded module ({module}) has no {command.upper()}"
            f"{' - ' + why if why else ''}; set DLOCK_MODULE to a build that has it"
        )


async def eventually(cond: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> None:
    """Polls ``cond`` (a plain or async callable) until true, or fails after ``timeout``."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while True:
        v = cond()
        if asyncio.iscoroutine(v):
            v = await v
        if v:
            return
        if loop.time() > end:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)
