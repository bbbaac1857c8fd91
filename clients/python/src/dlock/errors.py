"""Exceptions. Every error reply the dlock module gives for a known case becomes its own
class (all of them subclasses of :class:`DlockError` and of redis-py's
``redis.exceptions.ResponseError``, so existing ``except ResponseError`` still works).

=========================  ==============================================================
exception                  module reply
=========================  ==============================================================
:class:`NotHeld`           ``NOTHELD the owner does not hold this lock …`` (also redis-py's
                           ``LockNotOwnedError``)
:class:`Deadlock`          ``DEADLOCK cycle: …`` (a wait across locks that would close a
                           cycle; ``.cycle`` names it) or ``DEADLOCK another reader
                           already waits to upgrade …`` (alias :class:`DeadlockError`)
:class:`WrongKind`         ``WRONGKIND the key holds a mutex|rw|fair|semaphore|latch …``
:class:`WrongType`         ``WRONGTYPE Operation against a key holding the wrong kind …``
:class:`QueueFull`         ``QUEUEFULL …`` (``dlock.max-queue`` places already taken)
:class:`Fenced`            ``FENCED …`` (``DLOCK.FENCED``: the token is not live)
:class:`NoReplicas`        ``NOREPLICAS …`` (``min-replicas-to-write`` not met)
:class:`ModuleNotLoaded`   ``ERR unknown command 'DLOCK.…'`` (module not loaded, or older;
                           a :class:`UnknownCommand`)
:class:`InvalidArgument`   any other ``ERR …`` of a lock command (bad option, limit, …), and
                           bad input the client refuses before sending anything
=========================  ==============================================================

The contract's kinds (``docs/clients.md``): ``lost`` is :class:`NotHeld` (with its
``reason``) — a hold found lost is reported on ``lock.lost`` and by ``release()``
answering ``Lost``; ``timeout`` is ``acquire()`` answering False, or
:class:`AcquireTimeout` (``with``, or a deadline reached while the server could not be
reached); ``wrong_kind`` is :class:`WrongKind` (and :class:`WrongType`, a subclass);
``module_not_loaded`` is :class:`ModuleNotLoaded`; ``deadlock`` is :class:`Deadlock`;
``queue_full`` is :class:`QueueFull`; ``not_durable`` is :class:`NotDurable` (and
:class:`NoReplicas`, a subclass); ``connection`` is redis-py's ``ConnectionError`` /
``TimeoutError``; ``invalid_argument`` is :class:`InvalidArgument` (also a
``ValueError``; ``argument`` names what was wrong).
"""

from __future__ import annotations

import re
from typing import Any, List, Optional, Tuple

from redis.exceptions import LockError, LockNotOwnedError, ResponseError


class DlockError(Exception):
    """Base class of every error raised by this package."""


class UnexpectedReply(DlockError):
    """The server answered something this client does not understand (is the dlock
    module loaded?)."""


class AcquireTimeout(DlockError, LockError, TimeoutError):
    """Not granted before the deadline: a ``with lock:`` block could not take the lock
    within the lock's ``timeout``, or ``acquire(timeout=…)`` reached its deadline while
    the server could not be reached (the last connection error is ``__cause__``). Also
    redis-py's ``LockError``, which its ``Lock`` raises in the same case, and a
    ``TimeoutError``."""

    def __init__(self, message: str = "") -> None:
        LockError.__init__(self, message)
        if not self.args:  # redis-py 5's LockError.__init__ stops there; OSError's is due
            TimeoutError.__init__(self, message)


