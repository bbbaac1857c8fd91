#!/usr/bin/env python3
"""Instructions the server spends with `dlock.stats yes` and `no` (callgrind).

Usage: bench/stats_callgrind.py <libdlock.so> [redis-server]   (needs valgrind and redis-py)

For each setting the server runs under callgrind twice, with a short and a long series of
the same operations; the difference divided by the extra operations cancels start-up.
Printed: instructions per uncontended ACQUIRE + RELEASE pair (whole server, and inside
Redis' `call()`), and per handoff cycle (ACQUIRE A; ACQUIRE B WAIT blocks; RELEASE A grants
B; RELEASE B) inside `call()` + `moduleHandleBlockedClients()` (the client's pauses make
the whole-server total noisy there).
"""

import re
import socket
import subprocess
import sys
import time

import redis

MODULE = sys.argv[1]
SERVER = sys.argv[2] if len(sys.argv) > 2 else "redis-server"


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def totals(out: str) -> dict:
    """PROGRAM TOTALS and the inclusive cost of call() and moduleHandleBlockedClients()."""
    text = subprocess.run(
        ["callgrind_annotate", "--inclusive=yes", out], capture_output=True, text=True
    ).stdout
    found = {}
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+)\s.*?(PROGRAM TOTALS|:call |:moduleHandleBlockedClients )", line + " ")
        if m:
            found.setdefault(m.group(2).strip(": "), int(m.group(1).replace(",", "")))
    return found


def run(stats: str, pairs: int, handoffs: int) -> dict:
    port = free_port()
    out = f"/tmp/dlock-cg.{stats}.{pairs}.{handoffs}.out"
    server = subprocess.Popen(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", SERVER,
         "--port", str(port), "--save", "", "--appendonly", "no",
         "--loadmodule", MODULE, "stats", stats],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        r = redis.Redis(port=port)
        for _ in range(600):
            try:
                r.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.1)
        pipe = r.pipeline(transaction=False)
        for i in range(pairs):
            pipe.execute_command("DLOCK.ACQUIRE", "k", "o", "PX", "60000")
            pipe.execute_command("DLOCK.RELEASE", "k", "o")
            if i % 500 == 499:
                pipe.execute()
                pipe = r.pipeline(transaction=False)
        pipe.execute()
        b = redis.Redis(port=port)
        for _ in range(handoffs):
            r.execute_command("DLOCK.ACQUIRE", "h", "A", "PX", "60000")
            conn = b.connection_pool.get_connection()
            conn.send_command("DLOCK.ACQUIRE", "h", "B", "PX", "60000", "WAIT", "60000")
            time.sleep(0.03)  # B's request reaches the server and blocks first
            r.execute_command("DLOCK.RELEASE", "h", "A")
            conn.read_response()
            b.connection_pool.release(conn)
            r.execute_command("DLOCK.RELEASE", "h", "B")
        try:
            r.shutdown(nosave=True)
        except redis.ConnectionError:
            pass
        server.wait(timeout=120)
    finally:
        if server.poll() is None:
            server.kill()
    return totals(out)


def main() -> None:
    for stats in ("no", "yes"):
        a, b = run(stats, 1000, 0), run(stats, 11000, 0)
        c, d = run(stats, 0, 100), run(stats, 0, 600)
        per = lambda x, y, f, n: (y.get(f, 0) - x.get(f, 0)) / n  # noqa: E731
        pair_all = per(a, b, "PROGRAM TOTALS", 10000)
        pair_call = per(a, b, "call", 10000)
        hand = per(c, d, "call", 500) + per(c, d, "moduleHandleBlockedClients", 500)
        print(
            f"stats={stats}: per ACQUIRE+RELEASE pair {pair_all:.0f} (server) "
            f"{pair_call:.0f} (call()); per handoff cycle {hand:.0f} "
            "(call() + moduleHandleBlockedClients())",
            flush=True,
        )


if __name__ == "__main__":
    main()
