"""The sans-IO core of the recipes (:func:`run_once`, :class:`Election`), shared by
:mod:`dlock.recipes` (threads, blocking calls) and :mod:`dlock.aio_recipes` (tasks,
coroutines).

Every step that talks to a server is an operation of :mod:`dlock._ops` (a generator of
effects), written once here; the flavours drive them with their own ``_run`` and add
only what differs: whether a background loop is a thread or a task, and the lost
signal's type (from the client's flavour). A dedicated connection, a pub/sub and a
pipeline are the flavour's redis-py objects, used through :class:`~dlock._ops.Invoke`.
"""

from __future__ import annotations

import enum
import importlib
import itertools
import threading
from dataclasses import dataclass
from typing import Any, Callable, Dict, Generic, List, Optional, Sequence, TypeVar

from redis.backoff import NoBackoff

from . import _core, _ops
from ._core import LostReason, Release, Renewal
from ._ops import NOW, Invoke, Op, command
from .errors import Fenced, NotHeld

T = TypeVar("T")
_RUNS = itertools.count(1)


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


def _closer(obj: Any) -> Callable[[], Any]:
    """``aclose`` of an asyncio redis-py object, ``close`` of a sync one."""
    return getattr(obj, "aclose", None) or obj.close


def op_close(obj: Any) -> Op[None]:
    """Closes a connection or pub/sub of the flavour; errors are ignored."""
    if obj is None:
        return
    try:
        yield Invoke(_closer(obj))
    except Exception:  # noqa: BLE001 - closing is best effort
        pass


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


class Run:
    """One :func:`run_once` run: a fresh owner (never reentrant: a second run in the
    same thread while the hold is kept is skipped like anyone else's), its token and
    lost signal, and the operations of its start, renewals and end."""

    def __init__(self, client: Any, name: str, at_most_for: float, at_least_for: float,
                 owner: Optional[str]) -> None:
        self.at_most_for = _core.check_lease(at_most_for, "at_most_for")
        if not 0 <= at_least_for <= self.at_most_for:
            raise ValueError(
                f"at_least_for must be between 0 and at_most_for ({self.at_most_for}), "
                f"got {at_least_for!r}"
            )
        self.at_least_for = float(at_least_for)
        self.client = client
        self.name = name
        self.who = f"{owner if owner is not None else client._owner_id()}:run{next(_RUNS)}"
        self.token: Optional[int] = None
        self.start = 0.0
        self.lost: Any = client._flavour.signal(None)

    def op_start(self) -> Op[bool]:
        """One try (``WAIT 0``): True when this run holds the lock."""
        lms = _core.lease_ms(self.at_most_for)
        self.start = yield NOW
        reply = yield from command(self.client, "DLOCK.ACQUIRE", self.name, self.who, "PX", lms, "WAIT", 0)
        self.token = _core.parse_token(reply)
        if self.token is None:
            return False
        self.lost._set_deadline(self.start + self.at_most_for - _core.lost_margin(self.at_most_for))
        return True

    @property
    def renew_every(self) -> float:
        return self.at_most_for / 3.0

    def op_renew(self) -> Op[Optional[float]]:
        """One renewal: the pause before the next one, or None when renewing is over."""
        lease, lost = self.at_most_for, self.lost
        if lost.is_set():
            return None
        sent = yield NOW
        try:
            ok = yield from command(self.client, "DLOCK.RENEW", self.name, self.who, "PX", _core.lease_ms(lease))
        except Exception:  # noqa: BLE001 - the deadline makes it lost if nothing gets through
            return max(0.02, lease / 10.0)
        if ok == 1:
            if not lost._extend(sent + lease - _core.lost_margin(lease)):
                return None  # the lease clock ran out first: it stays lost
            return self.renew_every
        lost._mark(LostReason.NOT_HELD)
        return None

    def op_finish(self) -> Op[None]:
        """The end of a run: keep the hold for what is left of ``at_least_for``, else
        release it. Marks ``lost`` when the server says the hold was gone."""
        lost = self.lost
        if lost.is_set():
            try:  # ours may still be there (only unreachable): let it go
                yield from command(self.client, "DLOCK.RELEASE", self.name, self.who)
            except Exception:  # noqa: BLE001
                pass
            return
        left = self.start + self.at_least_for - (yield NOW)
        try:
            if left > 0.0005:
                args = ("DLOCK.RENEW", self.name, self.who, "PX", _core.lease_ms(left))
                if (yield from command(self.client, *args)) != 1:
                    lost._mark(LostReason.NOT_HELD)
            else:
                yield from command(self.client, "DLOCK.RELEASE", self.name, self.who)
            lost._set_deadline(None)  # the run is over and the hold was ours to the end
        except NotHeld:
            lost._mark(LostReason.NOT_HELD)

    def result(self, value: Any) -> RunResult[Any]:
        if self.lost.is_set():
            return RunResult(Outcome.LOST, value, self.token, self.lost.reason)
        return RunResult(Outcome.RAN, value, self.token)


