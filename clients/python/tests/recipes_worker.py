"""A process for the recipe tests (test_pkg_recipes.py): prints JSON lines on stdout.

    recipes_worker.py runonce PORT NAME FIRST_SLOT SLOTS PERIOD AT_LEAST AT_MOST
    recipes_worker.py elect PORT NAME ID BIND LEASE LOCKDELAY

``runonce`` runs ``run_once(NAME)`` at every PERIOD boundary of the wall clock for slots
FIRST_SLOT .. FIRST_SLOT+SLOTS-1; the job counts itself in (fenced INCR/DECR of
NAME:running) and logs ``slot:pid:token:running`` to NAME:log.
``elect`` campaigns forever as owner ``w<ID>``; once elected it proclaims ``addr-<ID>``
and appends ``<ID>:<token>`` to NAME:log with DLOCK.FENCED every 50 ms; a line
``resign`` on stdin makes it resign and campaign again.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import redis  # noqa: E402

import dlock  # noqa: E402
from dlock.recipes import Election, Outcome, run_once  # noqa: E402

_out = threading.Lock()


def emit(**kw: object) -> None:
    kw.setdefault("t", time.time())
    with _out:
        sys.stdout.write(json.dumps(kw) + "\n")
        sys.stdout.flush()


def runonce(port: int, name: str, first: int, slots: int, period: float, at_least: float, at_most: float) -> None:
    c = dlock.Client(redis.Redis(port=port, socket_timeout=10))
    pid = os.getpid()
    counts = {"ran": 0, "skipped": 0, "lost": 0}
    late_max = 0.0
    for slot in range(first, first + slots):
        due = slot * period
        wait = due - time.time()
        if wait > 0:
            time.sleep(wait)
        late_max = max(late_max, time.time() - due)

        def job(ctx: "dlock.recipes.JobContext", slot: int = slot) -> int:
            running = int(ctx.fenced("INCR", f"{name}:running"))
            time.sleep(0.02)
            ctx.fenced("DECR", f"{name}:running")
            ctx.fenced("RPUSH", f"{name}:log", f"{slot}:{pid}:{ctx.token}:{running}")
            return running

        r = run_once(c, name, job, at_most_for=at_most, at_least_for=at_least)
        counts[r.outcome.value] += 1
        if r.outcome is Outcome.LOST:
            emit(ev="lost", slot=slot, reason=str(r.reason))
    emit(ev="done", late_max=late_max, **counts)


def elect(port: int, name: str, ident: int, bind: bool, lease: float, lock_delay: float) -> None:
    c = dlock.Client(redis.Redis(port=port, socket_timeout=10))
    e = Election(c, name, owner=f"w{ident}", lease=lease, bind=bind, lock_delay=lock_delay or None)
    resign = threading.Event()

    def read_stdin() -> None:
        for line in sys.stdin:
            if line.strip() == "resign":
                resign.set()

    threading.Thread(target=read_stdin, daemon=True).start()
    emit(ev="ready", id=ident)
    while True:
        term = e.campaign()
        assert term is not None
        emit(ev="elected", id=ident, token=term.token)
        try:
            term.proclaim(f"addr-{ident}")
        except dlock.Fenced:
            pass
        while True:
            if term.is_lost():
                d = term.lost.deadline  # when the term counted as over, on this clock
                lost_at = None if d is None else time.time() - (time.monotonic() - d)
                emit(ev="lost", id=ident, token=term.token, reason=str(term.lost.reason), lost_at=lost_at)
                break
            if resign.is_set():
                resign.clear()
                emit(ev="resigning", id=ident, token=term.token)
                outcome = term.resign()
                emit(ev="resigned", id=ident, token=term.token, outcome=str(outcome))
                break
            try:
                term.fenced("RPUSH", f"{name}:log", f"{ident}:{term.token}")
            except dlock.Fenced:
                emit(ev="refused", id=ident, token=term.token)
            time.sleep(0.05)


def main() -> None:
    mode, port, name = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    a = sys.argv[4:]
    if mode == "runonce":
        runonce(port, name, int(a[0]), int(a[1]), float(a[2]), float(a[3]), float(a[4]))
    else:
        elect(port, name, int(a[0]), a[1] == "1", float(a[2]), float(a[3]))


if __name__ == "__main__":
    main()