class DlockResponseError(DlockError, ResponseError):
    """An error reply of the dlock module. ``code`` is its first word (``NOTHELD``, …)."""

    code: str = ""

    def __init__(self, message: str, code: Optional[str] = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class NotHeld(DlockResponseError, LockNotOwnedError):
    """The owner does not hold the lock (never acquired, lease expired, force-released).
    The contract's ``lost`` kind: ``reason`` is a :class:`~dlock.LostReason` when the
    client knows why (None when it does not). Also redis-py's ``LockNotOwnedError``
    (a ``LockError``), which its ``Lock`` raises for a release of a lock not owned."""

    code = "NOTHELD"

    def __init__(self, message: str, code: Optional[str] = None, reason: Any = None) -> None:
        super().__init__(message, code)
        self.reason = reason


class Deadlock(DlockResponseError):
    """The server refused a wait that would deadlock: the wait would have closed a
    wait-for cycle across locks (``DEADLOCK cycle: …``; nothing was queued, the owner's
    other holds stay — release them and retry), or two readers of an rw lock both asked
    to upgrade to WRITE (the second is refused; ``cycle`` is then empty).

    ``cycle``: the steps ``(owner, waits_for, key)`` as bytes, starting with the owner
    whose request was refused; each owner waits for the next on that key, the last
    for the first. Also available as :class:`DeadlockError`."""

    code = "DEADLOCK"

    def __init__(self, message: str, code: Optional[str] = None) -> None:
        super().__init__(message, code)
        self.cycle: List[Tuple[bytes, bytes, bytes]] = parse_cycle(message)

    @property
    def keys(self) -> List[bytes]:
        """The keys of the cycle, in order."""
        return [k for _, _, k in self.cycle]

    @property
    def owners(self) -> List[bytes]:
        """The owners of the cycle, in order."""
        return [o for o, _, _ in self.cycle]

    @property
    def pairs(self) -> List[Tuple[bytes, bytes]]:
        """The cycle as the contract gives it: ``(key, owner)`` for each step — the
        owner waits on that key (for the next step's owner)."""
        return [(k, o) for o, _, k in self.cycle]


#: The name the issue and the other clients use for :class:`Deadlock`.
DeadlockError = Deadlock

_QUOTED = r'"((?:[^"\\]|\\.)*)"'
_STEP = re.compile(_QUOTED + " waits for " + _QUOTED + " on " + _QUOTED)
_ESC = re.compile(r"\\(x[0-9a-fA-F]{2}|.)", re.S)


def _unquote(s: str) -> bytes:
    """The bytes of a quoted owner or key (``\\\\``, ``\\"``, ``\\n``, ``\\r``,
    ``\\t``, ``\\xHH``)."""
    out = bytearray()
    pos = 0
    for m in _ESC.finditer(s):
        out += s[pos : m.start()].encode("latin-1", "replace")
        e = m.group(1)
        if e[0] == "x" and len(e) == 3:
            out.append(int(e[1:], 16))
        else:
            out += {"n": b"\n", "r": b"\r", "t": b"\t"}.get(e, e.encode("latin-1", "replace"))
        pos = m.end()
    out += s[pos:].encode("latin-1", "replace")
    return bytes(out)


def parse_cycle(message: str) -> List[Tuple[bytes, bytes, bytes]]:
    """The steps of a ``DEADLOCK cycle: …`` text; [] for any other text."""
    text = message[1:] if message.startswith("-") else message
    if not text.startswith("DEADLOCK cycle: "):
        return []
    return [
        (_unquote(o), _unquote(w), _unquote(k))
        for o, w, k in _STEP.findall(text[len("DEADLOCK cycle: ") :])
    ]


class WrongKind(DlockResponseError):
    """The key holds a lock of another kind (e.g. ACQUIRE on an rw lock; the message
    names the kind found) — or, as :class:`WrongType`, a Redis value that is not a
    lock. The contract's ``wrong_kind``."""

    code = "WRONGKIND"


class WrongType(WrongKind):
    """The key holds a Redis value that is not a lock (``WRONGTYPE``)."""

    code = "WRONGTYPE"

    def __init__(self, message: str, code: Optional[str] = None) -> None:
        if "not a lock" not in message:
            message += " (the key holds a Redis value of another type, not a dlock lock)"
        super().__init__(message, code)


class QueueFull(DlockResponseError):
    """The lock's queue already has ``dlock.max-queue`` places."""

    code = "QUEUEFULL"


class Fenced(DlockResponseError):
    """``DLOCK.FENCED``: the token is not the token of a live hold; the command did not run."""

    code = "FENCED"


class NotDurable(DlockError):
    """A durable acquire (``replicas=n``) was granted, but only ``acked`` of the
    ``wanted`` replicas acknowledged the grant within ``replicas_timeout`` (``WAIT``).
    The grant was released again: nothing is held. The contract's ``not_durable``
    (:class:`NoReplicas` is one too)."""

    def __init__(self, wanted: Any = None, acked: Optional[int] = None) -> None:
        if isinstance(wanted, str):  # a subclass's message (NoReplicas)
            super().__init__(wanted)
            self.wanted: Optional[int] = None
            self.acked: Optional[int] = None
            return
        super().__init__(
            f"not durable: {acked} of {wanted} replicas acknowledged the grant in time "
            "(it was released again)"
        )
        self.wanted = wanted
        self.acked = acked


class NoReplicas(DlockResponseError, NotDurable):
    """``NOREPLICAS …``: the master refuses writes — acquires included — because fewer
    than ``min-replicas-to-write`` replicas are connected (nothing was granted)."""

    code = "NOREPLICAS"


class UnknownCommand(DlockResponseError):
    """The server does not know the command: the module is not loaded, or is older than
    the command (e.g. ``DLOCK.SEMACQUIRE``). For a ``DLOCK.*`` command it is a
    :class:`ModuleNotLoaded`, whose message says how to check and load the module."""

    code = "ERR"


class ModuleNotLoaded(UnknownCommand):
    """The server does not know a ``DLOCK.*`` command: the dlock module is not loaded
    (or is older than the command). The message gives the ``MODULE LOAD`` hint. The
    contract's ``module_not_loaded``."""


#: Appended to the server's "unknown command 'DLOCK.…'" error.
MODULE_HINT = (
    " -- is the dlock module loaded? `MODULE LIST` on this server lists it (name "
    "'dlock'); load it at start with `redis-server --loadmodule /path/to/libdlock.so` "
    "(valkey-server alike, or `loadmodule` in the config file), or at run time with "
    "`MODULE LOAD /path/to/libdlock.so`. If it is loaded, it is older than this command: "
    "upgrade it."
)


def unknown_command(msg: str) -> Optional["UnknownCommand"]:
    """An :class:`UnknownCommand` for a server's "unknown command" error text (with
    :data:`MODULE_HINT` when the command is a ``DLOCK.*`` one), else None."""
    low = msg.lower()
    if not (low.startswith("unknown command") or low.startswith("err unknown command")):
        return None
    if "'dlock." in low:
        if "dlock module loaded" not in low:
            msg += MODULE_HINT
        return ModuleNotLoaded(msg)
    return UnknownCommand(msg)


class InvalidArgument(DlockResponseError, ValueError):
    """Bad input: refused by the client before anything was sent (``argument`` names
    the argument: ``name``, ``lease``, ``renew_interval``, ``timeout``, …), or any
    other ``ERR`` reply of a lock command — an option, number or owner the module
    refused (the message names what was expected; ``argument`` is None). Also a
    ``ValueError``. The contract's ``invalid_argument``."""

    code = "ERR"

    def __init__(self, message: str, code: Optional[str] = None,
                 argument: Optional[str] = None) -> None:
        super().__init__(message, code)
        self.argument = argument


def invalid(argument: str, message: str) -> InvalidArgument:
    """The :class:`InvalidArgument` for bad input the client refuses itself."""
    return InvalidArgument(message, argument=argument)


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
    if msg.lower().startswith(("unknown command 'dlock.", "err unknown command 'dlock.")):
        return unknown_command(msg) or e  # the DLOCK command itself, even for FENCED
    if not own_errors:
        return e
    unknown = unknown_command(msg)
    if unknown is not None:
        return unknown
    if type(e) is ResponseError:
        return InvalidArgument(msg)
    return e
