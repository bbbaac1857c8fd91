"""The lost-lock signals: Event-like objects, sync and asyncio.

A signal carries the hold's lease clock (the contract's rule 1): the instant until which
the hold is surely valid (``deadline``: the last acknowledged grant or renewal's send
time + lease − margin). It answers :meth:`is_set` from that clock at every call, and a
timer of its own marks it at the deadline — a thread shared by the process (sync) or a
call on the event loop (asyncio), never a network call — so nothing in flight can delay
the signal. A renewal acknowledged after the deadline does not revive it."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import threading
import time
from typing import Any, Callable, List, Optional

from ._core import LostReason

log = logging.getLogger("dlock")

Listener = Callable[[LostReason], Any]


class _Timers:
    """One daemon thread per process that runs due callbacks (lease clocks' ends). It
    ends when nothing is pending (and starts again at the next :meth:`call_at`)."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._heap: List[List[Any]] = []
        self._seq = itertools.count()
        self._live = 0
        self._thread: Optional[threading.Thread] = None

    def call_at(self, when: float, fn: Callable[[], Any]) -> List[Any]:
        """Runs ``fn`` at ``when`` (``time.monotonic()``); the entry, for :meth:`cancel`."""
        entry = [when, next(self._seq), fn]
        with self._cv:
            heapq.heappush(self._heap, entry)
            self._live += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="dlock-timers", daemon=True)
                self._thread.start()
            self._cv.notify()
        return entry

    def cancel(self, entry: Optional[List[Any]]) -> None:
        if entry is None:
            return
        with self._cv:
            if entry[2] is not None:
                entry[2] = None
                self._live -= 1
                if self._live == 0:
                    self._heap.clear()
                    self._cv.notify()

    def _run(self) -> None:
        while True:
            with self._cv:
                while self._heap and self._heap[0][2] is None:
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._thread = None
                    return
                entry = self._heap[0]
                now = time.monotonic()
                if now < entry[0]:
                    self._cv.wait(entry[0] - now)
                    continue
                heapq.heappop(self._heap)
                fn, entry[2] = entry[2], None  # done: a later cancel() is a no-op
                self._live -= 1
            try:
                fn()
            except Exception:
                log.exception("dlock: timer callback failed")


#: The process's timer thread (started at the first lease clock of the sync flavour).
TIMERS = _Timers()


def _in_thread(fn: Callable[[], Any]) -> None:
    threading.Thread(target=fn, name="dlock-lost", daemon=True).start()


class _Base:
    def __init__(self, deadline: Optional[float] = None,
                 reason: LostReason = LostReason.EXPIRED) -> None:
        self._mu = threading.Lock()
        self._reason: Optional[LostReason] = None
        self._deadline: Optional[float] = None
        self._deadline_reason = reason
        self._listeners: List[Listener] = []

    def _check_deadline(self) -> None:
        d = self._deadline
        if d is not None and self._reason is None and time.monotonic() >= d:
            self._mark(self._deadline_reason)

    @property
    def reason(self) -> Optional[LostReason]:
        """Why the lock was lost, or None while it is not."""
        self._check_deadline()
        return self._reason

    def is_set(self) -> bool:
        """True once the lock is known to be lost (its lease clock included)."""
        self._check_deadline()
        return self._reason is not None

    @property
    def deadline(self) -> Optional[float]:
        """The ``time.monotonic()`` instant until which the hold is surely valid: the
        send time of its last acknowledged grant or renewal + lease − margin (1 % of
        the lease + 50 ms, at most half of it). The signal is set at that instant at
        the latest. None once released."""
        return self._deadline

    def _set_deadline(self, deadline: Optional[float], reason: Optional[LostReason] = None) -> None:
        """The hold counts as lost (``reason``, else the signal's) at ``deadline``;
        None: never by the clock (released in time)."""
        with self._mu:
            if self._reason is not None:
                return
            self._deadline = deadline
            if reason is not None:
                self._deadline_reason = reason
        if deadline is not None:
            self._arm(deadline)
        self._wake()

    def _extend(self, deadline: float) -> bool:
        """A renewal was acknowledged: valid until ``deadline`` — unless the clock had
        run out already (a renewal in flight at that instant does not revive the hold).
        False when the hold is lost."""
        self._check_deadline()
        with self._mu:
            if self._reason is not None:
                return False
            if self._deadline is not None and deadline <= self._deadline:
                return True
            self._deadline = deadline
        self._arm(deadline)
        return True

    def _add_listener(self, fn: Listener) -> None:
        self._check_deadline()
        with self._mu:
            reason = self._reason
            if reason is None:
                self._listeners.append(fn)
                return
        fn(reason)

    def _mark(self, reason: LostReason, spawn: Optional[Callable[[Callable[[], Any]], Any]] = None) -> bool:
        """Marks the lock lost (the first reason wins); True when this call did. The
        listeners run here, or through ``spawn`` (a thread: the timer's own thread must
        not wait for them)."""
        with self._mu:
            if self._reason is not None:
                return False
            self._reason = reason
            listeners, self._listeners = self._listeners, []
        self._wake()
        if listeners:
            if spawn is not None:
                spawn(lambda: _run_listeners(listeners, reason))
            else:
                _run_listeners(listeners, reason)
        return True

    def _timer_fired(self) -> None:
        d = self._deadline
        if d is not None and self._reason is None and time.monotonic() >= d:
            self._mark(self._deadline_reason, spawn=self._listener_spawn())

    def _listener_spawn(self) -> Optional[Callable[[Callable[[], Any]], Any]]:
        return None

    def _arm(self, deadline: float) -> None:  # pragma: no cover - overridden
        pass

    def _wake(self) -> None:  # pragma: no cover - overridden
        pass

    def __repr__(self) -> str:
        return f"<{type(self).__name__} lost={self.is_set()} reason={self._reason}>"