class Bound:
    """``fenced`` / ``check`` bound to one token of one lock; a dead token sets
    ``lost``. (What a job gets, and what a term is.)"""

    client: Any
    name: str
    token: int
    lost: Any

    def _op_fenced(self, command_: Sequence[Any]) -> Op[Any]:
        try:
            return (yield from self.client._op_fenced(self.name, self.token, command_))
        except Fenced:
            self.lost._mark(LostReason.NOT_HELD)
            raise

    def _op_check(self, reason: LostReason = LostReason.NOT_HELD) -> Op[bool]:
        live = yield from self.client._op_check(self.name, self.token)
        if not live:
            self.lost._mark(reason)
        return live


class JobCore(Bound):
    """What the job gets: ``token`` (fencing token of this run), ``lost`` (set the
    moment the hold is known to be over), and ``fenced(*command)`` / ``check()`` bound
    to the run's token."""

    def __init__(self, run: Run) -> None:
        self.client = run.client
        self.name = run.name
        self.owner = run.who
        assert run.token is not None
        self.token = run.token
        self.lost = run.lost


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


class TermCore(Bound):
    """A won campaign: leadership until :meth:`resign` or until it is lost.

    ``token`` is the term's fencing token (strictly greater than every earlier term's);
    ``lost`` is set the moment leadership is known to be over — a renewal answered 0,
    no renewal got through before the lease would end (it turns set by itself at that
    instant, even in a process that was paused), or a notification on the lock's
    channel after which ``DLOCK.CHECK`` says the token is no longer live
    (force-release, a ``BIND`` connection that closed)."""

    def __init__(self, election: "ElectionCore", token: int, start: float, conn: Optional[Any]) -> None:
        self.election = election
        self.client = client = election.client
        self.name = election.name
        self.token = token
        self.owner = election.owner
        lease = election.lease
        self.lost = client._flavour.signal(start + lease - _core.lost_margin(lease),
                                           LostReason.UNREACHABLE)
        self._conn = conn
        self._done = False
        self._mu = threading.Lock()
        args = ("DLOCK.RENEW", election.name, self.owner, "PX", _core.lease_ms(lease))

        def renew(timeout: float) -> Op[Renewal]:
            sent = yield NOW
            try:
                v = yield from command(client, *args)
            except Exception:  # noqa: BLE001
                return Renewal.FAILED
            if v == 1:
                if not self.lost._extend(sent + lease - _core.lost_margin(lease)):
                    return Renewal.FAILED  # the lease clock ran out first: stays lost
                return Renewal.RENEWED
            return Renewal.LOST if v == 0 else Renewal.FAILED

        self._watchdog = client._flavour.watchdog(
            renew, lease, election.renew_interval, start, self.lost._mark, LostReason.NOT_HELD
        )

    def is_lost(self) -> bool:
        """True once leadership is known to be over."""
        return self.lost.is_set()

    def _watch(self, ps: Any) -> None:  # pragma: no cover - every flavour defines it
        """Runs :meth:`_op_monitor` on ``ps`` in the background (a thread, a task)."""
        raise NotImplementedError

    def _op_subscribe(self) -> Op[Any]:
        ps = self.client.redis.pubsub(ignore_subscribe_messages=True)
        yield Invoke(ps.subscribe, self.election.channel)
        return ps

    def _op_monitor(self, ps: Any) -> Op[None]:
        """Any message on the lock's channel: is the term's token still live? When it
        is not, the reason is the last notice of the module (``released``,
        ``expired``, ``deleted``, ``disconnected``) that came — also one that came while
        the check was on its way."""
        last: Optional[str] = None

        def note(msg: Any) -> None:
            nonlocal last
            kind = _text(msg.get("data")) if isinstance(msg, dict) else ""
            if kind in _core.NOTICE_REASONS:
                last = kind

        try:
            while not self._done and not self.lost.is_set():
                msg = yield Invoke(ps.get_message, timeout=0.5)
                if msg is None or self._done:
                    continue
                note(msg)
                live = yield from self.client._op_check(self.name, self.token)
                if live or self._done:
                    continue
                while True:  # what else arrived meanwhile
                    msg = yield Invoke(ps.get_message, timeout=0.05)
                    if msg is None:
                        break
                    note(msg)
                reason = _core.NOTICE_REASONS.get(last or "", LostReason.NOT_HELD)
                self.lost._mark(reason)
        except Exception:  # noqa: BLE001 - the watchdog still decides
            pass
        finally:
            yield from op_close(ps)

    def _op_proclaim(self, value: Any) -> Op[None]:
        e = self.election
        args = ("HSET", e.value_key, "token", self.token, "owner", self.owner, "value", value)
        yield from self._op_fenced(args)
        yield from e._op_publish("proclaimed")

    def _op_stopped(self) -> Op[None]:
        """After the term's connection closed: the flavour waits for its monitor."""
        return
        yield  # pragma: no cover

    def _op_resign(self) -> Op[Release]:
        """Ends the term: deletes the proclaimed value (fenced) and releases the lock,
        which hands it to the next campaigner in line. ``Released``, or ``Lost`` when
        the term had already ended."""
        with self._mu:
            if self._done:
                return Release.LOST if self.lost.is_set() else Release.RELEASED
            self._done = True
        self._watchdog.stop()
        e = self.election
        try:
            yield from self.client._op_fenced(e.name, self.token, ("DEL", e.value_key))
        except Fenced:
            pass
        try:
            outcome = _core.parse_release(
                (yield from command(self.client, "DLOCK.RELEASE", e.name, self.owner))
            )
        except NotHeld:
            outcome = Release.LOST
        finally:
            conn, self._conn = self._conn, None
            yield from op_close(conn)
            yield from self._op_stopped()
        if outcome is Release.LOST:
            self.lost._mark(LostReason.NOT_HELD)
        else:
            self.lost._set_deadline(None)
        return outcome

    def __repr__(self) -> str:
        return f"<Term {self.election.name!r} token={self.token} lost={self.lost.is_set()}>"


