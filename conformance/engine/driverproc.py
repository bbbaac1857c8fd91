"""One driver process of a scenario run, and the JSON Lines protocol with it.

Every line the driver writes is stamped with the engine's monotonic clock the moment it
is read — the figures (lead, lateness) are differences of these stamps and of the
engine's own acts. The driver's stderr is kept (its tail goes into failure reports, the
whole of it into the run's log directory)."""

from __future__ import annotations

import asyncio
import collections
import json
import os
import signal
import time
from pathlib import Path
from typing import Any, Deque, Dict, List, Optional, Tuple, TypeAlias

from . import procs

#: Longest protocol line read (a reply with a long message, say).
LINE_LIMIT = 1 << 20


#: A reply to come: its arrival instant and the reply.
Reply: TypeAlias = "asyncio.Future[Tuple[float, Dict[str, Any]]]"


class DriverGone(Exception):
    """The driver process ended (or closed its stdout) while a reply was awaited."""


class Event:
    __slots__ = ("at", "body")

    def __init__(self, at: float, body: Dict[str, Any]) -> None:
        self.at = at
        self.body = body


class DriverProcess:
    def __init__(self, argv: List[str], cwd: Path, env: Dict[str, str], log_dir: Path) -> None:
        self.argv = argv
        self.cwd = cwd
        self.env = env
        self.log_dir = log_dir
        self.proc: Optional[asyncio.subprocess.Process] = None
        self._ids = 0
        self._pending: Dict[int, Reply] = {}
        self.events: Dict[str, List[Event]] = collections.defaultdict(list)
        self._changed = asyncio.Event()
        #: What the driver did against the protocol (reported as a failure).
        self.violations: List[str] = []
        self.stderr_tail: Deque[str] = collections.deque(maxlen=40)
        self._stderr_file = open(log_dir / "driver.stderr", "w", encoding="utf-8",
                                 errors="replace")
        self._tasks: List["asyncio.Task[None]"] = []
        self.exited_at: Optional[float] = None
        self.returncode: Optional[int] = None

    async def start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            *self.argv, cwd=self.cwd, env=self.env, stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            start_new_session=True, limit=LINE_LIMIT,
        )
        procs.register(self.proc.pid, self.argv[0])
        self._tasks = [
            asyncio.create_task(self._read_stdout()),
            asyncio.create_task(self._read_stderr()),
            asyncio.create_task(self._watch_exit()),
        ]

    # -- reading ---------------------------------------------------------------

    async def _read_stdout(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        while True:
            try:
                line = await self.proc.stdout.readline()
            except (ValueError, asyncio.LimitOverrunError) as e:
                self.violations.append(f"a stdout line over {LINE_LIMIT} bytes: {e}")
                continue
            at = time.monotonic()
            if not line:
                break
            self._take(at, line.decode("utf-8", errors="replace").strip())
        self._fail_pending(DriverGone("the driver closed its stdout"))

    def _take(self, at: float, text: str) -> None:
        if not text:
            return
        try:
            msg = json.loads(text)
        except json.JSONDecodeError:
            self.violations.append(f"not a JSON line on stdout: {text[:200]!r}")
            return
        if not isinstance(msg, dict):
            self.violations.append(f"not a JSON object on stdout: {text[:200]!r}")
        elif "event" in msg:
            self._event(at, msg)
        elif "id" in msg:
            fut = self._pending.pop(msg["id"], None) if isinstance(msg["id"], int) else None
            if fut is None:
                self.violations.append(f"a reply to no pending request: {text[:200]}")
            elif not fut.done():
                fut.set_result((at, msg))
        else:
            self.violations.append(f"neither a reply nor an event: {text[:200]}")

    def _event(self, at: float, msg: Dict[str, Any]) -> None:
        handle = msg.get("handle")
        if msg.get("event") != "lost" or not isinstance(handle, str):
            self.violations.append(f"unknown event {json.dumps(msg)[:200]}")
            return
        if self.events.get(handle):
            self.violations.append(
                f"a second lost event for handle {handle!r} (at most one per handle): "
                f"{json.dumps(msg)[:200]}"
            )
            return
        self.events[handle].append(Event(at, msg))
        self._changed.set()

    async def _read_stderr(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        while True:
            try:
                line = await self.proc.stderr.readline()
            except (ValueError, asyncio.LimitOverrunError):
                continue
            if not line:
                break
            text = line.decode("utf-8", errors="replace").rstrip("\n")
            self.stderr_tail.append(text)
            self._stderr_file.write(text + "\n")
            self._stderr_file.flush()

    async def _watch_exit(self) -> None:
        assert self.proc is not None
        self.returncode = await self.proc.wait()
        self.exited_at = time.monotonic()
        procs.unregister(self.proc.pid)
        self._changed.set()

    def _fail_pending(self, e: BaseException) -> None:
        pending, self._pending = self._pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(e)

    # -- requests --------------------------------------------------------------

    def send(self, op: str, fields: Dict[str, Any]) -> Tuple[float, "Reply"]:
        """Writes one request; the instant it was written and the future of its reply
        (``(arrival, reply)``)."""
        assert self.proc is not None and self.proc.stdin is not None
        self._ids += 1
        rid = self._ids
        fut: Reply = asyncio.get_running_loop().create_future()
        fut.add_done_callback(_retrieved)  # a reply nobody awaits any more may fail quietly
        if self.returncode is not None or self.proc.stdin.is_closing():
            fut.set_exception(DriverGone("the driver has exited"))
            return time.monotonic(), fut
        self._pending[rid] = fut
        body = dict(fields)
        body["id"] = rid
        body["op"] = op
        self.proc.stdin.write((json.dumps(body) + "\n").encode())
        return time.monotonic(), fut

    async def wait_event(self, handle: str, timeout: float) -> Optional[Event]:
        """The ``lost`` event of ``handle`` (waits at most ``timeout`` s for it)."""
        deadline = time.monotonic() + timeout
        while True:
            got = self.events.get(handle)
            if got:
                return got[0]
            left = deadline - time.monotonic()
            if left <= 0 or self.returncode is not None:
                return None
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), left)
            except asyncio.TimeoutError:
                pass

    async def wait_exit(self, timeout: float) -> Optional[float]:
        """The instant the process ended (waits at most ``timeout`` s)."""
        assert self.proc is not None
        try:
            await asyncio.wait_for(asyncio.shield(self._tasks[2]), timeout)
        except asyncio.TimeoutError:
            return None
        return self.exited_at

    # -- the end ---------------------------------------------------------------

    async def stop(self) -> None:
        """Ends the driver: its stdin closed, then SIGTERM to its process group after
        2 s, SIGKILL after 5 s more (by PID). Its stderr is read to the end."""
        if self.proc is None:
            return
        try:
            if self.proc.stdin is not None and not self.proc.stdin.is_closing():
                self.proc.stdin.close()
        except (OSError, RuntimeError):
            pass
        for sig, wait in ((None, 2.0), (signal.SIGTERM, 5.0), (signal.SIGKILL, 10.0)):
            if self.returncode is not None:
                break
            if sig is not None:
                procs.signal_group(self.proc.pid, sig)
            await self.wait_exit(wait)
        # What the driver left in its process group goes too.
        procs.signal_group(self.proc.pid, signal.SIGKILL)
        procs.unregister(self.proc.pid)
        for t in self._tasks:
            try:
                await asyncio.wait_for(t, 2.0)
            except (asyncio.TimeoutError, asyncio.CancelledError, Exception):  # noqa: BLE001
                t.cancel()
        self._fail_pending(DriverGone("the driver was stopped"))
        self._stderr_file.close()


def _retrieved(fut: "asyncio.Future[Any]") -> None:
    if not fut.cancelled():
        fut.exception()


def environment(extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    if extra:
        env.update(extra)
    return env
