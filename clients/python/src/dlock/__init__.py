"""dlock for Python: the dlock Redis module's locks on top of redis-py.

Sync flavour here (``redis.Redis`` / ``redis.RedisCluster``, one owner per thread);
the asyncio flavour, with the same API, is :mod:`dlock.aio`.

>>> import redis, dlock                                   # doctest: +SKIP
>>> locks = dlock.Client(redis.Redis())                   # doctest: +SKIP
>>> with locks.lock("orders") as lock:                    # doctest: +SKIP
...     print("fencing token", lock.token)
"""

from ._core import (
    Kind,
    Lost,
    LostReason,
    Release,
    Released,
    StillHeld,
    Unknown,
    WaitMode,
    channel_for,
)
from ._lost import AsyncLostSignal, LostSignal
from ._sync import (
    Client,
    FairLock,
    Latch,
    Lock,
    MultiLock,
    ReadLock,
    RedLock,
    RWLock,
    Semaphore,
    WriteLock,
)
from .errors import (
    AcquireTimeout,
    Deadlock,
    DeadlockError,
    DlockError,
    DlockResponseError,
    Fenced,
    InvalidArgument,
    ModuleNotLoaded,
    NoReplicas,
    NotDurable,
    NotHeld,
    QueueFull,
    UnexpectedReply,
    UnknownCommand,
    WrongKind,
    WrongType,
)

__version__ = "0.1.0"

__all__ = [
    "AcquireTimeout",
    "AsyncLostSignal",
    "Client",
    "Deadlock",
    "DeadlockError",
    "DlockError",
    "DlockResponseError",
    "FairLock",
    "Fenced",
    "InvalidArgument",
    "Kind",
    "Latch",
    "Lock",
    "Lost",
    "LostReason",
    "LostSignal",
    "ModuleNotLoaded",
    "MultiLock",
    "NoReplicas",
    "NotDurable",
    "NotHeld",
    "QueueFull",
    "RWLock",
    "ReadLock",
    "RedLock",
    "Release",
    "Released",
    "Semaphore",
    "StillHeld",
    "UnexpectedReply",
    "Unknown",
    "UnknownCommand",
    "WaitMode",
    "WriteLock",
    "WrongKind",
    "WrongType",
    "channel_for",
]
