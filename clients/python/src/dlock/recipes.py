"""Recipes on top of the lock commands: :func:`run_once` (ShedLock's scheduled-job lock)
and :class:`Election` (etcd's / Curator's leader election). Sync flavour, on
``redis.Redis``. The semantics, shared with the Rust crate and the Node package, are in
``docs/recipes.md``.

>>> import redis, dlock                                               # doctest: +SKIP
>>> from dlock.recipes import run_once, Election                      # doctest: +SKIP
>>> locks = dlock.Client(redis.Redis())                               # doctest: +SKIP
>>> r = run_once(locks, "nightly", lambda job: 42, at_most_for=60, at_least_for=5)  # doctest: +SKIP
>>> r.outcome, r.value                                                # doctest: +SKIP
('ran', 42)
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Iterator, Optional, TypeVar

import redis as _redis

from . import _recipes
from ._core import Release
from ._lost import LostSignal
from ._recipes import CLOSED, Leader, Outcome, RunResult, value_key
from ._sync import Client, _run

T = TypeVar("T")

__all__ = [
    "Election",
    "JobContext",
    "Leader",
    "Observer",
    "Outcome",
    "RunResult",
    "Term",
    "run_once",
    "value_key",
]


class JobContext(_recipes.JobCore):
    """What the job gets: ``token`` (fencing token of this run), ``lost`` (a
    :class:`~dlock.LostSignal` set the moment the hold is known to be over), and
    ``fenced(*command)`` / ``check()`` bound to the run's token."""

    lost: LostSignal

    def fenced(self, *command: Any) -> Any:
        """``DLOCK.FENCED name token command…``: runs only while this run's hold lives;
        raises :class:`~dlock.Fenced` (and sets ``lost``) otherwise."""
        return _run(self._op_fenced(command))

    def check(self) -> bool:
        """``DLOCK.CHECK``: is this run's hold still live?"""
        return _run(self._op_check())


class _Renewer:
    """Renews a run's lease every ``at_most_for / 3`` from a thread; keeps ``lost``'s
    deadline at the end of the last confirmed lease (less the drift margin)."""

    def __init__(self, run: _recipes.Run) -> None:
        self.run = run
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="dlock-run-once", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        pause: Optional[float] = self.run.renew_every
        while pause is not None and not self._stop.wait(pause):
            pause = _run(self.run.op_renew())

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()  # no renewal may land after the run's end


def run_once(
    client: Client,
    name: str,
    job: Callable[[JobContext], T],
    *,
    at_most_for: float,
    at_least_for: float = 0.0,
    renew: bool = False,
    owner: Optional[str] = None,
) -> RunResult[T]:
    """Runs ``job`` unless another process runs it now — ShedLock's ``@SchedulerLock``.

    * One try (``DLOCK.ACQUIRE name owner PX at_most_for WAIT 0``): when someone else
      holds ``name`` the job is **skipped**, not waited for.
    * ``at_most_for`` (s) is the lease: a process that dies mid-job holds the lock no
      longer than that. A job that outlives it loses the hold — ``job.lost`` is set at
      the lease's end (less a drift margin) and the result says LOST — unless
      ``renew=True``, which renews it every ``at_most_for / 3`` while the job runs.
    * ``at_least_for`` (s): after a job that finished sooner, the hold is **kept** until
      ``at_least_for`` after the start (``DLOCK.RENEW … PX remainder``, not a release),
      so a process whose clock or schedule runs a little behind does not run it again.
    * ``owner``: the start of the run's owner id (default: the client's owner id of the
      calling thread); ``:run<n>`` is appended, unique per run.
    * The job gets a :class:`JobContext` (``token``, ``lost``, ``fenced``, ``check``).
      An exception from the job propagates, after the hold is handled the same way.
    """
    run = _recipes.Run(client, name, at_most_for, at_least_for, owner)
    if not _run(run.op_start()):
        return RunResult(Outcome.SKIPPED)
    renewer = _Renewer(run) if renew else None
    try:
        value = job(JobContext(run))
    finally:
        if renewer is not None:
            renewer.stop()
        _run(run.op_finish())
    return run.result(value)


# ---------------------------------------------------------------------------
# Election