def _run_listeners(listeners: List[Listener], reason: LostReason) -> None:
    for fn in listeners:
        try:
            fn(reason)
        except Exception:  # a listener must not break the watchdog
            log.exception("dlock: lost-lock listener failed")


class LostSignal(_Base):
    """Set when the lock is lost — an Event you can check (:meth:`is_set`) or wait on
    (:meth:`wait`), plus the :attr:`reason`. It also turns set by itself at the end of
    the hold's lease clock (:attr:`deadline`)."""

    def __init__(self, deadline: Optional[float] = None,
                 reason: LostReason = LostReason.EXPIRED) -> None:
        super().__init__(deadline, reason)
        self._cond = threading.Condition(threading.RLock())  # wait() may mark (deadline)
        self._entry: Optional[List[Any]] = None
        if deadline is not None:
            self._set_deadline(deadline)

    def _arm(self, deadline: float) -> None:
        entry = TIMERS.call_at(deadline, self._timer_fired)
        with self._mu:
            old, self._entry = self._entry, entry
        TIMERS.cancel(old)

    def _listener_spawn(self) -> Optional[Callable[[Callable[[], Any]], Any]]:
        return _in_thread

    def _wake(self) -> None:
        if self._reason is not None or self._deadline is None:
            with self._mu:
                old, self._entry = self._entry, None
            TIMERS.cancel(old)
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
    ``await wait()`` (like ``asyncio.Event``). Its lease clock's timer runs on the event
    loop it was made on."""

    def __init__(self, deadline: Optional[float] = None,
                 reason: LostReason = LostReason.EXPIRED) -> None:
        super().__init__(deadline, reason)
        self._waiters: List[Any] = []
        self._handle: Optional[asyncio.TimerHandle] = None
        try:
            self._loop: Optional[asyncio.AbstractEventLoop] = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None
        if deadline is not None:
            self._set_deadline(deadline)

    def _arm(self, deadline: float) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            TIMERS.call_at(deadline, self._timer_fired)  # no loop: the process's timer
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._arm_on_loop(deadline)
        else:
            loop.call_soon_threadsafe(self._arm_on_loop, deadline)

    def _arm_on_loop(self, deadline: float) -> None:
        loop = self._loop
        if loop is None:  # pragma: no cover
            return
        if self._handle is not None:
            self._handle.cancel()
        delay = max(0.0, deadline - time.monotonic())
        self._handle = loop.call_later(delay + 0.0005, self._timer_fired)

    def _wake(self) -> None:
        with self._mu:
            waiters, self._waiters = self._waiters, []
            if (self._reason is not None or self._deadline is None) and self._handle is not None:
                self._handle.cancel()
                self._handle = None
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