class ElectionCore:
    """Leader election on one fair lock (etcd's ``concurrency.Election``, Curator's
    ``LeaderLatch``), on a standalone redis-py client.

    * ``campaign`` waits **on the server**, in FIFO order, until this process leads
      (``DLOCK.FAIRACQUIRE name owner PX lease WAIT … [BIND] [LOCKDELAY ms]``), and
      returns a term (watchdog-renewed, with its ``lost`` signal). A campaign that
      gives up (its timeout, a cancellation, an interruption) gives its place in line
      up at once (``DLOCK.CANCEL``).
    * ``bind=True``: the term is bound to a connection of its own, so a process that
      dies loses leadership at once (``disconnected``) instead of after the lease.
    * ``lock_delay`` (s): after a term that ends other than by resigning, nobody leads
      for that long (Chubby's lock-delay).
    * ``leader`` reads who leads (``DLOCK.INFO``) and what it proclaimed; ``observe``
      reports every change, driven by the lock's notifications.
    * ``lease`` (default: the client's watchdog lease) and ``renew_interval`` (default
      a third of the lease) set the term's watchdog.
    """

    #: The flavour's term class.
    _term: Callable[..., TermCore]

    def __init__(
        self,
        client: Any,
        name: str,
        *,
        owner: Optional[str] = None,
        lease: Optional[float] = None,
        renew_interval: Optional[float] = None,
        bind: bool = False,
        lock_delay: Optional[float] = None,
    ) -> None:
        adapter = getattr(client.redis, "dlock_adapter", None)
        if adapter is not None:
            raise ValueError(
                f"Election needs a redis-py client (pub/sub, a pipeline, a connection of its "
                f"own); the {adapter} adapter has none of them: use run_once, or locks"
            )
        if client._cluster:
            raise ValueError(
                f"Election needs a standalone {client._flavour.redis_module}.Redis "
                "(cluster: not yet)"
            )
        self.client = client
        self.name = name
        self.owner = owner if owner is not None else f"{client._owner_id()}:election{next(_RUNS)}"
        self.lease = _core.check_lease(lease if lease is not None else client.watchdog_lease)
        self.renew_interval = (
            self.lease / 3.0
            if renew_interval is None
            else _core.check_renew_interval(renew_interval, self.lease)
        )
        self.bind = bind
        self.lock_delay = lock_delay
        self.value_key = value_key(name)
        self.channel = _core.channel_for(name)
        self.term: Optional[Any] = None

    def _dedicated(self) -> Any:
        """A client of its own connection (no retries: a resent acquire on a new
        connection would be a new, silent term)."""
        module = self.client._flavour.redis_module
        redis = importlib.import_module(module)
        retry = importlib.import_module(module + ".retry").Retry
        kw: Dict[str, Any] = _core.connection_kwargs(self.client.redis)
        for k in ("retry", "retry_on_timeout", "retry_on_error", "connection_pool", "single_connection_client"):
            kw.pop(k, None)
        kw["retry"] = retry(NoBackoff(), 0)
        pool = redis.ConnectionPool(
            connection_class=self.client.redis.connection_pool.connection_class, max_connections=1, **kw
        )
        return redis.Redis(connection_pool=pool, single_connection_client=True)

    def _op_campaign(self, timeout: Optional[float]) -> Op[Optional[Any]]:
        old = self.term
        if old is not None and not old._done:
            if not old.is_lost():
                return old
            yield from old._op_resign()  # a lost term: stop its monitor, close its connection
        conn = self._dedicated()
        slice_ = _core.wait_slice_for(conn, self.client.wait_slice)
        lms = _core.lease_ms(self.lease)
        start = yield NOW
        deadline = None if timeout is None else start + max(0.0, timeout)
        extra: List[Any] = []
        if self.bind:
            extra.append("BIND")
        if self.lock_delay:
            extra += ["LOCKDELAY", _core.ceil_ms(self.lock_delay)]
        acquire = ("DLOCK.FAIRACQUIRE", self.name, self.owner, "PX", lms)
        token: Optional[int] = None
        try:
            while True:
                sent = yield NOW
                left = slice_ if deadline is None else max(0.0, deadline - sent)
                wms = int(min(left, slice_) * 1000)
                token = _core.parse_token(
                    (yield Invoke(conn.execute_command, *acquire, "WAIT", wms, *extra))
                )
                if token is not None:
                    now = yield NOW
                    if now - sent > _core.lease_clock_slack(self.lease):
                        # Granted late in a long wait: restart the lease from a known instant.
                        renew = ("DLOCK.RENEW", self.name, self.owner, "PX", lms)
                        if (yield Invoke(conn.execute_command, *renew)) != 1:
                            continue
                        sent = now
                    break
                if deadline is not None and (yield NOW) >= deadline:
                    break
        except BaseException as e:
            yield from op_close(conn)
            if _ops.gave_up(e):  # no place in line may stay behind (in the background)
                self.client._give_up(self.name, self.owner)
            raise
        if token is None:  # the timeout passed: give the place in line up
            yield from op_close(conn)
            self.client._give_up(self.name, self.owner)
            return None
        if not self.bind:
            yield from op_close(conn)
            conn = None
        term = self._term(self, token, sent, conn)
        term._watch((yield from term._op_subscribe()))
        self.term = term
        yield from self._op_publish("elected")
        return term

    def _op_publish(self, what: str) -> Op[None]:
        """Tells observers to look again (on the lock's own channel: every client
        treats any message there as "look again")."""
        try:
            yield from command(self.client, "PUBLISH", self.channel, what)
        except Exception:  # noqa: BLE001
            pass

    def _op_resign(self) -> Op[Optional[Release]]:
        t = self.term
        return None if t is None else (yield from t._op_resign())

    def _op_proclaim(self, value: Any) -> Op[None]:
        t = self.term
        if t is None or t._done:
            raise NotHeld(f"not the leader of {self.name!r}: campaign first")
        yield from t._op_proclaim(value)

    def _op_leader(self) -> Op[Optional[Leader]]:
        """Who leads now (``DLOCK.INFO``) and the value it proclaimed in this term —
        None when nobody leads (also during a lock-delay after a lost term). One
        MULTI/EXEC, so the value read belongs to the holder read."""
        pipe = self.client.redis.pipeline(transaction=True)
        pipe.execute_command("DLOCK.INFO", self.name)
        pipe.hgetall(self.value_key)
        info_raw, proclaimed = yield Invoke(pipe.execute)
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