class Term(_recipes.TermCore):
    __doc__ = _recipes.TermCore.__doc__

    lost: LostSignal

    def _watch(self, ps: Any) -> None:
        threading.Thread(
            target=_run, args=(self._op_monitor(ps),), name="dlock-term", daemon=True
        ).start()

    def proclaim(self, value: Any) -> None:
        """Publishes ``value`` (e.g. this leader's address) for :meth:`Election.leader`
        and observers. Written with ``DLOCK.FENCED`` under the term's token, so only the
        current term's leader can write it; raises :class:`~dlock.Fenced` (and sets
        ``lost``) when the term is over."""
        _run(self._op_proclaim(value))

    def fenced(self, *command: Any) -> Any:
        """``DLOCK.FENCED name token command…``: runs only while this term lasts; raises
        :class:`~dlock.Fenced` (and sets ``lost``) otherwise."""
        return _run(self._op_fenced(command))

    def resign(self) -> Release:
        """Ends the term: deletes the proclaimed value (fenced) and releases the lock,
        which hands it to the next campaigner in line. :data:`~dlock.Released`, or
        :data:`~dlock.Lost` when the term had already ended."""
        return _run(self._op_resign())

    def __enter__(self) -> "Term":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.resign()


class Election(_recipes.ElectionCore):
    __doc__ = _recipes.ElectionCore.__doc__

    _term = Term
    term: Optional[Term]

    def __init__(self, client: Client, name: str, **kwargs: Any) -> None:
        super().__init__(client, name, **kwargs)

    def campaign(self, timeout: Optional[float] = None) -> Optional[Term]:
        """Waits until this process leads (or ``timeout`` s pass: None). Waiting is on
        the server, FIFO among campaigners, on a connection of its own."""
        return _run(self._op_campaign(timeout))  # type: ignore[no-any-return]

    def resign(self) -> Optional[Release]:
        """Resigns the current term of this object (None when there is none)."""
        return _run(self._op_resign())

    def proclaim(self, value: Any) -> None:
        """:meth:`Term.proclaim` of the current term; raises :class:`~dlock.NotHeld`
        when this object does not lead."""
        _run(self._op_proclaim(value))

    def leader(self) -> Optional[Leader]:
        """Who leads now (``DLOCK.INFO``) and the value it proclaimed in this term —
        None when nobody leads (also during a lock-delay after a lost term)."""
        return _run(self._op_leader())

    def observe(self, callback: Optional[Callable[[Optional[Leader]], Any]] = None) -> "Observer":
        """Every change of leader (or of its proclaimed value): an :class:`Observer` to
        iterate (``for leader in election.observe(): …``; the first item is the current
        state, then one per change; None = nobody leads), or, with ``callback``, a
        thread that calls ``callback(leader)`` for each (``Observer.close()`` stops
        it). Driven by the lock's channel: each message means "look again"."""
        obs = Observer(self)
        if callback is not None:
            obs._start_callback(callback)
        return obs


class Observer(_recipes.ObserverCore):
    """Leader changes of one :class:`Election` (see :meth:`Election.observe`)."""

    def __init__(self, election: Election) -> None:
        super().__init__(election)
        _run(self._op_subscribe())
        self._thread: Optional[threading.Thread] = None

    def next(self, timeout: Optional[float] = None) -> Optional[Leader]:
        """The next state that differs from the last one returned (the first call: the
        current state). Raises ``TimeoutError`` when nothing changed within ``timeout``."""
        got = _run(self._op_next(timeout))
        if got is CLOSED:
            raise StopIteration
        return got  # type: ignore[no-any-return]

    def __iter__(self) -> Iterator[Optional[Leader]]:
        return self

    def __next__(self) -> Optional[Leader]:
        return self.next()

    def _start_callback(self, callback: Callable[[Optional[Leader]], Any]) -> None:
        def loop() -> None:
            while not self._closed:
                try:
                    leader = self.next(timeout=0.5)
                except TimeoutError:
                    continue
                except (StopIteration, ValueError, OSError, _redis.ConnectionError):
                    return
                try:
                    callback(leader)
                except Exception:  # a callback must not stop the observer
                    pass

        self._thread = threading.Thread(target=loop, name="dlock-observer", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._closed = True
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        _run(self._op_close())

    def __enter__(self) -> "Observer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
