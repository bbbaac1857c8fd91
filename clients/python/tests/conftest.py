"""Fixtures for the dlock package's tests: real redis-server processes started here.

Every server runs on a free loopback port in its own temp dir:
    $REDIS_SERVER (default redis-server) --port P --bind 127.0.0.1 --loadmodule $DLOCK_MODULE
($DLOCK_MODULE defaults to <repo>/target/release/libdlock.so) and is stopped by PID at
teardown, also when the test failed (a SIGSTOPped one is continued first).

Async tests: a test written as ``async def`` runs in ``asyncio.run`` (no plugin needed).
The ``api`` fixture runs one behaviour suite over both flavours (see dlock_testkit.py).
"""

from __future__ import annotations

import asyncio
import inspect
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

import pytest
import redis

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent.parent
sys.path.insert(0, str(HERE.parent / "src"))  # test the source tree, installed or not
sys.path.insert(0, str(HERE))

START_TIMEOUT = 20.0  # s: slow, shared 2-core machines
TEST_TIMEOUT = 90.0  # s: one test, at most (a hang must fail, not stall the run)


def module_path() -> Path:
    env = os.environ.get("DLOCK_MODULE")
    path = Path(env) if env else REPO / "target" / "release" / "libdlock.so"
    path = path.resolve()
    if not path.is_file():
        pytest.fail(
            f"dlock module not found at {path}: run `cargo build --release` first, "
            "or set DLOCK_MODULE",
            pytrace=False,
        )
    return path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """One redis-server process with the dlock module loaded."""

    def __init__(self, extra_args: Optional[List[str]] = None, cluster: bool = False,
                 module: bool = True) -> None:
        self.extra_args = list(extra_args or [])
        self.cluster = cluster
        self.module = module
        self.proc: Optional[subprocess.Popen[bytes]] = None
        self.port = 0
        self.bus_port = 0
        self.paused = False
        self.killed = False
        self.dir = Path(tempfile.mkdtemp(prefix="dlock-pyclient-"))

    @property
    def log_path(self) -> Path:
        return self.dir / "redis.log"

    def log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no redis.log)"

    def start(self) -> "Server":
        binary = os.environ.get("REDIS_SERVER") or "redis-server"
        module = module_path() if self.module else None
        last = ""
        args: List[str] = []
        for _ in range(10):  # the free port may be taken before redis binds it
            self.port = free_port()
            args = [
                binary, "--port", str(self.port), "--bind", "127.0.0.1",
                "--dir", str(self.dir), "--save", "", "--appendonly", "no",
                "--daemonize", "no", "--logfile", str(self.log_path),
                "--repl-diskless-sync-delay", "0",
            ]
            if self.cluster:
                self.bus_port = free_port()
                while self.bus_port == self.port:
                    self.bus_port = free_port()
                args += [
                    "--cluster-enabled", "yes",
                    "--cluster-config-file", str(self.dir / f"nodes-{self.port}.conf"),
                    "--cluster-port", str(self.bus_port),
                ]
            if module is not None:
                args += ["--loadmodule", str(module)]
            args += self.extra_args
            try:
                self.proc = subprocess.Popen(
                    args, cwd=self.dir, stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                )
            except FileNotFoundError:
                pytest.fail(f"cannot run {binary}: install redis-server or set REDIS_SERVER",
                            pytrace=False)
            if self._wait_ready():
                return self
            last = self.log_tail()
            self.stop()
            if "Address already in use" not in last:
                break
            self.log_path.unlink(missing_ok=True)
        raise RuntimeError(f"redis-server did not start:\n{' '.join(args)}\n{last}")

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + START_TIMEOUT
        assert self.proc is not None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                r = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5,
                                socket_connect_timeout=2)
                try:
                    if r.info("server").get("process_id") == self.proc.pid:
                        return True
                finally:
                    r.close()
            except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError):
                pass
            time.sleep(0.02)
        return False

    # -- failures a test can cause -------------------------------------------------

    def pause(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        if self.proc is not None and self.paused:
            os.kill(self.proc.pid, signal.SIGCONT)
        self.paused = False

    def kill(self) -> None:
        assert self.proc is not None
        self.resume()
        self.proc.kill()
        self.proc.wait(timeout=10)
        self.killed = True

    def stop(self) -> None:
        if self.proc is None:
            return
        self.resume()
        if self.proc.poll() is None:
            self.proc.terminate()  # our PID only
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.proc = None

    def crashed(self) -> bool:
        return not self.killed and self.proc is not None and self.proc.poll() is not None

    def cleanup(self) -> None:
        self.stop()
        if not os.environ.get("DLOCK_KEEP_TEST_DIRS"):
            shutil.rmtree(self.dir, ignore_errors=True)

    def client(self, **kw: Any) -> "redis.Redis[Any]":
        kw.setdefault("socket_timeout", 30)
        kw.setdefault("socket_connect_timeout", 10)
        return redis.Redis(host="127.0.0.1", port=self.port, **kw)

    def has_command(self, name: str) -> bool:
        c = self.client()
        try:
            c.execute_command(name)  # no arguments: an arity error if it exists
        except redis.ResponseError as e:
            return "unknown command" not in str(e).lower()
        finally:
            c.close()
        return True

    def calls(self, command: str) -> int:
        """``calls`` of ``command`` in INFO commandstats."""
        c = self.client()
        try:
            stats = c.info("commandstats")
        finally:
            c.close()
        want = f"cmdstat_{command}".lower()
        return sum(int(v["calls"]) for k, v in stats.items() if k.lower() == want)


class Servers:
    """Starts servers on demand for one test and stops them all at its end."""

    def __init__(self) -> None:
        self.started: List[Server] = []

    def start(self, *extra: str, module: bool = True) -> Server:
        s = Server(list(extra), module=module)
        self.started.append(s)
        return s.start()

    def cleanup(self) -> List[str]:
        crashed = [f"port {s.port}:\n{s.log_tail()}" for s in self.started if s.crashed()]
        for s in self.started:
            s.cleanup()
        return crashed


@pytest.fixture
def servers() -> Iterator[Servers]:
    """A factory of fresh servers (``servers.start()``), all stopped at teardown."""
    ss = Servers()
    try:
        yield ss
        crashed = ss.cleanup()
        if crashed:
            pytest.fail("redis-server died during the test:\n" + "\n".join(crashed))
    finally:
        ss.cleanup()


@pytest.fixture
def server(servers: Servers) -> Server:
    """One fresh redis-server with the module."""
    return servers.start()


# -- a 3-master cluster, and a master with a replica ------------------------------


class Cluster:
    def __init__(self, masters: int = 3) -> None:
        self.nodes = [Server(cluster=True) for _ in range(masters)]

    def start(self) -> "Cluster":
        for n in self.nodes:
            n.start()
        ids = []
        for i, n in enumerate(self.nodes):
            c = n.client()
            ids.append(c.execute_command("CLUSTER", "MYID"))
            try:
                c.execute_command("CLUSTER", "SET-CONFIG-EPOCH", i + 1)
            except redis.ResponseError:
                pass
            first = i * 16384 // len(self.nodes)
            last = (i + 1) * 16384 // len(self.nodes) - 1
            c.execute_command("CLUSTER", "ADDSLOTSRANGE", first, last)
            c.close()
        c0 = self.nodes[0].client()
        for n in self.nodes[1:]:
            c0.execute_command("CLUSTER", "MEET", "127.0.0.1", n.port, n.bus_port)
        c0.close()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if all(self._healthy(n) for n in self.nodes):
                return self
            time.sleep(0.05)
        raise RuntimeError("cluster did not converge in 30 s")

    def _healthy(self, n: Server) -> bool:
        c = n.client(decode_responses=True)
        try:
            info = c.execute_command("CLUSTER", "INFO")
            if isinstance(info, bytes):
                info = info.decode()
            if "cluster_state:ok" not in str(info):
                return False
            nodes = c.execute_command("CLUSTER", "NODES")
            text = nodes if isinstance(nodes, str) else str(nodes)
            lines = [ln for ln in text.splitlines() if ln.strip()]
            return len(lines) == len(self.nodes) and "handshake" not in text and "fail" not in text
        except redis.RedisError:
            return False
        finally:
            c.close()

    def cleanup(self) -> None:
        for n in self.nodes:
            n.cleanup()


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """A 3-master cluster (module scope: it takes a few seconds to form)."""
    cl = Cluster(3)
    try:
        cl.start()
        yield cl
    finally:
        cl.cleanup()


@pytest.fixture
def replicated(servers: Servers) -> Iterator[Any]:
    """(master, replica) with the replication link up."""
    master = servers.start()
    replica = servers.start("--replicaof", "127.0.0.1", str(master.port))
    c = replica.client(decode_responses=True)
    deadline = time.monotonic() + START_TIMEOUT
    try:
        while c.info("replication").get("master_link_status") != "up":
            if time.monotonic() > deadline:
                raise RuntimeError("replica did not connect")
            time.sleep(0.02)
    finally:
        c.close()
    yield master, replica


# -- the flavour under test -----------------------------------------------------------


def _flavours() -> List[str]:
    """sync, async, and glide / glide-sync (the Valkey GLIDE adapters) when
    ``valkey-glide`` / ``valkey-glide-sync`` are installed and ``DLOCK_GLIDE`` is not
    ``0``."""
    out = ["sync", "async"]
    if os.environ.get("DLOCK_GLIDE", "1") != "0":
        import importlib.util

        if importlib.util.find_spec("glide") is not None:
            out.append("glide")
        if importlib.util.find_spec("glide_sync") is not None:
            out.append("glide-sync")
    return out


@pytest.fixture(params=_flavours())
def api(request: Any) -> Any:
    from dlock_testkit import Api

    return Api(request.param)


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: Any) -> Optional[bool]:
    """Runs ``async def`` tests in ``asyncio.run`` with a time limit."""
    fn = pyfuncitem.obj
    if not inspect.iscoroutinefunction(fn):
        return None
    args: Dict[str, Any] = {n: pyfuncitem.funcargs[n] for n in pyfuncitem._fixtureinfo.argnames}
    api = args.get("api")

    async def run() -> None:
        try:
            await asyncio.wait_for(fn(**args), TEST_TIMEOUT)
        finally:
            if api is not None:
                await api.aclose()

    asyncio.run(run())
    return True


