"""The Python examples of docs/languages.md are real tests: its first ```python block
(the lock) and the block under "Python: a semaphore" are run here against a real
redis-server with the module."""

import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import redis

DOC = Path(__file__).resolve().parents[2] / "docs" / "languages.md"


def example_source() -> str:
    text = DOC.read_text()
    m = re.search(r"^```python\n(.*?)^```", text, re.S | re.M)
    assert m, f"no ```python block in {DOC}"
    return m.group(1)


@pytest.fixture
def example(server, monkeypatch):
    """The example's functions, bound to the test's server."""
    monkeypatch.setenv("REDIS_URL", f"redis://127.0.0.1:{server.port}")
    ns = {"__name__": "dlock_languages_example"}
    exec(compile(example_source(), str(DOC), "exec"), ns)
    yield ns
    ns["r"].close()


def test_example_functions(server, r, example):
    acquire, renew, release = example["acquire"], example["renew"], example["release"]
    assert example["channel"]("orders") == "dlock:{orders}"
    assert example["channel"]("{user1}:lock") == "dlock:{user1}:lock"

    # acquire with WAIT: served when another owner's short lease ends.
    t0 = r.execute_command("DLOCK.ACQUIRE", "orders", "other", "PX", 300)
    start = time.monotonic()
    token = acquire("orders", "me", wait_ms=20000)
    assert token > t0
    assert time.monotonic() - start < 10
    assert acquire("orders", "me") == token  # reentrant
    assert renew("orders", "me", lease_ms=60000) is True
    assert renew("orders", "stranger") is False
    assert release("orders", "me") is False  # still held once
    assert release("orders", "me") is True
    with pytest.raises(redis.ResponseError, match="^NOTHELD"):
        release("orders", "me")
    assert acquire("orders", "me", wait_ms=0) > token
    release("orders", "me")


def test_example_acquire_via_channel(server, r, example):
    r.execute_command("DLOCK.ACQUIRE", "orders", "holder", "PX", 60000)
    released = threading.Event()

    def let_go():
        c = server.client()
        # Let go once the example is subscribed to the lock's channel.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if c.pubsub_numsub("dlock:{orders}")[0][1] >= 1:
                break
            time.sleep(0.01)
        time.sleep(0.1)
        c.execute_command("DLOCK.RELEASE", "orders", "holder")
        released.set()

    t = threading.Thread(target=let_go, daemon=True)
    t.start()
    token = example["acquire_via_channel"]("orders", "me", timeout_s=20)
    t.join(15)
    assert released.is_set()
    assert token is not None
    assert example["release"]("orders", "me") is True
    # Nobody lets go: None after the timeout.
    r.execute_command("DLOCK.ACQUIRE", "orders", "holder", "PX", 60000)
    assert example["acquire_via_channel"]("orders", "me", timeout_s=0.3) is None


def test_example_runs_as_a_script(server, tmp_path):
    script = tmp_path / "example.py"
    script.write_text(example_source())
    env = dict(os.environ, REDIS_URL=f"redis://127.0.0.1:{server.port}")
    out = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert "acquired orders with fencing token" in out.stdout
    assert "released" in out.stdout
    assert "acquired again via the channel, token" in out.stdout
    assert server.client().execute_command("DLOCK.INFO", "orders") is None


def semaphore_source() -> str:
    text = DOC.read_text()
    m = re.search(r"^### Python: a semaphore.*?^```python\n(.*?)^```", text, re.S | re.M)
    assert m, f"no semaphore ```python block in {DOC}"
    return m.group(1)


@pytest.fixture
def sem_example(server, monkeypatch):
    monkeypatch.setenv("REDIS_URL", f"redis://127.0.0.1:{server.port}")
    ns = {"__name__": "dlock_languages_semaphore"}
    exec(compile(semaphore_source(), str(DOC), "exec"), ns)
    yield ns
    ns["r"].close()


def test_semaphore_example_functions(server, r, sem_example):
    acq, rel, renew = sem_example["sem_acquire"], sem_example["sem_release"], sem_example["sem_renew"]
    available = sem_example["available"]
    assert available("slots") is None
    t1 = acq("slots", "a", 3, permits=2)
    t2 = acq("slots", "b", 3)
    assert t2 > t1
    assert available("slots") == 0
    assert acq("slots", "c", 3, wait_ms=0) is None
    assert acq("slots", "a", 3, wait_ms=0) is None  # asking again queues like anyone
    with pytest.raises(redis.ResponseError, match="limit is 3"):
        acq("slots", "c", 4, wait_ms=0)
    assert renew("slots", "a") is True
    assert renew("slots", "nobody") is False
    # c waits on the server; a gives one permit back and c is served at once.
    got = {}
    waiter = threading.Thread(target=lambda: got.update(t=acq("slots", "c", 3, wait_ms=20000)))
    waiter.start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        info = r.execute_command("DLOCK.INFO", "slots")
        if info and info[info.index(b"waiters") + 1]:
            break
        time.sleep(0.01)
    assert rel("slots", "a") is False  # a still holds 1
    waiter.join(15)
    assert got["t"] > t2
    with pytest.raises(redis.ResponseError, match="fewer than PERMITS"):
        rel("slots", "a", permits=2)
    assert rel("slots", "a") is True
    assert available("slots") == 1
    assert rel("slots", "b") is True and rel("slots", "c") is True
    assert r.execute_command("DLOCK.INFO", "slots") is None


def test_semaphore_example_runs_as_a_script(server, tmp_path):
    script = tmp_path / "semaphore.py"
    script.write_text(semaphore_source())
    env = dict(os.environ, REDIS_URL=f"redis://127.0.0.1:{server.port}")
    out = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    m = re.search(r"6 workers ran, at most (\d+) at a time \(limit 2\)", out.stdout)
    assert m, out.stdout
    assert 1 <= int(m.group(1)) <= 2
    assert server.client().execute_command("DLOCK.INFO", "gpu-slots") is None
