"""Visibility (issue 23) through the package: DLOCK.INFO's new fields, scan, stats,
slowlog, per flavour; and ``python -m dlock top``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Set

import dlock
from dlock import _core
from dlock_testkit import eventually, require_command

SRC = Path(__file__).resolve().parent.parent / "src"


def _setup(server: Any) -> Any:
    r = server.client()
    r.execute_command("DLOCK.ACQUIRE", "m", "o", "PX", "60000")
    r.execute_command("DLOCK.FAIRACQUIRE", "f", "h", "PX", "60000")
    # A fair-lock owner that does not wait keeps a queued place: a contended lock.
    assert r.execute_command("DLOCK.FAIRACQUIRE", "f", "q", "PX", "60000") is None
    return r


async def _scan_all(c: Any, **kw: Any) -> Set[str]:
    seen: Set[str] = set()
    cursor = 0
    while True:
        cursor, keys = await c.scan(cursor, **kw)
        seen.update(k.decode() if isinstance(k, bytes) else k for k in keys)
        if cursor == 0:
            return seen


async def test_info_scan_stats_slowlog(api: Any, server: Any) -> None:
    require_command(server, "dlock.scan", "DLOCK.SCAN (issue 23)")
    r = _setup(server)
    c = api.client(server)
    info = await c.info("f")
    w = info["waiters"][0]
    assert w["position"] == 0 and w["blocked_by"] == [b"h"] and w["waited_ms"] >= 0
    assert info["holders"][0]["held_ms"] >= 0
    assert await _scan_all(c) == {"m", "f"}
    assert await _scan_all(c, contended=True) == {"f"}
    assert await _scan_all(c, kind="mutex", count=5) == {"m"}
    assert await _scan_all(c, owner="q", match="f*") == {"f"}
    # Holds of exactly 100 ms (their lease ends).
    for i in range(3):
        r.execute_command("DLOCK.ACQUIRE", f"e{i}", "o", "PX", "100")
    await eventually(lambda: r.exists("e0", "e1", "e2") == 0)
    stats = await c.stats()
    assert set(stats) == {"mutex", "rw", "fair", "semaphore", "latch"}
    p50 = _core.percentile(stats["mutex"]["holds"], 50)
    assert p50 is not None and 100_000 <= p50 <= 100_000 * 17 // 16, stats
    await c.stats_reset()
    assert all(not h for k in (await c.stats()).values() for h in k.values())
    r.config_set("dlock.slowlog-hold-ms", 0)
    r.execute_command("DLOCK.ACQUIRE", "s", "o")
    r.execute_command("DLOCK.RELEASE", "s", "o")
    log = await c.slowlog_get(1)
    assert [(e["phase"], e["key"], e["outcome"]) for e in log] == [("hold", b"s", "released")]
    assert await c.slowlog_len() >= 1
    await c.slowlog_reset()
    assert await c.slowlog_len() == 0


def test_scan_iter_sync(server: Any) -> None:
    require_command(server, "dlock.scan", "DLOCK.SCAN (issue 23)")
    r = _setup(server)
    c = dlock.Client(r)
    assert {k.decode() for k in c.scan_iter(contended=True)} == {"f"}


def test_top_shows_the_contended_locks(server: Any) -> None:
    require_command(server, "dlock.scan", "DLOCK.SCAN (issue 23)")
    from dlock import __main__ as top

    r = _setup(server)
    screen = top.render(r, dlock.Client(r), 10)
    lines = screen.splitlines()
    assert lines[0].startswith("dlock top"), screen
    row = next(line for line in lines if line.startswith("f "))
    assert "fair" in row and " h " in f" {row} " and row.rstrip().endswith("h"), screen
    assert not any(line.startswith("m ") for line in lines), screen
    env = dict(os.environ, PYTHONPATH=str(SRC))
    out = subprocess.run(
        [sys.executable, "-m", "dlock", "top", "--once", "--url", f"redis://127.0.0.1:{server.port}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert "dlock top" in out.stdout and "\nf " in out.stdout, out.stdout


def _top(port: int) -> Any:
    env = dict(os.environ, PYTHONPATH=str(SRC))
    return subprocess.run(
        [sys.executable, "-m", "dlock", "top", "--once", "--url", f"redis://127.0.0.1:{port}"],
        env=env, capture_output=True, text=True, timeout=60,
    )


def test_top_says_in_one_line_what_is_wrong(servers: Any) -> None:
    """A server that is down, or one without the module: one line saying so, no
    traceback (issue 45: a 50-line traceback whose last line had the hint)."""
    from conftest import free_port

    down = _top(free_port())
    assert down.returncode != 0
    out = (down.stdout + down.stderr).strip()
    assert "Traceback" not in out and len(out.splitlines()) == 1, out
    assert out.startswith("dlock top:") and "cannot reach" in out, out
    plain = servers.start(module=False)
    missing = _top(plain.port)
    assert missing.returncode != 0
    out = (missing.stdout + missing.stderr).strip()
    assert "Traceback" not in out and len(out.splitlines()) == 1, out
    assert "module" in out and "MODULE LOAD" in out, out


def test_top_shows_whole_owners(server: Any) -> None:
    """Two holders whose owners differ only at the end (two threads of one client):
    the HOLDERS column shows them whole (issue 45: cut at 22 characters, they looked
    the same)."""
    require_command(server, "dlock.scan", "DLOCK.SCAN (issue 23)")
    r = server.client()
    a, b = "0b5c6a2e-9d1f-4e77-8a44-1f2e3d4c5b6a:1", "0b5c6a2e-9d1f-4e77-8a44-1f2e3d4c5b6a:2"
    for o in (a, b):
        r.execute_command("DLOCK.RWACQUIRE", "doc", o, "READ", "PX", "60000")
    assert r.execute_command("DLOCK.FAIRACQUIRE", "f2", "h-" + a, "PX", "60000")
    assert r.execute_command("DLOCK.FAIRACQUIRE", "f2", "w-" + b, "PX", "60000") is None
    # A writer waits behind the two readers.
    import threading

    t = threading.Thread(target=lambda: server.client().execute_command(
        "DLOCK.RWACQUIRE", "doc", "writer", "WRITE", "PX", "1000", "WAIT", "3000"), daemon=True)
    t.start()
    from dlock import __main__ as top

    deadline = __import__("time").monotonic() + 10
    while not (dlock.Client(r).info("doc") or {}).get("waiters"):
        assert __import__("time").monotonic() < deadline
    screen = top.render(r, dlock.Client(r), 10)
    assert a in screen and b in screen, screen
    assert "h-" + a in screen and "w-" + b not in screen.split("HOLDERS")[0], screen
    t.join(10)
    r.close()
