"""The lost-lock signals: Event-like objects, sync and asyncio."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any, Callable, List, Optional

from ._core import LostReason

log = logging.getLogger("dlock")

Listener = Callable[[LostReason], Any]


class _Base:
    def __init__(self, deadline: Optional[float] = None) -> None:
        self._mu = threading.Lock()
        self._reason: Optional[LostReason] = None
        self._deadline = deadline
        self._listeners: List[Listener] = []

    def _check_deadline(self) -> None:
        d = self._deadline
        if d is not None and self._reason is None and time.monotonic() >= d:
            self._mark(LostReason.LEASE_ENDED)

    @property
    def reason(self) -> Optional[LostReason]:
        """Why the lock was lost, or None while it is not."""
        self._check_deadline()
        return self._reason

    def is_set(self) -> bool:
        """True once the lock is known to be lost."""
        self._check_deadline()
        return self._reason is not None

    @property
    def deadline(self) -> Optional[float]:
        """For an explicit lease: the ``time.monotonic()`` instant at which the lock
        counts as lost (lease less a drift margin); None under the watchdog."""
        return self._deadline

    def _set_deadline(self, deadline: Optional[float]) -> None:
        with self._mu:
            self._deadline = deadline
        self._wake()

    def _add_listener(self, fn: Listener) -> None:
        with self._mu:
            reason = self._reason
            if reason is None:
                self._listeners.append(fn)
                return
        fn(reason)

    def _mark(self, reason: LostReason) -> bool:
        """Marks the lock lost (the first reason wins); True when this call did."""
        with self._mu:
            if self._reason is not None:
                return False
            self._reason = reason
            listeners, self._listeners = self._listeners, []
        self._wake()
        for fn in listeners:
            try:
                fn(reason)
            except Exception:  # a listener must not break the watchdog
                log.exception("dlock: lost-lock listener failed")
        return True

    def _wake(self) -> None:  # pragma: no cover - overridden
        pass

    def __repr__(self) -> str:
        return f"<{type(self).__name__} lost={self.is_set()} reason={self._reason}>"


class LostSignal(_Base):
    """Set when the lock is lost — an Event you can check (:meth:`is_set`) or wait on
    (:meth:`wait`), plus the :attr:`reason`. For a lock taken with an explicit lease it
    also turns set by itself when that lease runs out."""

    def __init__(self, deadline: Optional[float] = None) -> None:
        super().__init__(deadline)
        self._cond = threading.Condition(threading.RLock())  # wait() may mark (deadline)

    def _wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Blocks until the lock is lost (True) or ``timeout`` seconds pass (False)."""
        end = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                if self.is_set():
                    return True
                now = time.monotonic()
                until = end
                d = self._deadline
                if d is not None:
                    until = d if until is None else min(until, d)
                if end is not None and now >= end:
                    return False
                self._cond.wait(None if until is None else max(until - now, 0.0) + 0.001)


class AsyncLostSignal(_Base):
    """The asyncio flavour of :class:`LostSignal`: ``is_set()``, ``reason`` and
    ``await wait()`` (like ``asyncio.Event``)."""

    def __init__(self, deadline: Optional[float] = None) -> None:
        super().__init__(deadline)
        self._waiters: List[Any] = []

    def _wake(self) -> None:
        with self._mu:
            waiters, self._waiters = self._waiters, []
        for loop, fut in waiters:
            try:
                loop.call_soon_threadsafe(_resolve, fut)
            except RuntimeError:  # loop closed
                pass

    async def wait(self, timeout: Optional[float] = None) -> bool:
        """Completes when the lock is lost (True) or after ``timeout`` seconds (False)."""
        loop = asyncio.get_running_loop()
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            if self.is_set():
                return True
            now = time.monotonic()
            if end is not None and now >= end:
                return False
            until = end
            d = self._deadline
            if d is not None:
                until = d if until is None else min(until, d)
            fut = loop.create_future()
            with self._mu:
                self._waiters.append((loop, fut))
            if self._reason is not None:
                return True
            try:
                await asyncio.wait_for(
                    fut, None if until is None else max(until - now, 0.0) + 0.001
                )
            except asyncio.TimeoutError:
                pass


def _resolve(fut: "asyncio.Future[Any]") -> None:
    if not fut.done():
        fut.set_result(None)
