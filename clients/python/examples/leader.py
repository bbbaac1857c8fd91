"""Election: start this in a few terminals; one leads, the others wait in line and watch.

    make run &
    python clients/python/examples/leader.py node-a
    python clients/python/examples/leader.py node-b      # Ctrl-C / kill node-a: node-b leads at once

The leader proclaims its name; every process prints each change of leader as it happens.
"""

import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import redis  # noqa: E402

import dlock  # noqa: E402
from dlock.recipes import Election  # noqa: E402


def main() -> None:
    me = sys.argv[1] if len(sys.argv) > 1 else "node"
    url = sys.argv[2] if len(sys.argv) > 2 else "redis://127.0.0.1:6379/0"
    lead_for = float(sys.argv[3]) if len(sys.argv) > 3 else 5.0
    locks = dlock.Client(redis.Redis.from_url(url))
    election = Election(locks, "demo-leader", owner=me, bind=True, lease=6)
    watcher = election.observe(lambda leader: print(f"[{me}] leader now: {leader}"))
    try:
        while True:
            term = election.campaign()
            print(f"[{me}] I lead (term token {term.token})")
            term.proclaim(f"{me} at {time.strftime('%H:%M:%S')}")
            # Lead until lost, or hand over after a while.
            if term.lost.wait(lead_for):
                print(f"[{me}] leadership lost: {term.lost.reason}")
            else:
                term.resign()
                print(f"[{me}] resigned; back in line")
            threading.Event().wait(0.1)
    except KeyboardInterrupt:
        pass
    finally:
        watcher.close()


if __name__ == "__main__":
    main()
