"""The sans-IO core (dlock._ops) driven by a fake: no server, no sockets, no sleeping.

The same generators the sync and asyncio flavours run are stepped here with a scripted
"server" and a fake clock, to show the core does no I/O of its own."""

from __future__ import annotations

import time
from typing import Any, Callable, List, Optional, Tuple

import pytest
import redis

import dlock
from dlock import _ops
from dlock._core import LostReason, Renewal, WaitMode
from dlock._lost import LostSignal


class FakeWatchdog:
    """Records that a watchdog was started; never renews."""

    started: List["FakeWatchdog"] = []

    def __init__(self, renew: Any, lease: float, interval: float, confirmed: float,
                 on_lost: Any, reason: LostReason) -> None:
        self.renew, self.lease, self.confirmed, self.on_lost = renew, lease, confirmed, on_lost
        self.stopped = False
        self.last_renewed: Optional[float] = None
        FakeWatchdog.started.append(self)

    def stop(self) -> None:
        self.stopped = True


#: Operations the core asked to run in the background (a DLOCK.CANCEL, a check).
BACKGROUND: List[Any] = []

FAKE = _ops.Flavour(
    signal=LostSignal,
    watchdog=FakeWatchdog,
    tag=lambda: 1,
    who="thread",
    redis_module="redis",
    lanes=lambda r: None,
    notices=lambda c: _ops.NoNotices(),
    background=lambda c, op: BACKGROUND.append(op),
)


class FakeClient(_ops.ClientCore[LostSignal, Any, Any, Any, Any, Any]):
    _flavour = FAKE


class Lock(_ops.LockCore[FakeClient, LostSignal]):
    pass


#: The fake clock's start: ahead of the real monotonic clock, which lost signals read
#: (the lease clock of a hold granted at T0 is not over at once).
T0 = float(int(time.monotonic()) + 1000)


class Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> float:
        return self.t


def drive(op: Any, server: Callable[[Tuple[Any, ...]], Any], clock: Clock,
          log: List[Any]) -> Any:
    """A fake driver: answers Call from ``server`` (which may advance the clock, or
    return an exception to raise), Sleep by moving the clock."""
    st: _ops.Stepper[Any] = _ops.Stepper(op, clock=clock)
    eff = st.next()
    while eff is not None:
        log.append(eff)
        if isinstance(eff, _ops.Call):
            reply = server(eff.args)
            if isinstance(reply, BaseException):
                st.fail(reply)
            else:
                st.answer((reply, None) if eff.park else reply)
        elif isinstance(eff, _ops.Sleep):
            clock.t += eff.seconds
        else:  # pragma: no cover
            raise AssertionError(f"unexpected effect {eff!r}")
        eff = st.next()
    return st.result


def calls(log: List[Any]) -> List[Tuple[Any, ...]]:
    return [e.args for e in log if isinstance(e, _ops.Call)]


def client(**kw: Any) -> FakeClient:
    # socket_timeout=None: server-side waits of up to wait_slice; nothing is connected.
    return FakeClient(redis.Redis(socket_timeout=None), owner_prefix="me", wait_slice=2.0, **kw)


def test_acquire_waits_in_slices_until_granted() -> None:
    FakeWatchdog.started.clear()
    c = client(watchdog_lease=30.0)
    lock = Lock(c, "orders")
    clock = Clock()
    answers = [None, None, 7]  # two slices time out on the server, the third is granted

    def server(args: Tuple[Any, ...]) -> Any:
        assert args[0] == "DLOCK.ACQUIRE"
        clock.t += args[args.index("WAIT") + 1] / 1000.0 if answers[0] is None else 0.01
        return answers.pop(0)

    log: List[Any] = []
    assert drive(lock._op_acquire(None, True, 10.0, None), server, clock, log) is True
    assert calls(log) == [
        ("DLOCK.ACQUIRE", "orders", "me:1", "PX", 30000, "WAIT", 2000),
        ("DLOCK.ACQUIRE", "orders", "me:1", "PX", 30000, "WAIT", 2000),
        ("DLOCK.ACQUIRE", "orders", "me:1", "PX", 30000, "WAIT", 2000),
    ]
    assert lock.token == 7 and lock.held()
    # Under the watchdog, whose lease clock starts when the granting request was sent.
    (wd,) = FakeWatchdog.started
    assert wd.lease == 30.0 and wd.confirmed == T0 + 4.0


def test_acquire_gives_up_at_the_timeout() -> None:
    c = client()
    lock = Lock(c, "orders")
    clock = Clock()

    def server(args: Tuple[Any, ...]) -> Any:
        clock.t += args[args.index("WAIT") + 1] / 1000.0
        return None

    log: List[Any] = []
    assert drive(lock._op_acquire(None, True, 3.0, 5.0), server, clock, log) is False
    waits = [a[a.index("WAIT") + 1] for a in calls(log)]
    assert waits == [2000, 1000]  # a full slice, then what was left of the 3 s
    assert lock.token is None and not lock.held()