# -- Redis Sentinel ---------------------------------------------------------------------


class SentinelServer(Server):
    """``redis-server <conf> --sentinel`` watching ``127.0.0.1:<master_port>`` as
    ``service`` (quorum 1, down after 1 s); stopped by PID like every server."""

    def __init__(self, master_port: int, service: str) -> None:
        super().__init__()
        self.master_port = master_port
        self.service = service

    def start(self) -> "SentinelServer":
        binary = os.environ.get("REDIS_SERVER") or "redis-server"
        for _ in range(10):
            self.port = free_port()
            conf = self.dir / "sentinel.conf"
            conf.write_text(
                f"port {self.port}\nbind 127.0.0.1\ndir {self.dir}\nlogfile {self.log_path}\n"
                f"sentinel monitor {self.service} 127.0.0.1 {self.master_port} 1\n"
                f"sentinel down-after-milliseconds {self.service} 1000\n"
                f"sentinel failover-timeout {self.service} 10000\n"
            )
            self.proc = subprocess.Popen(
                [binary, str(conf), "--sentinel"], cwd=self.dir, stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
            if self._wait_ready():
                return self
            last = self.log_tail()
            self.stop()
            if "Address already in use" not in last:
                raise RuntimeError(f"sentinel did not start:\n{last}")
        raise RuntimeError("sentinel did not start on a free port")

    def sentinel_client(self) -> "redis.Redis[Any]":
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=10,
                           decode_responses=True)

    def master_port_now(self) -> Optional[int]:
        c = self.sentinel_client()
        try:
            addr = c.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.service)
        except redis.RedisError:
            return None
        finally:
            c.close()
        return int(addr[1]) if addr else None

    def wait_replicas(self, n: int) -> None:
        """Until this Sentinel knows ``n`` replicas in good standing."""
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            c = self.sentinel_client()
            try:
                rs = c.execute_command("SENTINEL", "REPLICAS", self.service)
            except redis.RedisError:
                rs = []
            finally:
                c.close()
            maps = [r if isinstance(r, dict) else dict(zip(r[::2], r[1::2])) for r in rs]
            good = [r for r in maps
                    if r.get("flags") == "slave" and r.get("master-link-status") == "ok"]
            if len(good) >= n:
                return
            time.sleep(0.05)
        raise RuntimeError(f"sentinel never saw {n} good replicas:\n{self.log_tail()}")

    def failover(self) -> int:
        """``SENTINEL FAILOVER``; waits until another master is named and answers its port."""
        old = self.master_port_now()
        c = self.sentinel_client()
        try:
            c.execute_command("SENTINEL", "FAILOVER", self.service)
        finally:
            c.close()
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            now = self.master_port_now()
            if now is not None and now != old:
                return now
            time.sleep(0.05)
        raise RuntimeError(f"no failover:\n{self.log_tail()}")


