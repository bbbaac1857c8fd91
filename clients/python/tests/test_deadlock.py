"""Deadlocks across locks (docs/deadlocks.md): the request whose wait would close a
wait-for cycle gets :class:`dlock.DeadlockError` carrying the cycle. Run once per
flavour (sync and asyncio) through ``api``."""

from __future__ import annotations

from typing import Any

import pytest

import dlock
from dlock.errors import parse_cycle
from dlock_testkit import eventually


async def waiters(client: Any, key: str) -> int:
    info = await client.info(key)
    return 0 if info is None else len(info["waiters"])


async def test_the_closing_request_gets_the_cycle(api: Any, server: Any) -> None:
    a = api.client(server)
    b = api.client(server)
    stock = b.lock("stock")
    assert await stock.acquire(lease=20)

    async def owner_a() -> Any:
        orders = a.lock("orders")
        assert await orders.acquire(lease=20)
        ok = await a.lock("stock").acquire(timeout=15, lease=20)  # waits for b
        await a.lock("stock").release()
        await orders.release()
        return ok, orders.owner

    actor = api.spawn(owner_a)
    await eventually(lambda: waiters(b, "stock"), 10, "a to wait for stock")
    with pytest.raises(dlock.DeadlockError) as caught:
        await b.lock("orders").acquire(timeout=10, lease=20)
    e = caught.value
    assert isinstance(e, dlock.Deadlock)
    assert e.keys == [b"orders", b"stock"]
    assert e.owners[0] == stock.owner.encode()
    assert e.cycle[0][1] == e.owners[1]
    # Nothing was queued for b; b lets go as told, and a gets stock.
    assert await waiters(b, "orders") == 0
    assert await stock.release() is dlock.Release.RELEASED
    ok, owner = await api.join(actor)
    assert ok is True and e.owners[1] == owner.encode()


def test_parse_cycle_unescapes_binary_owners_and_keys() -> None:
    text = (
        'DEADLOCK cycle: "a\\"b" waits for "c\\\\d" on "k\\x3a\\r\\n\\xff"; '
        '"c\\\\d" waits for "a\\"b" on "k2" (nothing was queued for this request; '
        "release a lock it holds and retry)"
    )
    assert parse_cycle(text) == [
        (b'a"b', b"c\\d", b"k:\r\n\xff"),
        (b"c\\d", b'a"b', b"k2"),
    ]
    assert parse_cycle("DEADLOCK another reader already waits to upgrade") == []