def test_long_wait_re_anchors_the_lease_with_a_renew() -> None:
    c = client()
    lock = Lock(c, "k")
    clock = Clock()

    def server(args: Tuple[Any, ...]) -> Any:
        if args[0] == "DLOCK.ACQUIRE":
            clock.t += 3.0  # the grant came after more than a quarter of the 10 s lease
            return 5
        assert args == ("DLOCK.RENEW", "k", "me:1", "PX", 10000)
        return 1

    log: List[Any] = []
    assert drive(lock._op_acquire(None, True, None, 10.0), server, clock, log) is True
    assert [a[0] for a in calls(log)] == ["DLOCK.ACQUIRE", "DLOCK.RENEW"]
    # The explicit lease counts from the RENEW (sent at T0 + 3), less the margin
    # (1 % + 50 ms).
    assert lock.lost.deadline == pytest.approx(T0 + 3.0 + 10.0 - 0.15)


def test_release_outcomes_and_bookkeeping() -> None:
    FakeWatchdog.started.clear()
    c = client()
    lock = Lock(c, "k")
    clock = Clock()
    replies: List[Any] = [3, 3, 0, 1]  # two grants (reentrant), then two releases
    log: List[Any] = []

    def server(args: Tuple[Any, ...]) -> Any:
        return replies.pop(0)

    assert drive(lock._op_acquire(None, True, 0, None), server, clock, log)
    assert drive(lock._op_acquire(None, True, 0, None), server, clock, log)
    (wd,) = FakeWatchdog.started  # one hold, one watchdog
    assert drive(lock._op_release(), server, clock, log) is dlock.StillHeld
    assert not wd.stopped and lock.held()
    assert drive(lock._op_release(), server, clock, log) is dlock.Released
    assert wd.stopped and not lock.held() and not lock.lost.is_set()
    assert calls(log)[-1] == ("DLOCK.RELEASE", "k", "me:1")


def test_release_of_a_lost_hold_and_of_none() -> None:
    seen: List[Any] = []
    c = client(on_lost=lambda k, r: seen.append((k, r)))
    lock = Lock(c, "k")
    clock = Clock()
    log: List[Any] = []
    notheld = redis.ResponseError("NOTHELD the owner does not hold this lock")
    replies: List[Any] = [4, notheld, notheld]

    def server(args: Tuple[Any, ...]) -> Any:
        return replies.pop(0)

    assert drive(lock._op_acquire(None, True, 0, 5.0), server, clock, log)
    assert drive(lock._op_release(), server, clock, log) is dlock.Lost
    assert lock.lost.reason is LostReason.NOT_HELD
    assert seen == [("k", LostReason.NOT_HELD)]
    with pytest.raises(dlock.NotHeld):  # never held: the error is the caller's
        drive(lock._op_release(), server, clock, log)


def test_notify_mode_subscribes_then_asks_again() -> None:
    c = client()
    lock = Lock(c, "k", wait_mode=WaitMode.NOTIFY)
    clock = Clock()
    replies: List[Any] = [None, None, 9]
    effects: List[Any] = []
    op = lock._op_acquire(None, True, 5.0, None)
    st: _ops.Stepper[Any] = _ops.Stepper(op, clock=clock)
    eff = st.next()
    while eff is not None:
        effects.append(type(eff).__name__)
        if isinstance(eff, _ops.Call):
            r = replies.pop(0)
            st.answer((r, None) if eff.park else r)
        elif isinstance(eff, _ops.Subscribe):
            assert eff.channel == "dlock:{k}"
        eff = st.next()
    assert st.result is True
    assert effects == ["Call", "Subscribe", "Call", "NextMessage", "Call", "Unsubscribe"]


def test_watchdog_state_machine() -> None:
    w = _ops.WatchdogState(lease=3.0, interval=1.0, confirmed=100.0, lost_reason=LostReason.NOT_HELD)
    assert w.due(100.5) == (_ops.Step.WAIT, 101.0)
    step, timeout = w.due(101.0)
    assert step is _ops.Step.RENEW and 0 < timeout <= 2.0  # two intervals at most
    assert w.due(101.1)[0] is _ops.Step.WAIT  # in flight: wakes at the latest at the end
    assert w.done(Renewal.RENEWED, 101.0, 101.2) is None and w.last_renewed == 101.0
    assert w.due(101.5) == (_ops.Step.WAIT, 102.0)
    assert w.due(102.0)[0] is _ops.Step.RENEW
    assert w.done(Renewal.FAILED, 102.0, 102.1) is None
    assert w.due(105.0) == (_ops.Step.LOST, LostReason.UNREACHABLE)
    assert w.due(105.0) == (_ops.Step.DONE, None)
