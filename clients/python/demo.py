#!/usr/bin/env python3
"""32 threads on one lock, 1 ms hold: redis-py's Lock (its default blocking loop) against
dlock (the server queues waiters and hands the lock over on release).

Prints, for each, from one run: grants per second, p99 wait for the lock, commands the
server ran per grant (INFO commandstats before and after) and Jain's fairness index over
the threads' grant counts (1.0: every thread got the same share).

    python clients/python/demo.py                      # against `make run` (port 6379)
    python clients/python/demo.py --url redis://host:6380/0
    python clients/python/demo.py --spawn              # starts its own redis-server
                                                       # ($REDIS_SERVER, $DLOCK_MODULE)

Both locks use a 10 s lease (redis-py ``timeout=10``, dlock ``lease=10``); bounded in
time: ``--seconds`` per contender (default 8), about 20 s in all.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "src"))  # run from a checkout without installing

import redis  # noqa: E402

import dlock  # noqa: E402


def total_calls(r: "redis.Redis[Any]") -> int:
    stats = r.info("commandstats")
    return sum(int(v["calls"]) for v in stats.values())


def jain(xs: List[int]) -> float:
    s = sum(xs)
    sq = sum(x * x for x in xs)
    return (s * s) / (len(xs) * sq) if sq else 0.0


def run(
    name: str,
    r: "redis.Redis[Any]",
    make: Callable[[], Tuple[Callable[[], bool], Callable[[], Any]]],
    threads: int,
    hold: float,
    seconds: float,
) -> Dict[str, Any]:
    stop_at = [0.0]
    go = threading.Event()
    stop = threading.Event()
    waits: List[List[float]] = [[] for _ in range(threads)]
    counts = [0] * threads

    def worker(i: int) -> None:
        acquire, release = make()
        go.wait()
        while not stop.is_set():
            t0 = time.perf_counter()
            if not acquire():
                continue
            t1 = time.perf_counter()
            if not stop.is_set():
                waits[i].append(t1 - t0)
                counts[i] += 1
            time.sleep(hold)
            release()

    ts = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(threads)]
    for t in ts:
        t.start()
    time.sleep(0.2)
    before = total_calls(r)
    start = time.perf_counter()
    go.set()
    time.sleep(seconds)
    stop.set()
    elapsed = time.perf_counter() - start
    after = total_calls(r) - 1  # less our own INFO
    stop_at[0] = elapsed
    for t in ts:
        t.join(30)
    grants = sum(counts)
    all_waits = sorted(w for ws in waits for w in ws)
    p99 = all_waits[min(len(all_waits) - 1, int(len(all_waits) * 0.99))] if all_waits else float("nan")
    return {
        "name": name,
        "grants_per_s": grants / elapsed,
        "p99_wait_ms": p99 * 1000,
        "cmds_per_grant": (after - before) / grants if grants else float("inf"),
        "jain": jain(counts),
        "min_max": (min(counts), max(counts)),
    }


def spawn_server() -> Tuple[subprocess.Popen, int, str]:
    binary = os.environ.get("REDIS_SERVER") or "redis-server"
    module = os.environ.get("DLOCK_MODULE") or str(HERE.parent.parent / "target" / "release" / "libdlock.so")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    d = tempfile.mkdtemp(prefix="dlock-demo-")
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", d,
         "--loadmodule", module],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    end = time.monotonic() + 20
    while time.monotonic() < end:
        try:
            redis.Redis(port=port).ping()
            return proc, port, d
        except redis.ConnectionError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit(f"{binary} did not start")


def main(argv: Optional[List[str]] = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="redis://127.0.0.1:6379/0")
    ap.add_argument("--spawn", action="store_true", help="start a private redis-server with the module")
    ap.add_argument("--threads", type=int, default=32)
    ap.add_argument("--hold-ms", type=float, default=1.0)
    ap.add_argument("--seconds", type=float, default=8.0, help="per contender")
    ap.add_argument("--watchdog", action="store_true",
                    help="dlock without an explicit lease: the watchdog lease, renewed")
    args = ap.parse_args(argv)

    proc = None
    tmp = None
    url = args.url
    if args.spawn:
        proc, port, tmp = spawn_server()
        url = f"redis://127.0.0.1:{port}/0"
    try:
        pool_size = args.threads + 8
        r = redis.Redis.from_url(url, max_connections=pool_size, socket_timeout=10)
        try:
            r.execute_command("DLOCK.INFO", "demo:probe")
        except redis.ConnectionError as e:
            raise SystemExit(f"cannot reach {url} ({e}): start `make run`, or pass --spawn")
        except redis.ResponseError as e:
            raise SystemExit(f"{url} has no dlock module ({e}): start `make run`, or pass --spawn")
        hold = args.hold_ms / 1000.0
        print(f"{args.threads} threads, one lock, {args.hold_ms:g} ms hold, {args.seconds:g} s each, {url}")
        results = []

        def redis_py() -> Tuple[Callable[[], bool], Callable[[], Any]]:
            lock = r.lock("demo:redis-py", timeout=10)  # default blocking loop: sleep 0.1 s
            return lock.acquire, lock.release

        results.append(run("redis-py Lock", r, redis_py, args.threads, hold, args.seconds))
        r.delete("demo:redis-py")

        client = dlock.Client(r)

        def dlock_lock() -> Tuple[Callable[[], bool], Callable[[], Any]]:
            lock = client.lock("demo:dlock", lease=None if args.watchdog else 10)
            return lock.acquire, lock.release

        name = "dlock (watchdog)" if args.watchdog else "dlock Lock"
        results.append(run(name, r, dlock_lock, args.threads, hold, args.seconds))

        print(f"{'':16}{'grants/s':>10}{'p99 wait':>12}{'cmds/grant':>12}{'Jain':>7}  per-thread min..max")
        for x in results:
            print(
                f"{x['name']:16}{x['grants_per_s']:10.0f}{x['p99_wait_ms']:10.1f}ms"
                f"{x['cmds_per_grant']:12.2f}{x['jain']:7.3f}  {x['min_max'][0]}..{x['min_max'][1]}"
            )
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(10)
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
