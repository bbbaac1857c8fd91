"""The asyncio flavour of :mod:`dlock.recipes`: :func:`run_once` and :class:`Election`
on a :class:`dlock.aio.Client` (``redis.asyncio.Redis``), with the same semantics
(``docs/recipes.md``) and coroutines for everything that talks to the server.

>>> from dlock.aio_recipes import run_once, Election                  # doctest: +SKIP
>>> async def job(ctx): return ctx.token                              # doctest: +SKIP
>>> r = await run_once(locks, "nightly", job, at_most_for=60)         # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, Optional, TypeVar

from . import _ops, _recipes
from ._core import Release
from ._lost import AsyncLostSignal
from ._recipes import CLOSED, Leader, Outcome, RunResult
from .aio import Client, _run

T = TypeVar("T")

__all__ = ["AsyncJobContext", "Election", "Leader", "Observer", "Outcome", "RunResult", "Term", "run_once"]


class AsyncJobContext(_recipes.JobCore):
    """What the job gets: ``token``, ``lost`` (an :class:`~dlock.AsyncLostSignal`), and
    the coroutines ``fenced(*command)`` / ``check()`` bound to the run's token."""

    lost: AsyncLostSignal

    async def fenced(self, *command: Any) -> Any:
        return await _run(self._op_fenced(command))

    async def check(self) -> bool:
        return await _run(self._op_check())


async def _renew_loop(run: _recipes.Run) -> None:
    """Renews until cancelled (the run's end) or the hold is known lost."""
    pause: Optional[float] = run.renew_every
    while pause is not None:
        await asyncio.sleep(pause)
        pause = await _run(run.op_renew())


async def run_once(
    client: Client,
    name: str,
    job: Callable[[AsyncJobContext], Awaitable[T]],
    *,
    at_most_for: float,
    at_least_for: float = 0.0,
    renew: bool = False,
    owner: Optional[str] = None,
) -> RunResult[T]:
    """:func:`dlock.recipes.run_once` for asyncio: ``job(ctx)`` is awaited."""
    run = _recipes.Run(client, name, at_most_for, at_least_for, owner)
    if await _run(run.op_start()):
        renewer = asyncio.ensure_future(_renew_loop(run)) if renew else None
        try:
            return run.result(await job(AsyncJobContext(run)))
        finally:
            if renewer is not None:
                renewer.cancel()  # lands at its next await: no renewal after the end
            await _run(run.op_finish())
    return RunResult(Outcome.SKIPPED)


class Term(_recipes.TermCore):
    """:class:`dlock.recipes.Term` for asyncio (``proclaim``, ``fenced``, ``resign`` are
    coroutines; ``lost`` is an :class:`~dlock.AsyncLostSignal`)."""

    lost: AsyncLostSignal
    _monitor: Optional["asyncio.Future[Any]"] = None

    def _watch(self, ps: Any) -> None:
        self._monitor = asyncio.ensure_future(_run(self._op_monitor(ps)))

    def _op_stopped(self) -> _ops.Op[None]:
        if self._monitor is not None:
            yield _ops.Invoke(asyncio.gather, self._monitor, return_exceptions=True)

    async def fenced(self, *command: Any) -> Any:
        return await _run(self._op_fenced(command))

    async def proclaim(self, value: Any) -> None:
        await _run(self._op_proclaim(value))

    async def resign(self) -> Release:
        return await _run(self._op_resign())

    async def __aenter__(self) -> "Term":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.resign()


class Election(_recipes.ElectionCore):
    """:class:`dlock.recipes.Election` for asyncio, on a standalone ``redis.asyncio.Redis``."""

    _term = Term
    term: Optional[Term]

    def __init__(self, client: Client, name: str, **kwargs: Any) -> None:
        super().__init__(client, name, **kwargs)

    async def campaign(self, timeout: Optional[float] = None) -> Optional[Term]:
        return await _run(self._op_campaign(timeout))  # type: ignore[no-any-return]

    async def resign(self) -> Optional[Release]:
        return await _run(self._op_resign())

    async def proclaim(self, value: Any) -> None:
        await _run(self._op_proclaim(value))

    async def leader(self) -> Optional[Leader]:
        return await _run(self._op_leader())

    async def observe(self) -> "Observer":
        """An :class:`Observer` (subscribed when this returns): ``await obs.next(timeout)``
        or ``async for leader in obs``."""
        obs = Observer(self)
        await _run(obs._op_subscribe())
        return obs


class Observer(_recipes.ObserverCore):
    """Leader changes of one asyncio :class:`Election`."""

    async def next(self, timeout: Optional[float] = None) -> Optional[Leader]:
        """The next state that differs from the last one returned (first: the current
        state); ``TimeoutError`` when nothing changed within ``timeout``."""
        got = await _run(self._op_next(timeout))
        if got is CLOSED:
            raise StopAsyncIteration
        return got  # type: ignore[no-any-return]

    def __aiter__(self) -> "Observer":
        return self

    async def __anext__(self) -> Optional[Leader]:
        return await self.next()

    async def aclose(self) -> None:
        await _run(self._op_close())
