#!/usr/bin/env python3
"""commandstats usec_per_call of DLOCK.ACQUIRE and DLOCK.RELEASE for two module builds on
one server, alternating runs (for bench/skip-validation.md).

Usage: bench/skip_validation_stats.py <server> <label>=<libdlock.so> ... [--pairs N] [--runs R]
(needs redis-py)

Each run starts the server with one build, sends N uncontended ACQUIRE+RELEASE pairs on one
key (pipelined, 500 pairs a batch), then reads `INFO commandstats`; the builds alternate,
R runs each, and the median of each is printed.
"""

import statistics
import subprocess
import sys
import time

import redis

from percall_callgrind import OWNER, free_port


def run(server: str, lib: str, pairs: int) -> tuple:
    port = free_port()
    proc = subprocess.Popen(
        [server, "--port", str(port), "--save", "", "--appendonly", "no", "--loadmodule", lib],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        r = redis.Redis(port=port)
        for _ in range(100):
            try:
                r.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        done = 0
        while done < pairs:
            p = r.pipeline(transaction=False)
            for _ in range(min(500, pairs - done)):
                p.execute_command("DLOCK.ACQUIRE", "lock:1", OWNER, "PX", "30000")
                p.execute_command("DLOCK.RELEASE", "lock:1", OWNER)
            p.execute()
            done += 500
        stats = r.info("commandstats")
        return (stats["cmdstat_dlock.acquire"]["usec_per_call"],
                stats["cmdstat_dlock.release"]["usec_per_call"])
    finally:
        proc.kill()
        proc.wait()


def main() -> None:
    args = sys.argv[1:]
    pairs, runs = 20000, 3
    if "--pairs" in args:
        i = args.index("--pairs")
        pairs = int(args[i + 1])
        del args[i:i + 2]
    if "--runs" in args:
        i = args.index("--runs")
        runs = int(args[i + 1])
        del args[i:i + 2]
    server, builds = args[0], [a.split("=", 1) for a in args[1:]]
    got = {label: [] for label, _ in builds}
    for _ in range(runs):
        for label, lib in builds:
            got[label].append(run(server, lib, pairs))
    print(f"server {server}; {pairs} pairs a run, median of {runs} runs (usec_per_call)")
    print("| build | ACQUIRE | RELEASE | runs (acquire/release) |")
    print("|---|---:|---:|---|")
    for label, vals in got.items():
        a = statistics.median(v[0] for v in vals)
        r = statistics.median(v[1] for v in vals)
        each = ", ".join(f"{x:.2f}/{y:.2f}" for x, y in vals)
        print(f"| {label} | {a:.2f} | {r:.2f} | {each} |")


if __name__ == "__main__":
    main()