def start_sentinel(servers: Servers, master_port: int, service: str = "dl") -> SentinelServer:
    """A Sentinel for the master at ``master_port``, stopped with ``servers``."""
    s = SentinelServer(master_port, service)
    servers.started.append(s)
    s.start()
    deadline = time.monotonic() + START_TIMEOUT
    while s.master_port_now() != master_port:
        if time.monotonic() > deadline:
            raise RuntimeError(f"sentinel does not name the master:\n{s.log_tail()}")
        time.sleep(0.05)
    return s


# -- Toxiproxy: real network faults between a client and a server ------------------------


def toxiproxy_binary() -> Optional[str]:
    """Toxiproxy's server: $TOXIPROXY_SERVER, else ``toxiproxy-server`` on PATH, else
    ``$(go env GOPATH)/bin/server`` (``go install
    github.com/Shopify/toxiproxy/v2/cmd/server@…``); None when none is there."""
    env = os.environ.get("TOXIPROXY_SERVER")
    if env:
        return env
    found = shutil.which("toxiproxy-server")
    if found:
        return found
    go = shutil.which("go") or ("/usr/local/go/bin/go" if os.path.exists("/usr/local/go/bin/go") else None)
    if go:
        try:
            gopath = subprocess.run([go, "env", "GOPATH"], capture_output=True, text=True,
                                    timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            gopath = ""
        path = Path(gopath) / "bin" / "server" if gopath else None
        if path is not None and path.is_file():
            return str(path)
    return None


class Proxy:
    """One Toxiproxy proxy in front of a server: ``port`` is where clients connect."""

    def __init__(self, tp: "Toxiproxy", name: str, port: int) -> None:
        self.tp = tp
        self.name = name
        self.port = port

    def partition(self) -> None:
        """A silent partition: Toxiproxy's ``timeout`` toxic with timeout 0, both ways
        (nothing passes, nothing is closed)."""
        for stream in ("upstream", "downstream"):
            self.tp.api("POST", f"/proxies/{self.name}/toxics", {
                "name": f"cut-{stream}", "type": "timeout", "stream": stream,
                "attributes": {"timeout": 0}})

    def latency(self, ms: int) -> None:
        """``ms`` of latency each way (Toxiproxy's ``latency`` toxic)."""
        for stream in ("upstream", "downstream"):
            self.tp.api("POST", f"/proxies/{self.name}/toxics", {
                "name": f"slow-{stream}", "type": "latency", "stream": stream,
                "attributes": {"latency": ms}})

    def heal(self) -> None:
        toxics = self.tp.api("GET", f"/proxies/{self.name}/toxics") or []
        for t in toxics:
            self.tp.api("DELETE", f"/proxies/{self.name}/toxics/{t['name']}")
        self.tp.api("POST", f"/proxies/{self.name}", {"enabled": True})

    def refuse(self) -> None:
        """Connections refused (the proxy stops listening; open ones are closed)."""
        self.tp.api("POST", f"/proxies/{self.name}", {"enabled": False})


class Toxiproxy:
    """A Toxiproxy server on a free loopback port, stopped by PID."""

    def __init__(self, binary: str) -> None:
        self.binary = binary
        self.proc: Optional[subprocess.Popen[bytes]] = None
        self.port = 0
        self._n = 0

    def start(self) -> "Toxiproxy":
        for _ in range(10):
            self.port = free_port()
            self.proc = subprocess.Popen(
                [self.binary, "-host", "127.0.0.1", "-port", str(self.port)],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
            deadline = time.monotonic() + START_TIMEOUT
            while time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    self.api("GET", "/version")
                    return self
                except OSError:
                    time.sleep(0.02)
            self.stop()
        raise RuntimeError(f"toxiproxy ({self.binary}) did not start")

    def api(self, method: str, path: str, body: Any = None) -> Any:
        import json
        import urllib.request

        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=data,
                                     method=method, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            raw = resp.read()
        try:
            return json.loads(raw) if raw.strip() else None
        except ValueError:  # /version answers plain text
            return raw.decode(errors="replace")

    def proxy(self, server: Server) -> Proxy:
        self._n += 1
        name = f"p{self._n}"
        got = self.api("POST", "/proxies", {"name": name, "listen": "127.0.0.1:0",
                                            "upstream": f"127.0.0.1:{server.port}",
                                            "enabled": True})
        return Proxy(self, name, int(got["listen"].rsplit(":", 1)[1]))

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()  # our PID only
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.proc = None


@pytest.fixture(scope="module")
def toxiproxy() -> Iterator[Toxiproxy]:
    """A Toxiproxy server for the module's tests (skipped, with the reason, when its
    binary is missing)."""
    binary = toxiproxy_binary()
    if binary is None:
        pytest.skip("Toxiproxy is not installed (set TOXIPROXY_SERVER, or `go install "
                    "github.com/Shopify/toxiproxy/v2/cmd/server@latest`)")
    tp = Toxiproxy(binary).start()
    try:
        yield tp
    finally:
        tp.stop()


@pytest.fixture
def proxied(server: Server, toxiproxy: Toxiproxy) -> Proxy:
    """A Toxiproxy proxy in front of ``server``."""
    return toxiproxy.proxy(server)
