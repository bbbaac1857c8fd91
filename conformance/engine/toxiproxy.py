"""Toxiproxy: one server per engine run (a free loopback port, stopped by PID), one proxy
per scenario run, driven through its HTTP API with the standard library (each call in a
thread: the API answers in milliseconds, but a call must never stall the event loop).

A silent partition is the ``timeout`` toxic with timeout 0 on both streams: nothing
passes and nothing is closed. Removing it closes the connections it held (Toxiproxy's
cleanup of that toxic), as a healed network whose middleboxes forgot the flows would."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Dict, List, Optional

from . import procs

#: Bound on one call of the HTTP API (s).
API_TIMEOUT = 10.0


class ToxiproxyError(Exception):
    pass


class Toxiproxy:
    def __init__(self, binary: str, workdir: Path) -> None:
        self.binary = binary
        self.dir = workdir
        self.port = 0
        self.proc: Optional["subprocess.Popen[bytes]"] = None
        self._names = 0

    @property
    def log_path(self) -> Path:
        return self.dir / "toxiproxy.log"

    def start(self) -> None:
        env = dict(os.environ)
        env.setdefault("LOG_LEVEL", "warn")  # it logs every connection at info
        last = ""
        for _ in range(5):
            self.port = procs.free_port()
            self.proc = procs.spawn(
                [self.binary, "-host", "127.0.0.1", "-port", str(self.port)],
                cwd=self.dir, log=self.log_path, env=env,
            )
            deadline = time.monotonic() + procs.START_TIMEOUT
            while time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    self._call("GET", "/version")
                    return
                except ToxiproxyError as e:
                    last = str(e)
                    time.sleep(0.05)
            procs.stop(self.proc)
            self.proc = None
        raise ToxiproxyError(
            f"toxiproxy ({self.binary}) did not answer on 127.0.0.1:{self.port}: {last}; "
            f"its log: {self.log_path}"
        )

    def stop(self) -> None:
        procs.stop(self.proc)
        self.proc = None

    def _call(self, method: str, path: str, body: Optional[Dict[str, Any]] = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}", data=data, method=method,
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=API_TIMEOUT) as resp:
                text = resp.read().decode()
        except urllib.error.HTTPError as e:
            raise ToxiproxyError(
                f"toxiproxy {method} {path}: HTTP {e.code} {e.read().decode(errors='replace')}"
            ) from e
        except (urllib.error.URLError, OSError) as e:
            raise ToxiproxyError(f"toxiproxy {method} {path}: {e}") from e
        if not text.strip():
            return None
        try:
            return json.loads(text)
        except ValueError:
            # /version of a build without a release tag answers plain text ("git").
            return text.strip()

    async def call(self, method: str, path: str, body: Optional[Dict[str, Any]] = None) -> Any:
        return await asyncio.to_thread(self._call, method, path, body)

    async def proxy(self, upstream_port: int) -> "Proxy":
        """A new proxy on a free port to ``127.0.0.1:upstream_port``."""
        self._names += 1
        name = f"run{self._names}"
        got = await self.call("POST", "/proxies", {
            "name": name, "listen": "127.0.0.1:0",
            "upstream": f"127.0.0.1:{upstream_port}", "enabled": True,
        })
        listen = str(got["listen"])
        return Proxy(self, name, int(listen.rsplit(":", 1)[1]))


class Proxy:
    def __init__(self, api: Toxiproxy, name: str, port: int) -> None:
        self.api = api
        self.name = name
        self.port = port

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    async def _toxic(self, kind: str, stream: str, attributes: Dict[str, Any]) -> None:
        await self.api.call("POST", f"/proxies/{self.name}/toxics", {
            "name": f"{kind}-{stream}", "type": kind, "stream": stream,
            "toxicity": 1.0, "attributes": attributes,
        })

    async def partition(self) -> None:
        """A silent partition: nothing passes either way, nothing is closed."""
        await asyncio.gather(self._toxic("timeout", "upstream", {"timeout": 0}),
                             self._toxic("timeout", "downstream", {"timeout": 0}))

    async def latency(self, ms: int) -> None:
        """``ms`` of latency each way."""
        await asyncio.gather(self._toxic("latency", "upstream", {"latency": ms, "jitter": 0}),
                             self._toxic("latency", "downstream", {"latency": ms, "jitter": 0}))

    async def refuse(self) -> None:
        """Disables the proxy: its connections close, new ones are refused."""
        await self.api.call("POST", f"/proxies/{self.name}", {"enabled": False})

    async def heal(self) -> None:
        """Removes every toxic and enables the proxy again."""
        toxics: List[Dict[str, Any]] = await self.api.call(
            "GET", f"/proxies/{self.name}/toxics") or []
        await asyncio.gather(*(
            self.api.call("DELETE", f"/proxies/{self.name}/toxics/{t['name']}") for t in toxics
        ))
        state = await self.api.call("GET", f"/proxies/{self.name}")
        if not state.get("enabled", True):
            await self.api.call("POST", f"/proxies/{self.name}", {"enabled": True})

    async def delete(self) -> None:
        await self.api.call("DELETE", f"/proxies/{self.name}")
