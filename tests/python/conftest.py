"""pytest fixtures for the dlock Python tests: a real redis-server with the module.

Each test gets its own redis-server on a free loopback port, in a fresh temp dir,
started as
    redis-server --port P --bind 127.0.0.1 --dir TMP --save '' --loadmodule MODULE
where MODULE is $DLOCK_MODULE or ../../target/release/libdlock.so (relative to this
file). The server is stopped by PID at teardown, also when the test failed.
$REDIS_SERVER overrides the redis-server binary.
"""

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import redis

HERE = Path(__file__).resolve().parent
START_TIMEOUT = 20.0  # s: slow, noisy 2-core CI machines
# Read timeout of every client: longer than any WAIT a test uses.
SOCKET_TIMEOUT = 30.0


def server_binary() -> str:
    """The server binary: $REDIS_SERVER (as for the Rust and Node tests) or redis-server."""
    return os.environ.get("REDIS_SERVER") or "redis-server"


def pytest_report_header(config):
    try:
        out = subprocess.run([server_binary(), "--version"], capture_output=True,
                             text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError) as e:
        out = f"cannot run it: {e}"
    return f"server: {server_binary()} ({out})"


def module_path() -> Path:
    env = os.environ.get("DLOCK_MODULE")
    path = Path(env) if env else HERE / ".." / ".." / "target" / "release" / "libdlock.so"
    path = path.resolve()
    if not path.is_file():
        pytest.fail(
            f"dlock module not found at {path}: run `cargo build --release` "
            "(or `make test`) first, or set DLOCK_MODULE",
            pytrace=False,
        )
    return path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One redis-server process with the dlock module loaded."""

    def __init__(self, module: Path, extra_args=()):
        self.module = module
        self.extra_args = list(extra_args)
        self.proc = None
        self.port = 0
        self.dir = Path(tempfile.mkdtemp(prefix="dlock-py-"))

    @property
    def log_path(self) -> Path:
        return self.dir / "redis.log"

    def log_tail(self, n: int = 30) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no redis.log)"
        return "\n".join(lines[-n:])

    def start(self) -> None:
        binary = server_binary()
        last = ""
        for _ in range(10):  # the free port may be taken before redis binds it
            self.port = free_port()
            args = [
                binary,
                "--port", str(self.port),
                "--bind", "127.0.0.1",
                "--dir", str(self.dir),
                "--save", "",
                "--appendonly", "no",
                "--daemonize", "no",
                "--logfile", str(self.log_path),
                "--loadmodule", str(self.module),
                *self.extra_args,
            ]
            try:
                self.proc = subprocess.Popen(
                    args, cwd=self.dir, stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                )
            except FileNotFoundError:
                pytest.fail(
                    f"cannot run {binary}: install redis-server (make deps)", pytrace=False
                )
            if self._wait_ready():
                return
            last = self.log_tail()
            self.stop()
            if "Address already in use" not in last:
                break
            self.log_path.unlink(missing_ok=True)
        raise RuntimeError(f"redis-server did not start:\n{' '.join(args)}\n{last}")

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                r = redis.Redis(host="127.0.0.1", port=self.port, protocol=2,
                                socket_timeout=5, socket_connect_timeout=2)
                try:
                    # Our own process, not another one that grabbed the port.
                    info = r.info("server")
                    if info.get("process_id") == self.proc.pid:
                        return True
                finally:
                    r.close()
            except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError):
                pass
            time.sleep(0.02)
        return False

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()  # SIGTERM to our PID only
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.proc = None

    def client(self, **kwargs) -> redis.Redis:
        kwargs.setdefault("socket_timeout", SOCKET_TIMEOUT)
        kwargs.setdefault("socket_connect_timeout", 10)
        kwargs.setdefault("protocol", 2)
        return redis.Redis(host="127.0.0.1", port=self.port, **kwargs)

    def cleanup(self) -> None:
        self.stop()
        if not os.environ.get("DLOCK_KEEP_TEST_DIRS"):
            shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def server(request):
    """A fresh redis-server with the dlock module; stopped by PID at teardown."""
    srv = Server(module_path())
    try:
        srv.start()
        yield srv
        # A crash of the server during the test is a failure of the test.
        crashed = srv.proc is not None and srv.proc.poll() is not None
        if crashed:
            pytest.fail(f"redis-server died during the test:\n{srv.log_tail()}")
    finally:
        srv.cleanup()


@pytest.fixture
def r(server):
    """A RESP2 client (flat arrays, bytes) on the test's server."""
    c = server.client()
    yield c
    c.close()
