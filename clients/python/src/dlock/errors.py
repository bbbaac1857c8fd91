"""Exceptions. Every error reply the dlock module gives for a known case becomes its own
class (all of them subclasses of :class:`DlockError` and of redis-py's
``redis.exceptions.ResponseError``, so existing ``except ResponseError`` still works).

=========================  ==============================================================
exception                  module reply
=========================  ==============================================================
:class:`NotHeld`           ``NOTHELD the owner does not hold this lock …``
:class:`Deadlock`          ``DEADLOCK another reader already waits to upgrade …``
:class:`WrongKind`         ``WRONGKIND the key holds a mutex|rw|fair|semaphore|latch …``
:class:`WrongType`         ``WRONGTYPE Operation against a key holding the wrong kind …``
:class:`QueueFull`         ``QUEUEFULL …`` (``dlock.max-queue`` places already taken)
:class:`Fenced`            ``FENCED …`` (``DLOCK.FENCED``: the token is not live)
:class:`NoReplicas`        ``NOREPLICAS …`` (``min-replicas-to-write`` not met)
:class:`UnknownCommand`    ``ERR unknown command 'DLOCK.…'`` (module not loaded, or older)
:class:`InvalidArgument`   any other ``ERR …`` of a lock command (bad option, limit, …)
=========================  ==============================================================
"""

from __future__ import annotations

from typing import Optional

from redis.exceptions import ResponseError


class DlockError(Exception):
    """Base class of every error raised by this package."""


class UnexpectedReply(DlockError):
    """The server answered something this client does not understand (is the dlock
    module loaded?)."""


class AcquireTimeout(DlockError, TimeoutError):
    """A ``with lock:`` block could not take the lock within the lock's ``timeout``."""


class DlockResponseError(DlockError, ResponseError):
    """An error reply of the dlock module. ``code`` is its first word (``NOTHELD``, …)."""

    code: str = ""

    def __init__(self, message: str, code: Optional[str] = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class NotHeld(DlockResponseError):
    """The owner does not hold the lock (never acquired, lease expired, force-released)."""

    code = "NOTHELD"


class Deadlock(DlockResponseError):
    """Two readers of an rw lock both asked to upgrade to WRITE: the second is refused."""

    code = "DEADLOCK"


class WrongKind(DlockResponseError):
    """The key holds a lock of another kind (e.g. ACQUIRE on an rw lock)."""

    code = "WRONGKIND"


class WrongType(DlockResponseError):
    """The key holds a Redis value that is not a lock."""

    code = "WRONGTYPE"


class QueueFull(DlockResponseError):
    """The lock's queue already has ``dlock.max-queue`` places."""

    code = "QUEUEFULL"


class Fenced(DlockResponseError):
    """``DLOCK.FENCED``: the token is not the token of a live hold; the command did not run."""

    code = "FENCED"


class NoReplicas(DlockResponseError):
    """``NOREPLICAS …``: the master refuses writes — acquires included — because fewer
    than ``min-replicas-to-write`` replicas are connected (nothing was granted)."""

    code = "NOREPLICAS"


class NotDurable(DlockError):
    """A durable acquire (``replicas=n``) was granted, but only ``acked`` of the
    ``wanted`` replicas acknowledged the grant within ``replicas_timeout`` (``WAIT``).
    The grant was released again: nothing is held."""

    def __init__(self, wanted: int, acked: int) -> None:
        super().__init__(
            f"not durable: {acked} of {wanted} replicas acknowledged the grant in time "
            "(it was released again)"
        )
        self.wanted = wanted
        self.acked = acked


class UnknownCommand(DlockResponseError):
    """The server does not know the command: the module is not loaded, or is older than
    the command (e.g. ``DLOCK.SEMACQUIRE``)."""

    code = "ERR"


class InvalidArgument(DlockResponseError):
    """Any other ``ERR`` reply of a lock command: an option, number or owner the module
    refused (the message names what was expected)."""

    code = "ERR"


_BY_CODE = {
    "NOTHELD": NotHeld,
    "DEADLOCK": Deadlock,
    "WRONGKIND": WrongKind,
    "WRONGTYPE": WrongType,
    "QUEUEFULL": QueueFull,
    "FENCED": Fenced,
    "NOREPLICAS": NoReplicas,
}


def map_error(e: BaseException, *, own_errors: bool = True) -> BaseException:
    """The dlock exception for a redis-py ``ResponseError`` of a lock command (``e``
    itself when it is no error reply). With ``own_errors=False`` (``DLOCK.FENCED``: the
    inner command's errors are its own), only the dlock codes are mapped."""
    if not isinstance(e, ResponseError) or isinstance(e, DlockResponseError):
        return e
    msg = str(e)
    word = msg.split(" ", 1)[0]
    cls = _BY_CODE.get(word)
    if cls is not None:
        return cls(msg)
    if not own_errors:
        return e
    low = msg.lower()
    if low.startswith("unknown command") or low.startswith("err unknown command"):
        return UnknownCommand(msg)
    if type(e) is ResponseError:
        return InvalidArgument(msg)
    return e
