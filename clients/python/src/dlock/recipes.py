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

import enum
import itertools
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Generic, Iterator, Optional, TypeVar

import redis as _redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from . import _core, _ops
from ._core import LostReason, Renewal
from ._lost import LostSignal
from ._sync import Client, _run
from .errors import Fenced, NotHeld

T = TypeVar("T")
_RUNS = itertools.count(1)

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


def _text(v: Any) -> str:
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return str(v)


def _value(v: Any) -> Any:
    if isinstance(v, bytes):
        try:
            return v.decode("utf-8")
        except UnicodeDecodeError:
            return v
    return v


# ---------------------------------------------------------------------------
# run_once


class Outcome(str, enum.Enum):
    """What :func:`run_once` did."""

    #: The job ran and the hold lasted to its end (kept until ``at_least_for``).
    RAN = "ran"
    #: Someone else holds the job's lock: the job did not run (nobody waited).
    SKIPPED = "skipped"
    #: The job ran but its hold ended before the job did (``at_most_for`` passed without
    #: renewal, renewals failed, or the lock was force-released): another process may
    #: have run it meanwhile.
    LOST = "lost"


@dataclass
class RunResult(Generic[T]):
    """The result of :func:`run_once`."""

    outcome: Outcome
    #: What the job returned (None when skipped).
    value: Optional[T] = None
    #: The fencing token of the run (None when skipped).
    token: Optional[int] = None
    #: Why the hold was lost (None unless ``outcome`` is LOST).
    reason: Optional[LostReason] = None

    @property
    def ran(self) -> bool:
        return self.outcome is not Outcome.SKIPPED


class JobContext:
    """What the job gets: ``token`` (fencing token of this run), ``lost`` (a
    :class:`~dlock.LostSignal` set the moment the hold is known to be over), and
    ``fenced(*command)`` / ``check()`` bound to the run's token."""

    def __init__(self, client: Client, name: str, owner: str, token: int, lost: LostSignal) -> None:
        self.client = client
        self.name = name
        self.owner = owner
        self.token = token
        self.lost = lost

    def fenced(self, *command: Any) -> Any:
        """``DLOCK.FENCED name token command…``: runs only while this run's hold lives;
        raises :class:`~dlock.Fenced` (and sets ``lost``) otherwise."""
        try:
            return self.client.fenced(self.name, self.token, *command)
        except Fenced:
            self.lost._mark(LostReason.NOT_HELD)
            raise

    def check(self) -> bool:
        """``DLOCK.CHECK``: is this run's hold still live?"""
        live = self.client.check(self.name, self.token)
        if not live:
            self.lost._mark(LostReason.NOT_HELD)
        return live


class _Renewer:
    """Renews ``key``'s lease every ``lease / 3`` from a thread; keeps ``lost``'s
    deadline at the end of the last confirmed lease (less the drift margin)."""

    def __init__(self, client: Client, key: str, owner: str, lease: float, lost: LostSignal) -> None:
        self.client, self.key, self.owner, self.lease, self.lost = client, key, owner, lease, lost
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="dlock-run-once", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        interval = self.lease / 3.0
        while not self._stop.wait(interval):
            if self.lost.is_set():
                return
            sent = time.monotonic()
            try:
                ok = self.client.execute("DLOCK.RENEW", self.key, self.owner, "PX", _core.lease_ms(self.lease))
            except Exception:
                interval = max(0.02, self.lease / 10.0)
                continue  # the deadline makes it lost if nothing gets through
            if self._stop.is_set():
                return
            if ok == 1:
                self.lost._set_deadline(sent + self.lease - _core.lost_margin(self.lease))
                interval = self.lease / 3.0
            else:
                self.lost._mark(LostReason.NOT_HELD)
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


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
    if not at_most_for > 0:
        raise ValueError("at_most_for must be a positive number of seconds")
    if at_least_for < 0 or at_least_for > at_most_for:
        raise ValueError("at_least_for must be between 0 and at_most_for")
    # A fresh owner per run: a run is never reentrant, so a second run in the same
    # thread while the hold is kept (at_least_for) is skipped like anyone else's.
    who = f"{owner if owner is not None else client.owner()}:run{next(_RUNS)}"
    lms = _core.lease_ms(at_most_for)
    sent = time.monotonic()
    token = _core.parse_token(client.execute("DLOCK.ACQUIRE", name, who, "PX", lms, "WAIT", 0))
    if token is None:
        return RunResult(Outcome.SKIPPED)
    lost = LostSignal(sent + at_most_for - _core.lost_margin(at_most_for))
    renewer = _Renewer(client, name, who, at_most_for, lost) if renew else None
    ctx = JobContext(client, name, who, token, lost)
    value: Optional[T] = None
    try:
        value = job(ctx)
    finally:
        if renewer is not None:
            renewer.stop()
        _finish(client, name, who, sent, at_least_for, lost)
    if lost.is_set():
        return RunResult(Outcome.LOST, value, token, lost.reason)
    return RunResult(Outcome.RAN, value, token)


