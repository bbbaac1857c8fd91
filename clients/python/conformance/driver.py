"""The conformance driver of the Python client (``conformance/README.md``, "Drivers").

Speaks the suite's JSON Lines protocol on stdin/stdout and drives the client's public
API — what a user of ``dlock`` writes, nothing private — in one of three flavours:

* ``sync``: :class:`dlock.Client` on ``redis.Redis.from_url(url)``;
* ``asyncio``: :class:`dlock.aio.Client` on ``redis.asyncio.Redis.from_url(url)``;
* ``glide``: :class:`dlock.aio.Client` on :class:`dlock.glide.GlideRedis` around a
  Valkey GLIDE asyncio ``GlideClient`` (the client README's example).

Owners are per thread (sync) or per task (asyncio) in this client, so every request
of one handle runs on that handle's own thread or task, in order, as a user's code that
takes and lets go of a lock does. The loss signal listened to is the hold's ``lost``
event (``lost.wait()``), which the README tells users to wait on.

``--check`` exits 127 when the flavour's transport is not installed (the engine then
skips the driver instead of failing it)."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import inspect
import json
import os
import queue
import sys
import threading
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional
from urllib.parse import urlparse

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))  # the client's source tree, installed or not

import redis  # noqa: E402
import redis.asyncio  # noqa: E402
import redis.exceptions  # noqa: E402

import dlock  # noqa: E402
import dlock.aio  # noqa: E402

FLAVOURS = ("sync", "asyncio", "glide")
#: The contract's loss reasons; the client's older names on the right.
REASONS = {
    "forced": "forced", "expired": "expired", "deleted": "deleted",
    "disconnected": "disconnected", "unreachable": "unreachable", "not_held": "not_held",
    "no_quorum": "no_quorum", "lease_ended": "expired",
}
KINDS = {
    "lost", "timeout", "wrong_kind", "module_not_loaded", "deadlock", "queue_full",
    "not_durable", "connection", "invalid_argument", "unsupported", "other",
}
#: Requests that act on one handle: they run on the handle's own thread/task.
HANDLE_OPS = {"acquire", "acquire_multi", "campaign", "unlock", "held"}


class Unsupported(Exception):
    """The client has no API for this request or option."""


class Refused(Exception):
    """A request that makes no sense to this driver (an unknown handle, say)."""


# ---------------------------------------------------------------------------
# What the engine sees


class Out:
    """The protocol's stdout: one JSON object per line, flushed, from any thread.

    The process's own stdout (fd 1) is pointed at stderr, so that whatever else writes
    there — GLIDE's native logger warns on fd 1, say — cannot garble the protocol; the
    protocol goes out on a copy of the original fd 1."""

    def __init__(self) -> None:
        self._mu = threading.Lock()
        sys.stdout.flush()
        self._stream = os.fdopen(os.dup(1), "w", encoding="utf-8")
        os.dup2(2, 1)

    def send(self, obj: Dict[str, Any]) -> None:
        line = json.dumps(obj)
        with self._mu:
            self._stream.write(line + "\n")
            self._stream.flush()

    def reply(self, rid: Any, fields: Optional[Dict[str, Any]] = None) -> None:
        body: Dict[str, Any] = {"id": rid, "ok": True}
        body.update(fields or {})
        self.send(body)

    def error(self, rid: Any, e: BaseException) -> None:
        self.send({"id": rid, "ok": False, "error": error_of(e)})

    def lost(self, handle: str, reason: Any) -> None:
        self.send({"event": "lost", "handle": handle, "reason": reason_of(reason)})


def reason_of(reason: Any) -> str:
    value = getattr(reason, "value", reason)
    return REASONS.get(str(value), str(value))


def _text(b: Any) -> str:
    return b.decode("utf-8", "replace") if isinstance(b, bytes) else str(b)


def error_of(e: BaseException) -> Dict[str, Any]:
    """The protocol's error object for what the client raised."""
    msg = f"{type(e).__name__}: {e}"
    if isinstance(e, Unsupported):
        return {"kind": "unsupported", "message": str(e)}
    if isinstance(e, Refused):
        return {"kind": "other", "message": f"driver: {e}"}
    named = getattr(e, "kind", None)  # a client that names the contract's kind itself
    if isinstance(named, str) and named in KINDS:
        out: Dict[str, Any] = {"kind": named, "message": msg}
        if getattr(e, "reason", None) is not None:
            out["reason"] = reason_of(e.reason)  # type: ignore[attr-defined]
        return out
    if isinstance(e, dlock.AcquireTimeout):
        return {"kind": "timeout", "message": msg}
    if isinstance(e, dlock.Deadlock):
        return {"kind": "deadlock", "message": msg,
                "cycle": [[_text(k), _text(o)] for o, _, k in e.cycle]}
    if isinstance(e, (dlock.WrongType, dlock.WrongKind)):
        return {"kind": "wrong_kind", "message": msg}
    if isinstance(e, dlock.UnknownCommand):
        return {"kind": "module_not_loaded", "message": msg}
    if isinstance(e, dlock.QueueFull):
        return {"kind": "queue_full", "message": msg}
    if isinstance(e, (dlock.NotDurable, dlock.NoReplicas)):
        return {"kind": "not_durable", "message": msg}
    if isinstance(e, dlock.NotHeld):
        return {"kind": "lost", "reason": "not_held", "message": msg}
    if isinstance(e, (dlock.InvalidArgument, ValueError, TypeError)):
        out = {"kind": "invalid_argument", "message": msg}
        argument = getattr(e, "argument", None)  # where the client names the argument
        if isinstance(argument, str):
            out["argument"] = argument
        return out
    if isinstance(e, (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError,
                      ConnectionError, TimeoutError, OSError)):
        return {"kind": "connection", "message": msg}
    return {"kind": "other", "message": msg}


