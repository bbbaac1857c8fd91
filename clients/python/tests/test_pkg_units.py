"""The pure rules shared by both flavours (no server)."""

from __future__ import annotations

import redis

import dlock
from dlock import _core
from dlock._core import Kind, Renewal, Schedule
from dlock.errors import map_error


def test_channel_for_follows_the_hash_tag_rule() -> None:
    assert dlock.channel_for("orders") == "dlock:{orders}"
    assert dlock.channel_for("{user1}:lock") == "dlock:{user1}:lock"
    assert dlock.channel_for("{}x") == "dlock:{{}x}"  # empty tag: not a tag
    assert dlock.channel_for(b"a{b}") == b"dlock:a{b}"


def test_commands() -> None:
    assert _core.acquire_args(Kind.READ, "k", "o", 100, 0) == [
        "DLOCK.RWACQUIRE", "k", "o", "READ", "PX", 100, "WAIT", 0]
    assert _core.acquire_args(Kind.SEMAPHORE, "s", "o", 5, 7, limit=3, permits=2, bind=True,
                              lock_delay=50) == [
        "DLOCK.SEMACQUIRE", "s", "o", "LIMIT", 3, "PERMITS", 2, "PX", 5, "WAIT", 7,
        "BIND", "LOCKDELAY", 50]
    assert _core.release_args(Kind.WRITE, "k", "o") == ["DLOCK.RELEASE", "k", "o", "WRITE"]
    assert _core.release_args(Kind.SEMAPHORE, "k", "o", 3) == [
        "DLOCK.RELEASE", "k", "o", "PERMITS", 3]
    assert _core.lease_ms(0.0001) == 1 and _core.lease_ms(1.5) == 1500


def test_schedule_gives_up_before_the_lease_ends() -> None:
    s = Schedule(1.0, 0.3, 100.0)
    assert s.wake_at() == 100.3
    assert abs(s.lost_at() - 100.94) < 1e-9  # 1 s - (10 ms + 50 ms)
    s.failed(100.3)
    assert abs(s.wake_at() - 100.4) < 1e-9
    assert s.attempt_timeout(100.9) <= 0.0401
    s.renewed(100.4)
    assert abs(s.lost_at() - 101.34) < 1e-9


def test_redlock_rules() -> None:
    assert _core.quorum_of(3) == 2 and _core.quorum_of(5) == 3 and _core.quorum_of(1) == 1
    assert _core.granted_until([1, None, 3], 2, 0.0, 0.1, 10.0) == 10.0 - 0.15
    assert _core.granted_until([1, None, None], 2, 0.0, 0.1, 10.0) is None
    assert _core.granted_until([1, 2, 3], 2, 0.0, 9.95, 10.0) is None  # validity gone
    assert _core.renewal_outcome([True, True, None], 2) is Renewal.RENEWED
    assert _core.renewal_outcome([False, False, True], 2) is Renewal.LOST
    assert _core.renewal_outcome([True, None, False], 2) is Renewal.FAILED


def test_error_mapping_by_code() -> None:
    cases = {
        "NOTHELD the owner does not hold this lock": dlock.NotHeld,
        "DEADLOCK another reader already waits": dlock.Deadlock,
        "WRONGKIND the key holds an rw lock": dlock.WrongKind,
        "WRONGTYPE Operation against a key holding the wrong kind of value": dlock.WrongType,
        "QUEUEFULL the lock's queue is full": dlock.QueueFull,
        "FENCED the token is not live": dlock.Fenced,
        "unknown command 'DLOCK.X', with args beginning with: ": dlock.ModuleNotLoaded,
        "PX must be an integer number of milliseconds": dlock.InvalidArgument,
    }
    for msg, cls in cases.items():
        e = map_error(redis.ResponseError(msg))
        assert type(e) is cls, msg
        assert isinstance(e, redis.ResponseError) and isinstance(e, dlock.DlockError)
        if cls is dlock.ModuleNotLoaded:  # the server's words, then how to load the module
            assert str(e).startswith(msg) and "MODULE LIST" in str(e)
        elif cls is dlock.WrongType:  # the server's words, then what the key holds
            assert str(e).startswith(msg) and "not a dlock lock" in str(e)
            assert isinstance(e, dlock.WrongKind)
        else:
            assert str(e) == msg
    # FENCED's inner command keeps its own errors.
    inner = redis.ResponseError("value is not an integer or out of range")
    assert map_error(inner, own_errors=False) is inner
    # redis-py's own subclasses are left alone.
    ro = redis.exceptions.ReadOnlyError("You can't write against a read only replica.")
    assert map_error(ro) is ro


def test_release_enum_aliases() -> None:
    assert dlock.Released is dlock.Release.RELEASED
    assert dlock.StillHeld is dlock.Release.STILL_HELD
    assert dlock.Lost is dlock.Release.LOST
    assert dlock.Unknown is dlock.Release.UNKNOWN


def test_wait_slice_fits_the_socket_timeout() -> None:
    # min(slice, T - max(100 ms, T / 5)), at least 10 ms
    r = redis.Redis(socket_timeout=1.0)
    assert abs(_core.wait_slice_for(r, 5.0) - 0.8) < 1e-9
    assert _core.wait_slice_for(redis.Redis(socket_timeout=None), 5.0) == 5.0
    assert _core.wait_slice_for(redis.Redis(socket_timeout=0.04), 5.0) == 0.01


def test_lock_errors_keep_their_message() -> None:
    """AcquireTimeout is redis-py's LockError and a TimeoutError at once: its message,
    str() and repr() survive either redis-py (5's LockError.__init__ keeps no args, 8's
    repr() reads error_type)."""
    for e in (dlock.AcquireTimeout("could not acquire 'k' within 1 s"),
              dlock.NotHeld("NOTHELD the owner does not hold this lock")):
        assert str(e) and e.args == (str(e),)
        assert repr(e)
        assert isinstance(e, redis.exceptions.LockError)