def _finish(client: Client, name: str, who: str, start: float, at_least_for: float, lost: LostSignal) -> None:
    """The end of a run: keep the hold for what is left of ``at_least_for``, else
    release it. Marks ``lost`` when the server says the hold was gone."""
    if lost.is_set():
        try:  # ours may still be there (only unreachable): let it go
            client.execute("DLOCK.RELEASE", name, who)
        except Exception:
            pass
        return
    left = start + at_least_for - time.monotonic()
    try:
        if left > 0.0005:
            if client.execute("DLOCK.RENEW", name, who, "PX", _core.lease_ms(left)) != 1:
                lost._mark(LostReason.NOT_HELD)
        else:
            client.execute("DLOCK.RELEASE", name, who)
        lost._set_deadline(None)  # the run is over and the hold was ours to the end
    except NotHeld:
        lost._mark(LostReason.NOT_HELD)


# ---------------------------------------------------------------------------
# Election


def value_key(name: str) -> str:
    """The companion key that holds the proclaimed value of election ``name``: in the
    lock key's hash slot (``{name}:proclaimed``, or ``name:proclaimed`` when ``name``
    has a hash tag)."""
    if _core.has_hash_tag(name.encode()):
        return f"{name}:proclaimed"
    return f"{{{name}}}:proclaimed"


@dataclass(frozen=True)
class Leader:
    """Who leads a term: its owner id, the term's fencing token, and the value it
    proclaimed during this term (None when it has proclaimed nothing yet)."""

    owner: str
    token: int
    value: Any = None


class Term:
    """A won campaign: leadership until :meth:`resign` or until it is lost.

    ``token`` is the term's fencing token (strictly greater than every earlier term's);
    ``lost`` is a :class:`~dlock.LostSignal` set the moment leadership is known to be
    over — a renewal answered 0, no renewal got through before the lease would end
    (it turns set by itself at that instant, even in a process that was paused), or a
    notification on the lock's channel after which ``DLOCK.CHECK`` says the token is no
    longer live (force-release, a ``BIND`` connection that closed)."""

    def __init__(self, election: "Election", token: int, start: float, conn: Optional[Any]) -> None:
        self.election = election
        self.token = token
        self.owner = election.owner
        lease = election.lease
        self.lost = LostSignal(start + lease - _core.lost_margin(lease))
        self._conn = conn
        self._done = False
        self._mu = threading.Lock()
        client = election.client
        args = ("DLOCK.RENEW", election.name, self.owner, "PX", _core.lease_ms(lease))

        def renew(timeout: float) -> _ops.Op[Renewal]:
            sent = yield _ops.NOW
            try:
                v = yield from _ops.command(client, *args)
            except Exception:
                return Renewal.FAILED
            if v == 1:
                self.lost._set_deadline(sent + lease - _core.lost_margin(lease))
                return Renewal.RENEWED
            return Renewal.LOST if v == 0 else Renewal.FAILED

        self._watchdog = client._flavour.watchdog(
            renew, lease, election.renew_interval, start, self.lost._mark, LostReason.NOT_HELD
        )
        self._monitor = threading.Thread(target=self._watch, name="dlock-term", daemon=True)
        self._stop_monitor = threading.Event()
        self._ps = client.redis.pubsub(ignore_subscribe_messages=True)
        self._ps.subscribe(_core.channel_for(election.name))
        self._monitor.start()

    def _watch(self) -> None:
        """Any message on the lock's channel: is the term's token still live?"""
        e = self.election
        try:
            while not self._stop_monitor.is_set() and not self.lost.is_set():
                msg = self._ps.get_message(timeout=0.5)
                if msg is None or self._stop_monitor.is_set():
                    continue
                if not e.client.check(e.name, self.token):
                    self.lost._mark(LostReason.NOT_HELD)
        except Exception:
            pass  # the watchdog still decides
        finally:
            try:
                self._ps.close()
            except Exception:
                pass

    def is_lost(self) -> bool:
        """True once leadership is known to be over."""
        return self.lost.is_set()

    def proclaim(self, value: Any) -> None:
        """Publishes ``value`` (e.g. this leader's address) for :meth:`Election.leader`
        and observers. Written with ``DLOCK.FENCED`` under the term's token, so only the
        current term's leader can write it; raises :class:`~dlock.Fenced` (and sets
        ``lost``) when the term is over."""
        e = self.election
        self.fenced("HSET", e.value_key, "token", self.token, "owner", self.owner, "value", value)
        e._publish("proclaimed")

    def fenced(self, *command: Any) -> Any:
        """``DLOCK.FENCED name token command…``: runs only while this term lasts; raises
        :class:`~dlock.Fenced` (and sets ``lost``) otherwise."""
        e = self.election
        try:
            return e.client.fenced(e.name, self.token, *command)
        except Fenced:
            self.lost._mark(LostReason.NOT_HELD)
            raise

    def resign(self) -> _core.Release:
        """Ends the term: deletes the proclaimed value (fenced) and releases the lock,
        which hands it to the next campaigner in line. :data:`~dlock.Released`, or
        :data:`~dlock.Lost` when the term had already ended."""
        with self._mu:
            if self._done:
                return _core.Release.LOST if self.lost.is_set() else _core.Release.RELEASED
            self._done = True
        self._watchdog.stop()
        self._stop_monitor.set()
        e = self.election
        try:
            e.client.fenced(e.name, self.token, "DEL", e.value_key)
        except Fenced:
            pass
        try:
            outcome = _core.parse_release(e.client.execute("DLOCK.RELEASE", e.name, self.owner))
        except NotHeld:
            outcome = _core.Release.LOST
        finally:
            self._close_conn()
        if outcome is _core.Release.LOST:
            self.lost._mark(LostReason.NOT_HELD)
        else:
            self.lost._set_deadline(None)
        return outcome

    def _close_conn(self) -> None:
        c, self._conn = self._conn, None
        if c is not None:
            try:
                c.close()
            except Exception:
                pass

    def __enter__(self) -> "Term":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.resign()

    def __repr__(self) -> str:
        return f"<Term {self.election.name!r} token={self.token} lost={self.lost.is_set()}>"