def result_of(outcome: Any) -> str:
    """``released`` / ``still_held`` / ``lost`` / ``unknown`` of what release() gave
    (a MultiLock's list: lost when any part was, else the first part's)."""
    if isinstance(outcome, list):
        values = [result_of(o) for o in outcome]
        for worst in ("unknown", "lost", "still_held"):
            if worst in values:
                return worst
        return values[0] if values else "released"
    return str(getattr(outcome, "value", outcome))


# ---------------------------------------------------------------------------
# Requests → the client's calls (shared by the flavours)


def ms(v: Any) -> Optional[float]:
    return None if v is None else float(v) / 1000.0


def client_kwargs(opts: Dict[str, Any], flavour: str) -> Dict[str, Any]:
    kw: Dict[str, Any] = {}
    if "watchdog_lease_ms" in opts:
        kw["watchdog_lease"] = ms(opts["watchdog_lease_ms"])
    if "renew_interval_ms" in opts:
        kw["renew_interval"] = ms(opts["renew_interval_ms"])
    if opts.get("replicas"):
        if flavour == "glide":
            raise Unsupported("durable grants (replicas=) need a redis-py client: the GLIDE "
                              "adapter refuses them (clients/python/README.md, Valkey GLIDE)")
        kw["replicas"] = int(opts["replicas"])
    return kw


def lock_kwargs(req: Dict[str, Any], opts: Dict[str, Any]) -> Dict[str, Any]:
    kw: Dict[str, Any] = {}
    if opts.get("wait_mode") is not None:
        kw["wait_mode"] = dlock.WaitMode(opts["wait_mode"])
    bind = req.get("bind", opts.get("bind"))
    if bind:
        kw["bind"] = True
    if req.get("owner") is not None:
        kw["owner"] = req["owner"]
    return kw


def make_lock(client: Any, req: Dict[str, Any], opts: Dict[str, Any]) -> Any:
    kind = req.get("kind", "mutex")
    key = req["key"]
    kw = lock_kwargs(req, opts)
    if kind == "mutex":
        return client.lock(key, **kw)
    if kind == "fair":
        return client.fair_lock(key, **kw)
    if kind == "read":
        return client.rwlock(key, **kw).read()
    if kind == "write":
        return client.rwlock(key, **kw).write()
    if kind == "semaphore":
        return client.semaphore(key, int(req.get("limit", 1)), permits=int(req.get("permits", 1)), **kw)
    raise Refused(f"unknown kind {kind!r}")


def acquire_kwargs(req: Dict[str, Any]) -> Dict[str, Any]:
    """``acquire()``'s arguments: the wait (0: one try) and the lease (None: the
    watchdog)."""
    return {"timeout": ms(req.get("wait_ms") or 0), "lease": ms(req.get("lease_ms"))}