#: :meth:`ObserverCore._op_next` on a closed observer.
CLOSED: Any = object()


class ObserverCore:
    """Leader changes of one election."""

    _UNSEEN: Any = object()

    def __init__(self, election: ElectionCore) -> None:
        self.election = election
        self._ps = election.client.redis.pubsub(ignore_subscribe_messages=True)
        self._last: Any = ObserverCore._UNSEEN
        self._closed = False

    def _op_subscribe(self) -> Op[None]:
        # Subscribed first, then read: nothing is missed.
        yield Invoke(self._ps.subscribe, self.election.channel)

    def _op_next(self, timeout: Optional[float]) -> Op[Any]:
        """The next state that differs from the last one returned (the first call: the
        current state); ``TimeoutError`` when nothing changed within ``timeout``;
        :data:`CLOSED` once closed."""
        end = None if timeout is None else (yield NOW) + timeout
        dirty = self._last is ObserverCore._UNSEEN
        while True:
            if dirty:
                now = yield from self.election._op_leader()
                if now != self._last:
                    self._last = now
                    return now
            left = 1.0 if end is None else end - (yield NOW)
            if left <= 0:
                raise TimeoutError("no leader change")
            if self._closed:
                return CLOSED
            msg = yield Invoke(self._ps.get_message, timeout=min(left, 1.0))
            dirty = msg is not None

    def _op_close(self) -> Op[None]:
        self._closed = True
        yield from op_close(self._ps)
