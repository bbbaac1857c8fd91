#!/usr/bin/env python3
"""Server instructions per uncontended DLOCK.ACQUIRE + DLOCK.RELEASE against SET NX PX + DEL
(callgrind), with a per-function breakdown of where the difference goes.

Usage: bench/percall_callgrind.py <libdlock.so> [server] [--top N]
(needs valgrind, callgrind_annotate and redis-py)

Each workload runs the server under callgrind twice, with a short and a long pipelined series
of the same pair on one key (`lock:1`, the bench's 38-byte owner, PX 30000), so every acquire
creates the lock and every release deletes it; the difference divided by the extra pairs
cancels start-up and shutdown. Printed per pair and per command:
- `server`: the whole process (reading, parsing, replying, the event loop included);
- `call()`: inside Redis' `call()`, i.e. the command itself plus the generic work Redis does
  around it (command stats, propagation of what it replicated);
- per command: the command's function (`setCommand`, `delCommand`, the module's handler)
  plus an even share of what `call()` spends outside the functions of the two commands
  (module context set-up and teardown, propagation, stats) — pair totals are exact, the
  split of that shared remainder is an approximation.
Then the module pair's per-function inclusive costs (per pair, largest first): which parts of
the module and of the module API the difference goes to.
"""

import re
import socket
import subprocess
import sys
import time

import redis

OWNER = "8f14e45f-ceea-467f-a0e6-1d7f3b2c9a01:1"
SHORT, LONG = 1000, 11000


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


LINE = re.compile(r"\s*([\d,]+)\s+(?:\([^)]*\)\s+)?(?:\*\s+)?(.*?)\s*(?:\[[^\]]*\])?\s*$")


def inclusive(out: str) -> dict:
    """Every function's inclusive cost (and PROGRAM TOTALS), by demangled name."""
    text = subprocess.run(
        ["callgrind_annotate", "--inclusive=yes", "--threshold=100", "--auto=no", out],
        capture_output=True, text=True,
    ).stdout
    found = {}
    for line in text.splitlines():
        m = LINE.match(line)
        if not m or not m.group(2):
            continue
        name = m.group(2)
        if name.startswith("=>"):
            continue
        if "PROGRAM TOTALS" in name:
            name = "PROGRAM TOTALS"
        elif ":" in name and not name.startswith("<"):
            # "file:function" -> function (Rust paths keep their "::")
            head, _, tail = name.partition(":")
            if not tail.startswith(":"):
                name = tail
        # A function is listed once per source file it has (inlined) code
        # from; the entry of the file holding its calls is the largest.
        found[name] = max(found.get(name, 0), int(m.group(1).replace(",", "")))
    return found


def pair_cmds(kind: str):
    if kind == "dlock":
        return (["DLOCK.ACQUIRE", "lock:1", OWNER, "PX", "30000"],
                ["DLOCK.RELEASE", "lock:1", OWNER])
    return (["SET", "lock:1", OWNER, "NX", "PX", "30000"], ["DEL", "lock:1"])


def run(server_bin: str, module: str, kind: str, pairs: int) -> dict:
    port = free_port()
    out = f"/tmp/dlock-percall-cg.{kind}.{pairs}.{port}.out"
    server = subprocess.Popen(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", server_bin,
         "--port", str(port), "--save", "", "--appendonly", "no", "--loadmodule", module],
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
        a, b = pair_cmds(kind)
        pipe = r.pipeline(transaction=False)
        for i in range(pairs):
            pipe.execute_command(*a)
            pipe.execute_command(*b)
            if i % 500 == 499:
                pipe.execute()
                pipe = r.pipeline(transaction=False)
        pipe.execute()
        try:
            r.shutdown(nosave=True)
        except redis.ConnectionError:
            pass
        server.wait(timeout=300)
    finally:
        if server.poll() is None:
            server.kill()
    return inclusive(out)


def per_pair(short: dict, long: dict) -> dict:
    n = LONG - SHORT
    return {k: (long.get(k, 0) - short.get(k, 0)) / n for k in long}


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--top")]
    top = 30
    for a in sys.argv[1:]:
        if a.startswith("--top="):
            top = int(a.split("=", 1)[1])
    module = args[0]
    server_bin = args[1] if len(args) > 1 else "redis-server"
    res = {}
    for kind in ("string", "dlock"):
        res[kind] = per_pair(run(server_bin, module, kind, SHORT),
                             run(server_bin, module, kind, LONG))
    s, d = res["string"], res["dlock"]

    def split(p: dict, first: str, second: str) -> tuple:
        rest = p.get("call", 0) - p.get(first, 0) - p.get(second, 0)
        return p.get(first, 0) + rest / 2, p.get(second, 0) + rest / 2

    acq, rel = split(d, "dlock::commands::acquire::acquire_cmd",
                     "dlock::commands::release::release_cmd")
    setc, delc = split(s, "setCommand", "delCommand")
    print(f"server {server_bin}; instructions per call (callgrind, {LONG}-{SHORT} pairs)")
    print("| | dlock | SET NX PX / DEL | ratio |")
    print("|---|---:|---:|---:|")
    print(f"| ACQUIRE vs SET NX PX (call()) | {acq:,.0f} | {setc:,.0f} | {acq / setc:.2f}× |")
    print(f"| RELEASE vs DEL (call()) | {rel:,.0f} | {delc:,.0f} | {rel / delc:.2f}× |")
    print(f"| pair, call() | {d.get('call', 0):,.0f} | {s.get('call', 0):,.0f} | "
          f"{d.get('call', 0) / s.get('call', 1):.2f}× |")
    print(f"| pair, whole server | {d['PROGRAM TOTALS']:,.0f} | {s['PROGRAM TOTALS']:,.0f} | "
          f"{d['PROGRAM TOTALS'] / s['PROGRAM TOTALS']:.2f}× |")
    print()
    print(f"Module pair, inclusive instructions per pair (top {top}, ≥ 20):")
    rows = sorted(((v, k) for k, v in d.items() if v >= 20 and k != "PROGRAM TOTALS"),
                  reverse=True)
    for v, k in rows[:top]:
        print(f"{v:10,.0f}  {k}")


if __name__ == "__main__":
    main()