def not_granted(req: Dict[str, Any], what: str) -> dlock.AcquireTimeout:
    wait = req.get("wait_ms") or 0
    return dlock.AcquireTimeout(f"{what} was not granted within {wait} ms")


class Handle:
    """What one handle holds: a lock, a MultiLock or an election term."""

    def __init__(self, kind: str, obj: Any, signal: Any) -> None:
        self.kind = kind  # lock | multi | term
        self.obj = obj
        self.signal = signal


# ---------------------------------------------------------------------------
# sync: dlock.Client on redis.Redis


class SyncDriver:
    def __init__(self, out: Out) -> None:
        self.out = out
        self.client: Any = None
        self.opts: Dict[str, Any] = {}
        self.handles: Dict[str, Handle] = {}
        self.queues: Dict[str, "queue.SimpleQueue[Dict[str, Any]]"] = {}
        self._mu = threading.Lock()

    def dispatch(self, req: Dict[str, Any]) -> None:
        if req.get("op") in HANDLE_OPS and isinstance(req.get("handle"), str):
            with self._mu:
                q = self.queues.get(req["handle"])
                if q is None:
                    q = self.queues[req["handle"]] = queue.SimpleQueue()
                    threading.Thread(target=self._worker, args=(q,), daemon=True,
                                     name=f"handle-{req['handle']}").start()
            q.put(req)
        else:
            threading.Thread(target=self.serve, args=(req,), daemon=True).start()

    def _worker(self, q: "queue.SimpleQueue[Dict[str, Any]]") -> None:
        while True:
            self.serve(q.get())

    def serve(self, req: Dict[str, Any]) -> None:
        rid = req.get("id")
        fn: Optional[Callable[[Dict[str, Any]], Optional[Dict[str, Any]]]] = getattr(
            self, f"op_{req.get('op')}", None)
        try:
            if fn is None:
                raise Unsupported(f"unknown op {req.get('op')!r}")
            self.out.reply(rid, fn(req))
        except BaseException as e:  # noqa: BLE001 - every failure is an answer
            self.out.error(rid, e)

    def _watch(self, handle: str, signal: Any) -> None:
        def wait() -> None:
            signal.wait()
            self.out.lost(handle, signal.reason)

        threading.Thread(target=wait, daemon=True, name=f"lost-{handle}").start()

    def _client(self) -> Any:
        if self.client is None:
            raise Refused("no open client")
        return self.client

    def op_open(self, req: Dict[str, Any]) -> None:
        opts = dict(req.get("options") or {})
        ckw = client_kwargs(opts, "sync")
        rkw: Dict[str, Any] = {}
        if opts.get("transport_timeout_ms") is not None:
            rkw["socket_timeout"] = ms(opts["transport_timeout_ms"])
        r = redis.Redis.from_url(req["url"], **rkw)
        try:
            client = dlock.Client(r, **ckw)
        except BaseException:
            r.close()
            raise
        self.client, self.opts = client, opts

    def op_acquire(self, req: Dict[str, Any]) -> Dict[str, Any]:
        lock = make_lock(self._client(), req, self.opts)
        if not lock.acquire(**acquire_kwargs(req)):
            raise not_granted(req, f"{req.get('kind', 'mutex')} {req['key']!r}")
        h = self.handles[req["handle"]] = Handle("lock", lock, lock.lost)
        self._watch(req["handle"], h.signal)
        return {"token": lock.token}

    def op_acquire_multi(self, req: Dict[str, Any]) -> Dict[str, Any]:
        c = self._client()
        locks = [c.lock(k, **lock_kwargs(req, self.opts)) for k in req["keys"]]
        m = dlock.MultiLock(locks)
        kw = acquire_kwargs(req)
        if not m.acquire(timeout=kw["timeout"], lease=kw["lease"]):
            raise not_granted(req, f"MultiLock {req['keys']!r}")
        h = self.handles[req["handle"]] = Handle("multi", m, m.lost)
        self._watch(req["handle"], h.signal)
        return {"tokens": m.tokens}

    def op_campaign(self, req: Dict[str, Any]) -> Dict[str, Any]:
        from dlock.recipes import Election

        e = Election(self._client(), req["name"])
        term = e.campaign(timeout=ms(req.get("wait_ms") or 0))
        if term is None:
            raise not_granted(req, f"the election {req['name']!r}")
        if req.get("value") is not None:
            term.proclaim(req["value"])
        h = self.handles[req["handle"]] = Handle("term", term, term.lost)
        self._watch(req["handle"], h.signal)
        return {"key": e.name}

    def _handle(self, req: Dict[str, Any]) -> Handle:
        h = self.handles.get(req["handle"])
        if h is None:
            raise Refused(f"handle {req['handle']!r} never held")
        return h

    def op_unlock(self, req: Dict[str, Any]) -> Dict[str, Any]:
        h = self._handle(req)
        outcome = h.obj.resign() if h.kind == "term" else h.obj.release()
        return {"result": result_of(outcome)}

    def op_held(self, req: Dict[str, Any]) -> Dict[str, Any]:
        h = self._handle(req)
        if h.kind == "lock":
            return {"held": bool(h.obj.held())}
        if h.kind == "multi":
            return {"held": all(part.held() for part in h.obj.locks)}
        return {"held": not h.obj.is_lost()}

    def op_close(self, req: Dict[str, Any]) -> None:
        c = self.client
        if c is None:
            return
        close = getattr(c, "close", None)  # the client's own, where it has one
        if close is None:
            close = c.redis.close  # what the README's quick start closes
        close()


