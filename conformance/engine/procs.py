"""The processes the engine starts: servers (with or without the module) and the one
Toxiproxy. Each runs in a process group of its own, on a free loopback port, in a temp
dir of its own, and is stopped by its PID (the group's id) — also when a run fails or
the engine is interrupted (:func:`stop_all`)."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

import redis.asyncio

#: Name every connection of the engine carries (CLIENT SETNAME), so that the driver's
#: connections can be told apart in CLIENT LIST.
ENGINE_NAME = "dlock-conformance-engine"

START_TIMEOUT = 20.0  # s: slow, shared 2-core machines

#: Every process group started and not known to have ended (its leader's PID): what
#: stop_all() stops at the end.
_LIVE: Dict[int, str] = {}


def register(pid: int, what: str) -> None:
    _LIVE[pid] = what


def unregister(pid: int) -> None:
    _LIVE.pop(pid, None)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spawn(args: List[str], *, cwd: Path, log: Path, env: Optional[Dict[str, str]] = None,
          stdin: int = subprocess.DEVNULL) -> "subprocess.Popen[bytes]":
    """Starts ``args`` in a new process group, stdout and stderr to ``log``."""
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            args, cwd=cwd, stdin=stdin, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True, env=env,
        )
    register(proc.pid, args[0])
    return proc


def stop(proc: Optional["subprocess.Popen[bytes]"], grace: float = 5.0) -> None:
    """Stops a process this engine started, and its group, by PID: SIGCONT (a stopped
    one), SIGTERM, then SIGKILL after ``grace`` seconds."""
    if proc is None:
        return
    if proc.poll() is None:
        signal_group(proc.pid, signal.SIGCONT)
        signal_group(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            signal_group(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    # Whatever the process left in its group (a shell's child) goes too.
    signal_group(proc.pid, signal.SIGKILL)
    unregister(proc.pid)


def signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def stop_all() -> None:
    """Stops every process group still registered (the engine is ending): SIGTERM, and
    SIGKILL to what is left half a second later."""
    pids = list(_LIVE)
    for pid in pids:
        signal_group(pid, signal.SIGCONT)
        signal_group(pid, signal.SIGTERM)
    if pids:
        time.sleep(0.5)
    for pid in pids:
        signal_group(pid, signal.SIGKILL)
        unregister(pid)


def version_of(binary: str) -> str:
    """``Redis 7.0.15`` / ``Valkey 9.1.2`` from ``binary --version``."""
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True,
                             timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"? ({e})"
    words = out.split()
    name = "Valkey" if out.lower().startswith("valkey") else "Redis"
    for w in words:
        if w.startswith("v="):
            return f"{name} {w[2:]}"
    return out.strip() or "?"


class Server:
    """One redis-server/valkey-server on a free loopback port in a temp dir of its own,
    with the dlock module loaded (or not: ``module=None``)."""

    def __init__(self, binary: str, module: Optional[Path], workdir: Path, name: str) -> None:
        self.binary = binary
        self.module = module
        self.dir = workdir / name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = 0
        self.proc: Optional["subprocess.Popen[bytes]"] = None

    @property
    def log_path(self) -> Path:
        return self.dir / "server.log"

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def log_tail(self, n: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no server log)"

    def _args(self) -> List[str]:
        args = [
            self.binary, "--port", str(self.port), "--bind", "127.0.0.1",
            "--dir", str(self.dir), "--save", "", "--appendonly", "no",
            "--daemonize", "no", "--logfile", str(self.log_path),
        ]
        if self.module is not None:
            args += ["--loadmodule", str(self.module)]
        return args

    async def start(self, same_port: bool = False) -> None:
        """Starts the server (on its old port with ``same_port``: a restart)."""
        last = ""
        for _ in range(10):  # a free port may be taken before the server binds it
            if not same_port or not self.port:
                self.port = free_port()
            try:
                self.proc = spawn(self._args(), cwd=self.dir, log=self.dir / "stdout.log")
            except OSError as e:
                raise RuntimeError(f"cannot run {self.binary}: {e}") from e
            if await self._ready():
                return
            last = self.log_tail()
            stop(self.proc)
            self.proc = None
            if "already in use" not in last:
                break
            await asyncio.sleep(0.2)
        raise RuntimeError(
            f"{self.binary} did not start on port {self.port} within {START_TIMEOUT:.0f} s; "
            f"its log ends:\n{last}"
        )

    async def _ready(self) -> bool:
        assert self.proc is not None
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            r = redis.asyncio.Redis(host="127.0.0.1", port=self.port, socket_timeout=5,
                                    socket_connect_timeout=2)
            try:
                if (await r.info("server")).get("process_id") == self.proc.pid:
                    return True
            except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError, OSError):
                pass
            finally:
                await r.aclose()
            await asyncio.sleep(0.02)
        return False

    def stop(self) -> None:
        stop(self.proc)
        self.proc = None

    def client(self, **kw: object) -> "redis.asyncio.Redis":
        """A client of the engine's own (named :data:`ENGINE_NAME`), direct."""
        kw.setdefault("socket_timeout", 10)
        kw.setdefault("socket_connect_timeout", 5)
        return redis.asyncio.Redis(host="127.0.0.1", port=self.port,
                                   client_name=ENGINE_NAME, **kw)  # type: ignore[arg-type]


def new_workdir(prefix: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=prefix))


def remove_dir(path: Path) -> None:
    if not os.environ.get("DLOCK_KEEP_TEST_DIRS"):
        shutil.rmtree(path, ignore_errors=True)