class Election:
    """Leader election on one fair lock (etcd's ``concurrency.Election``, Curator's
    ``LeaderLatch``), on a standalone ``redis.Redis``.

    * :meth:`campaign` waits **on the server**, in FIFO order, until this process leads
      (``DLOCK.FAIRACQUIRE name owner PX lease WAIT … [BIND] [LOCKDELAY ms]``), and
      returns a :class:`Term` (watchdog-renewed, with its ``lost`` signal).
    * ``bind=True``: the term is bound to a connection of its own, so a process that
      dies loses leadership at once (``disconnected``) instead of after the lease.
    * ``lock_delay`` (s): after a term that ends other than by resigning, nobody leads
      for that long (Chubby's lock-delay).
    * :meth:`leader` reads who leads (``DLOCK.INFO``) and what it proclaimed;
      :meth:`observe` reports every change, driven by the lock's notifications.
    * ``lease`` (default: the client's watchdog lease) and ``renew_interval`` (default
      a third of the lease) set the term's watchdog.
    """

    def __init__(
        self,
        client: Client,
        name: str,
        *,
        owner: Optional[str] = None,
        lease: Optional[float] = None,
        renew_interval: Optional[float] = None,
        bind: bool = False,
        lock_delay: Optional[float] = None,
    ) -> None:
        if client._cluster:
            raise ValueError("Election needs a standalone redis.Redis (cluster: not yet)")
        self.client = client
        self.name = name
        self.owner = owner if owner is not None else f"{client.owner()}:election{next(_RUNS)}"
        self.lease = _core.check_lease(lease if lease is not None else client.watchdog_lease)
        self.renew_interval = float(renew_interval if renew_interval is not None else self.lease / 3.0)
        self.bind = bind
        self.lock_delay = lock_delay
        self.value_key = value_key(name)
        self.channel = _core.channel_for(name)
        self.term: Optional[Term] = None

    # -- campaigning ------------------------------------------------------------

    def _dedicated(self) -> Any:
        """A client of its own connection (no retries: a resent acquire on a new
        connection would be a new, silent term)."""
        kw: Dict[str, Any] = _core.connection_kwargs(self.client.redis)
        for k in ("retry", "retry_on_timeout", "retry_on_error", "connection_pool", "single_connection_client"):
            kw.pop(k, None)
        kw["retry"] = Retry(NoBackoff(), 0)
        pool = _redis.ConnectionPool(
            connection_class=self.client.redis.connection_pool.connection_class, max_connections=1, **kw
        )
        return _redis.Redis(connection_pool=pool, single_connection_client=True)

    def campaign(self, timeout: Optional[float] = None) -> Optional[Term]:
        """Waits until this process leads (or ``timeout`` s pass: None). Waiting is on
        the server, FIFO among campaigners, on a connection of its own."""
        old = self.term
        if old is not None and not old._done:
            if not old.is_lost():
                return old
            old.resign()  # a lost term: stop its monitor, close its bound connection
        conn = self._dedicated()
        slice_ = _core.wait_slice_for(conn, self.client.wait_slice)
        lms = _core.lease_ms(self.lease)
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        extra = []
        if self.bind:
            extra.append("BIND")
        if self.lock_delay:
            extra += ["LOCKDELAY", _core.ceil_ms(self.lock_delay)]
        try:
            while True:
                sent = time.monotonic()
                left = slice_ if deadline is None else max(0.0, deadline - sent)
                wms = int(min(left, slice_) * 1000)
                reply = conn.execute_command(
                    "DLOCK.FAIRACQUIRE", self.name, self.owner, "PX", lms, "WAIT", wms, *extra
                )
                token = _core.parse_token(reply)
                if token is not None:
                    now = time.monotonic()
                    if now - sent > _core.lease_clock_slack(self.lease):
                        # Granted late in a long wait: restart the lease from a known instant.
                        if conn.execute_command("DLOCK.RENEW", self.name, self.owner, "PX", lms) != 1:
                            continue
                        sent = now
                    break
                if deadline is not None and time.monotonic() >= deadline:
                    conn.close()
                    return None
        except BaseException:
            conn.close()
            raise
        if not self.bind:
            conn.close()
            conn = None
        self.term = Term(self, token, sent, conn)
        self._publish("elected")
        return self.term

    def _publish(self, what: str) -> None:
        """Tells observers to look again (on the lock's own channel: every client
        treats any message there as "look again")."""
        try:
            self.client.execute("PUBLISH", self.channel, what)
        except Exception:
            pass

    def resign(self) -> Optional[_core.Release]:
        """Resigns the current term of this object (None when there is none)."""
        t = self.term
        return None if t is None else t.resign()

    def proclaim(self, value: Any) -> None:
        """:meth:`Term.proclaim` of the current term; raises :class:`~dlock.NotHeld`
        when this object does not lead."""
        t = self.term
        if t is None or t._done:
            raise NotHeld(f"not the leader of {self.name!r}: campaign first")
        t.proclaim(value)

    # -- observing --------------------------------------------------------------

    def leader(self) -> Optional[Leader]:
        """Who leads now (``DLOCK.INFO``) and the value it proclaimed in this term —
        None when nobody leads (also during a lock-delay after a lost term). One
        MULTI/EXEC, so the value read belongs to the holder read."""
        pipe = self.client.redis.pipeline(transaction=True)
        pipe.execute_command("DLOCK.INFO", self.name)
        pipe.hgetall(self.value_key)
        info_raw, proclaimed = pipe.execute()
        info = _core.parse_info(info_raw)
        if not info:
            return None
        for h in info.get("holders") or []:
            if not isinstance(h, dict) or h.get("delayed") is not None:
                continue
            token = int(h.get("token") or 0)
            fields = {_text(k): v for k, v in (proclaimed or {}).items()}
            value = None
            if fields.get("token") is not None and int(fields["token"]) == token:
                value = _value(fields.get("value"))
            return Leader(_text(h.get("owner")), token, value)
        return None

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


class Observer:
    """Leader changes of one :class:`Election` (see :meth:`Election.observe`)."""

    _UNSEEN: Any = object()

    def __init__(self, election: Election) -> None:
        self.election = election
        self._ps = election.client.redis.pubsub(ignore_subscribe_messages=True)
        self._ps.subscribe(election.channel)  # subscribed first, then read: nothing missed
        self._last: Any = Observer._UNSEEN
        self._closed = False
        self._thread: Optional[threading.Thread] = None

    def next(self, timeout: Optional[float] = None) -> Optional[Leader]:
        """The next state that differs from the last one returned (the first call: the
        current state). Raises ``TimeoutError`` when nothing changed within ``timeout``."""
        end = None if timeout is None else time.monotonic() + timeout
        dirty = self._last is Observer._UNSEEN
        while True:
            if dirty:
                now = self.election.leader()
                if now != self._last:
                    self._last = now
                    return now
            left = 1.0 if end is None else end - time.monotonic()
            if left <= 0:
                raise TimeoutError("no leader change")
            if self._closed:
                raise StopIteration
            msg = self._ps.get_message(timeout=min(left, 1.0))
            dirty = msg is not None

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
        try:
            self._ps.close()
        except Exception:
            pass

    def __enter__(self) -> "Observer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