def run_sync() -> None:
    out = Out()
    drv = SyncDriver(out)
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        if req.get("op") == "exit":
            out.reply(req.get("id"))
            return  # nothing is closed: the process must end by itself
        drv.dispatch(req)


# ---------------------------------------------------------------------------
# asyncio and glide: dlock.aio.Client on redis.asyncio.Redis or on GLIDE


class AsyncDriver:
    def __init__(self, out: Out, flavour: str) -> None:
        self.out = out
        self.flavour = flavour
        self.client: Any = None
        self.glide: Any = None  # the GLIDE client this driver made
        self.opts: Dict[str, Any] = {}
        self.handles: Dict[str, Handle] = {}
        self.queues: Dict[str, "asyncio.Queue[Dict[str, Any]]"] = {}
        self.tasks: "set[asyncio.Task[Any]]" = set()

    def _task(self, coro: Any) -> None:
        t = asyncio.ensure_future(coro)
        self.tasks.add(t)
        t.add_done_callback(self.tasks.discard)

    def dispatch(self, req: Dict[str, Any]) -> None:
        if req.get("op") in HANDLE_OPS and isinstance(req.get("handle"), str):
            q = self.queues.get(req["handle"])
            if q is None:
                q = self.queues[req["handle"]] = asyncio.Queue()
                self._task(self._worker(q))
            q.put_nowait(req)
        else:
            self._task(self.serve(req))

    async def _worker(self, q: "asyncio.Queue[Dict[str, Any]]") -> None:
        while True:
            await self.serve(await q.get())

    async def serve(self, req: Dict[str, Any]) -> None:
        rid = req.get("id")
        fn = getattr(self, f"op_{req.get('op')}", None)
        try:
            if fn is None:
                raise Unsupported(f"unknown op {req.get('op')!r}")
            self.out.reply(rid, await fn(req))
        except asyncio.CancelledError:
            raise  # the driver is ending (exit): no answer
        except BaseException as e:  # noqa: BLE001 - every failure is an answer
            self.out.error(rid, e)

    def _watch(self, handle: str, signal: Any) -> None:
        async def wait() -> None:
            await signal.wait()
            self.out.lost(handle, signal.reason)

        self._task(wait())

    def _client(self) -> Any:
        if self.client is None:
            raise Refused("no open client")
        return self.client

    async def op_open(self, req: Dict[str, Any]) -> None:
        opts = dict(req.get("options") or {})
        ckw = client_kwargs(opts, self.flavour)
        timeout = ms(opts.get("transport_timeout_ms"))
        glide = None
        if self.flavour == "glide":
            from glide import GlideClient, GlideClientConfiguration, NodeAddress

            u = urlparse(req["url"])
            cfg = GlideClientConfiguration(
                [NodeAddress(u.hostname or "127.0.0.1", u.port or 6379)],
                request_timeout=None if timeout is None else int(timeout * 1000),
            )
            glide = await GlideClient.create(cfg)
            transport: Any = importlib.import_module("dlock.glide").GlideRedis(glide)
        else:
            rkw: Dict[str, Any] = {}
            if timeout is not None:
                rkw["socket_timeout"] = timeout
            transport = redis.asyncio.Redis.from_url(req["url"], **rkw)
        try:
            client = dlock.aio.Client(transport, **ckw)
        except BaseException:
            await transport.aclose()
            if glide is not None:
                await glide.close()
            raise
        self.client, self.glide, self.opts = client, glide, opts

    async def op_acquire(self, req: Dict[str, Any]) -> Dict[str, Any]:
        lock = make_lock(self._client(), req, self.opts)
        if not await lock.acquire(**acquire_kwargs(req)):
            raise not_granted(req, f"{req.get('kind', 'mutex')} {req['key']!r}")
        h = self.handles[req["handle"]] = Handle("lock", lock, lock.lost)
        self._watch(req["handle"], h.signal)
        return {"token": lock.token}

    async def op_acquire_multi(self, req: Dict[str, Any]) -> Dict[str, Any]:
        c = self._client()
        locks = [c.lock(k, **lock_kwargs(req, self.opts)) for k in req["keys"]]
        m = dlock.aio.MultiLock(locks)
        kw = acquire_kwargs(req)
        if not await m.acquire(timeout=kw["timeout"], lease=kw["lease"]):
            raise not_granted(req, f"MultiLock {req['keys']!r}")
        h = self.handles[req["handle"]] = Handle("multi", m, m.lost)
        self._watch(req["handle"], h.signal)
        return {"tokens": m.tokens}

    async def op_campaign(self, req: Dict[str, Any]) -> Dict[str, Any]:
        if self.flavour == "glide":
            raise Unsupported("the Election recipe needs a redis-py client: the GLIDE adapter "
                              "refuses it (clients/python/README.md, Valkey GLIDE)")
        from dlock.aio_recipes import Election

        e = Election(self._client(), req["name"])
        term = await e.campaign(timeout=ms(req.get("wait_ms") or 0))
        if term is None:
            raise not_granted(req, f"the election {req['name']!r}")
        if req.get("value") is not None:
            await term.proclaim(req["value"])
        h = self.handles[req["handle"]] = Handle("term", term, term.lost)
        self._watch(req["handle"], h.signal)
        return {"key": e.name}

    def _handle(self, req: Dict[str, Any]) -> Handle:
        h = self.handles.get(req["handle"])
        if h is None:
            raise Refused(f"handle {req['handle']!r} never held")
        return h

    async def op_unlock(self, req: Dict[str, Any]) -> Dict[str, Any]:
        h = self._handle(req)
        outcome = await (h.obj.resign() if h.kind == "term" else h.obj.release())
        return {"result": result_of(outcome)}

    async def op_held(self, req: Dict[str, Any]) -> Dict[str, Any]:
        h = self._handle(req)
        if h.kind == "lock":
            return {"held": bool(h.obj.held())}
        if h.kind == "multi":
            return {"held": all(part.held() for part in h.obj.locks)}
        return {"held": not h.obj.is_lost()}

    async def op_close(self, req: Dict[str, Any]) -> None:
        c = self.client
        if c is None:
            return
        close = getattr(c, "aclose", None) or getattr(c, "close", None)
        if close is not None:  # the client's own, where it has one
            done = close()
            if inspect.isawaitable(done):
                await done
        else:  # what the README's quick start closes
            await c.redis.aclose()
        if self.glide is not None:
            await self.glide.close()


async def run_async(flavour: str) -> None:
    out = Out()
    drv = AsyncDriver(out, flavour)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 20)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while True:
        line = await reader.readline()
        if not line:
            return
        if not line.strip():
            continue
        req = json.loads(line)
        if req.get("op") == "exit":
            out.reply(req.get("id"))
            return  # nothing is closed: the process must end by itself
        drv.dispatch(req)


def check(flavour: str) -> int:
    if flavour == "glide":
        try:
            import glide  # noqa: F401
        except ImportError as e:
            print(f"python-glide: valkey-glide is not installed ({e}): "
                  "pip install valkey-glide (scripts/deps.sh python does)", file=sys.stderr)
            return 127
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--flavour", choices=FLAVOURS, required=True)
    p.add_argument("--check", action="store_true",
                   help="exit 127 when the flavour's transport is not installed")
    a = p.parse_args(argv)
    if a.check:
        return check(a.flavour)
    if a.flavour == "sync":
        run_sync()
    else:
        asyncio.run(run_async(a.flavour))
    return 0


if __name__ == "__main__":
    sys.exit(main())
