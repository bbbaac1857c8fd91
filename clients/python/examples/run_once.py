"""run_once: a job every 2 s that runs once across all the processes that start this.

    make run &                                   # a server with the module on :6379
    python clients/python/examples/run_once.py & python clients/python/examples/run_once.py

Each process wakes at every 2 s boundary; one runs the job, the others print "skipped".
"""

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import redis  # noqa: E402

import dlock  # noqa: E402
from dlock.recipes import run_once  # noqa: E402


def report(job: "dlock.recipes.JobContext") -> str:
    # The token fences what the job writes: a run that lost its hold cannot write.
    job.fenced("SET", "report:last", f"pid {os.getpid()} token {job.token}")
    return "done"


def main() -> None:
    url = sys.argv[1] if len(sys.argv) > 1 else "redis://127.0.0.1:6379/0"
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    locks = dlock.Client(redis.Redis.from_url(url))
    period = 2.0
    for _ in range(rounds):
        time.sleep(period - time.time() % period)
        r = run_once(locks, "report", report, at_most_for=10, at_least_for=1)
        print(f"pid {os.getpid()}: {r.outcome.value}", f"(token {r.token})" if r.token else "")


if __name__ == "__main__":
    main()
