"""Every dlock command from Python (redis-py), with no helper library.

Runs against a real redis-server started by the `server` fixture (conftest.py).
Timing bounds are generous and waits are event-driven: CI machines are slow.
"""

import threading
import time

import pytest
import redis

LONG = 20_000  # ms: a WAIT that must end early because of an event, never by timeout


def wait_until(pred, timeout=10.0, interval=0.01):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(interval)
    return pred()


def flat_to_dict(flat):
    """A RESP2 flat field/value array -> dict with str keys."""
    assert isinstance(flat, list) and len(flat) % 2 == 0, flat
    return {
        (k.decode() if isinstance(k, bytes) else k): v for k, v in zip(flat[::2], flat[1::2])
    }


def lock_info(r, key):
    """DLOCK.INFO on a RESP2 connection, parsed: None, or a dict whose `holders`
    and `waiters` are lists of dicts (str keys)."""
    raw = r.execute_command("DLOCK.INFO", key)
    if raw is None:
        return None
    info = flat_to_dict(raw)
    info["holders"] = [flat_to_dict(h) for h in info["holders"]]
    info["waiters"] = [flat_to_dict(w) for w in info["waiters"]]
    return info


def channel_of(key: str) -> str:
    """The notification channel, as the README defines it."""
    lb = key.find("{")
    if lb != -1:
        rb = key.find("}", lb + 1)
        if rb > lb + 1:
            return "dlock:" + key
    return "dlock:{" + key + "}"


def next_message(pubsub, timeout=10.0):
    """The next pubsub `message` as (channel, data) str pair, or None on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        m = pubsub.get_message(timeout=min(left, 1.0))
        if m and m["type"] in ("message", "smessage"):
            return m["channel"].decode(), m["data"].decode()


def subscribe(server, channel):
    """A pubsub on its own connection, subscribed (confirmation consumed)."""
    c = server.client()
    p = c.pubsub()
    # Keep the client alive with the pubsub: a collected redis.Redis closes its
    # pool, and with it the subscribed connection (redis-py 8).
    p.dlock_client = c
    p.subscribe(channel)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        m = p.get_message(timeout=1.0)
        if m and m["type"] == "subscribe":
            return p
    raise AssertionError(f"no subscribe confirmation for {channel}")


def in_thread(fn, *args):
    """Runs fn(*args) in a thread; returns (thread, result dict with 'value'/'error')."""
    out = {}

    def run():
        try:
            out["value"] = fn(*args)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            out["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def join(t, out, timeout=30.0):
    t.join(timeout)
    assert not t.is_alive(), "thread did not finish"
    if "error" in out:
        raise out["error"]
    return out.get("value")


def blocked_waiters(r, key):
    info = lock_info(r, key)
    return [] if info is None else [w for w in info["waiters"] if w["state"] == b"blocked"]


# --------------------------------------------------------------------------- ACQUIRE


def test_acquire_grant_reentrant_and_nil(r):
    t1 = r.execute_command("DLOCK.ACQUIRE", "orders", "worker-1", "PX", 60000)
    assert isinstance(t1, int) and t1 > 0
    # Reentrant: same owner, same token, count 2.
    assert r.execute_command("DLOCK.ACQUIRE", "orders", "worker-1", "PX", 60000) == t1
    info = lock_info(r, "orders")
    assert info["kind"] == b"mutex"
    assert [(h["owner"], h["count"], h["token"]) for h in info["holders"]] == [
        (b"worker-1", 2, t1)
    ]
    # Another owner: nil without WAIT, and no trace left.
    assert r.execute_command("DLOCK.ACQUIRE", "orders", "worker-2") is None
    assert r.execute_command("DLOCK.ACQUIRE", "orders", "worker-2", "WAIT", 0) is None
    assert lock_info(r, "orders")["waiters"] == []
    assert r.type("orders") == b"dlocklock"


def test_acquire_wait_is_served_when_another_client_releases(server, r):
    t1 = r.execute_command("DLOCK.ACQUIRE", "orders", "worker-1", "PX", 60000)

    def releaser():
        # Release only once worker-2 is really blocked on the server.
        c = server.client()
        assert wait_until(lambda: len(blocked_waiters(c, "orders")) == 1)
        return c.execute_command("DLOCK.RELEASE", "orders", "worker-1")

    t, out = in_thread(releaser)
    waiter = server.client()
    start = time.monotonic()
    t2 = waiter.execute_command("DLOCK.ACQUIRE", "orders", "worker-2", "WAIT", LONG)
    elapsed = time.monotonic() - start
    assert join(t, out) == 1
    assert isinstance(t2, int) and t2 > t1
    assert elapsed < LONG / 1000 / 2, "the waiter was served by the release, not the timeout"
    info = lock_info(r, "orders")
    assert [h["owner"] for h in info["holders"]] == [b"worker-2"]
    assert info["waiters"] == []
    assert r.info("dlock")["dlock_handoffs"] >= 1


def test_acquire_wait_times_out_with_nil_and_leaves_no_waiter(r):
    r.execute_command("DLOCK.ACQUIRE", "orders", "worker-1", "PX", 60000)
    assert r.execute_command("DLOCK.ACQUIRE", "orders", "worker-2", "WAIT", 200) is None
    assert lock_info(r, "orders")["waiters"] == []
    assert r.info("dlock")["dlock_waits_timed_out"] == 1


def test_wait_inside_multi_acts_as_zero(r):
    r.execute_command("DLOCK.ACQUIRE", "orders", "worker-1")
    pipe = r.pipeline(transaction=True)
    pipe.execute_command("DLOCK.ACQUIRE", "orders", "worker-2", "WAIT", LONG)
    assert pipe.execute() == [None]


# --------------------------------------------------------------------------- RWACQUIRE


def test_rwacquire_shared_readers_exclusive_writer(server, r):
    ra = r.execute_command("DLOCK.RWACQUIRE", "doc", "reader-a", "READ")
    rb = r.execute_command("DLOCK.RWACQUIRE", "doc", "reader-b", "READ", "PX", 60000)
    assert ra > 0 and rb > ra
    assert r.execute_command("DLOCK.RWACQUIRE", "doc", "writer", "WRITE") is None
    info = lock_info(r, "doc")
    assert info["kind"] == b"rw"
    assert sorted((h["owner"], h["mode"]) for h in info["holders"]) == [
        (b"reader-a", b"read"),
        (b"reader-b", b"read"),
    ]

    # A writer waits on the server; the readers leave one by one.
    def write_wait():
        c = server.client()
        return c.execute_command("DLOCK.RWACQUIRE", "doc", "writer", "WRITE", "WAIT", LONG)

    t, out = in_thread(write_wait)
    assert wait_until(lambda: len(blocked_waiters(r, "doc")) == 1)
    # Writer preference: a new reader queues behind the waiting writer.
    assert r.execute_command("DLOCK.RWACQUIRE", "doc", "reader-c", "READ") is None
    assert r.execute_command("DLOCK.RELEASE", "doc", "reader-a", "READ") == 1
    assert r.execute_command("DLOCK.RELEASE", "doc", "reader-b") == 1  # mode optional
    tw = join(t, out)
    assert tw > rb
    info = lock_info(r, "doc")
    assert [(h["owner"], h["mode"]) for h in info["holders"]] == [(b"writer", b"write")]
    # Downgrade: the writer may take READ at once, then release WRITE.
    assert r.execute_command("DLOCK.RWACQUIRE", "doc", "writer", "READ") > 0
    with pytest.raises(redis.ResponseError, match="name the mode"):
        r.execute_command("DLOCK.RELEASE", "doc", "writer")
    assert r.execute_command("DLOCK.RELEASE", "doc", "writer", "WRITE") == 1
    assert r.execute_command("DLOCK.RWACQUIRE", "doc", "reader-c", "READ") > 0


def test_rwacquire_upgrade_and_upgrade_deadlock_error(server, r):
    r.execute_command("DLOCK.RWACQUIRE", "doc", "a", "READ")
    # The only reader may upgrade at once.
    assert r.execute_command("DLOCK.RWACQUIRE", "doc", "a", "WRITE") > 0
    r.execute_command("DLOCK.RELEASE", "doc", "a", "WRITE")
    r.execute_command("DLOCK.RWACQUIRE", "doc", "b", "READ")

    def upgrade_a():
        return server.client().execute_command("DLOCK.RWACQUIRE", "doc", "a", "WRITE", "WAIT", LONG)

    t, out = in_thread(upgrade_a)
    assert wait_until(lambda: len(blocked_waiters(r, "doc")) == 1)
    # A second reader asking for WRITE would deadlock: refused at once.
    with pytest.raises(redis.ResponseError, match="^DEADLOCK"):
        r.execute_command("DLOCK.RWACQUIRE", "doc", "b", "WRITE", "WAIT", LONG)
    assert r.execute_command("DLOCK.RELEASE", "doc", "b", "READ") == 1
    assert join(t, out) > 0


# --------------------------------------------------------------------------- FAIRACQUIRE


def test_fairacquire_serves_in_arrival_order(r):
    tok = r.execute_command("DLOCK.FAIRACQUIRE", "queue", "first", "PX", 60000)
    assert tok > 0
    assert r.execute_command("DLOCK.FAIRACQUIRE", "queue", "second") is None
    assert r.execute_command("DLOCK.FAIRACQUIRE", "queue", "third") is None
    info = lock_info(r, "queue")
    assert info["kind"] == b"fair"
    assert [(w["owner"], w["state"]) for w in info["waiters"]] == [
        (b"second", b"queued"),
        (b"third", b"queued"),
    ]
    assert r.execute_command("DLOCK.RELEASE", "queue", "first") == 1
    # third asked later than second: not its turn, even though the lock is free.
    assert r.execute_command("DLOCK.FAIRACQUIRE", "queue", "third") is None
    t2 = r.execute_command("DLOCK.FAIRACQUIRE", "queue", "second")
    assert t2 > tok
    assert r.execute_command("DLOCK.RELEASE", "queue", "second") == 1
    assert r.execute_command("DLOCK.FAIRACQUIRE", "queue", "third") > t2


def test_fairacquire_wait(server, r):
    r.execute_command("DLOCK.FAIRACQUIRE", "queue", "first")
    t, out = in_thread(
        lambda: server.client().execute_command(
            "DLOCK.FAIRACQUIRE", "queue", "second", "WAIT", LONG
        )
    )
    assert wait_until(lambda: len(blocked_waiters(r, "queue")) == 1)
    r.execute_command("DLOCK.RELEASE", "queue", "first")
    assert join(t, out) > 0


def test_lock_kinds_do_not_mix(r):
    r.execute_command("DLOCK.FAIRACQUIRE", "queue", "a")
    with pytest.raises(redis.ResponseError, match="^WRONGKIND"):
        r.execute_command("DLOCK.ACQUIRE", "queue", "a")
    r.set("plain", "x")
    with pytest.raises(redis.ResponseError, match="^WRONGTYPE"):
        r.execute_command("DLOCK.ACQUIRE", "plain", "a")
    with pytest.raises(redis.ResponseError, match="owner"):
        r.execute_command("DLOCK.ACQUIRE", "k", "")


# --------------------------------------------------------------------------- RELEASE


def test_release_replies_and_notheld(r):
    r.execute_command("DLOCK.ACQUIRE", "orders", "w", "PX", 60000)
    r.execute_command("DLOCK.ACQUIRE", "orders", "w", "PX", 60000)
    assert r.execute_command("DLOCK.RELEASE", "orders", "w") == 0  # count 2 -> 1
    assert r.execute_command("DLOCK.RELEASE", "orders", "w") == 1
    assert r.exists("orders") == 0  # an empty lock costs nothing
    with pytest.raises(redis.ResponseError) as e:
        r.execute_command("DLOCK.RELEASE", "orders", "w")
    assert str(e.value).startswith("NOTHELD")
    # Not held by this owner: error, and nothing changes for the holder.
    tok = r.execute_command("DLOCK.ACQUIRE", "orders", "w")
    with pytest.raises(redis.ResponseError, match="^NOTHELD"):
        r.execute_command("DLOCK.RELEASE", "orders", "intruder")
    assert lock_info(r, "orders")["holders"][0]["token"] == tok


# --------------------------------------------------------------------------- RENEW


def test_renew(r):
    r.execute_command("DLOCK.ACQUIRE", "orders", "w", "PX", 5000)
    assert r.execute_command("DLOCK.RENEW", "orders", "w", "PX", 600000) == 1
    assert lock_info(r, "orders")["holders"][0]["ttl"] > 60000
    assert r.execute_command("DLOCK.RENEW", "orders", "w") == 1  # default lease
    assert r.execute_command("DLOCK.RENEW", "orders", "someone-else") == 0
    r.execute_command("DLOCK.RELEASE", "orders", "w")
    assert r.execute_command("DLOCK.RENEW", "orders", "w") == 0  # lost: stop the watchdog


def test_renew_after_lease_expired_answers_zero(r):
    r.execute_command("DLOCK.ACQUIRE", "orders", "w", "PX", 50)
    assert wait_until(lambda: r.exists("orders") == 0)
    assert r.execute_command("DLOCK.RENEW", "orders", "w") == 0
    with pytest.raises(redis.ResponseError, match="^NOTHELD"):
        r.execute_command("DLOCK.RELEASE", "orders", "w")


# --------------------------------------------------------------------------- INFO


def test_info_flat_list_resp2(server, r):
    assert r.execute_command("DLOCK.INFO", "nothing") is None
    tok = r.execute_command("DLOCK.ACQUIRE", "orders", "worker-1", "PX", 60000)
    t, out = in_thread(
        lambda: server.client().execute_command(
            "DLOCK.ACQUIRE", "orders", "worker-2", "WAIT", LONG
        )
    )
    assert wait_until(lambda: len(blocked_waiters(r, "orders")) == 1)

    raw = r.execute_command("DLOCK.INFO", "orders")
    assert isinstance(raw, list)  # RESP2: flat field/value array
    info = flat_to_dict(raw)
    assert info["kind"] == b"mutex"
    assert info["token"] == tok
    (holder,) = [flat_to_dict(h) for h in info["holders"]]
    assert holder["owner"] == b"worker-1"
    assert holder["mode"] == b"exclusive"
    assert holder["count"] == 1
    assert holder["token"] == tok
    assert 0 < holder["ttl"] <= 60000
    now_ms = int(time.time() * 1000)
    assert abs(holder["expires_at"] - (now_ms + holder["ttl"])) < 60000
    (waiter,) = [flat_to_dict(w) for w in info["waiters"]]
    assert waiter["owner"] == b"worker-2"
    assert waiter["mode"] == b"exclusive"
    assert waiter["state"] == b"blocked"
    assert 0 < waiter["ttl"] <= LONG
    assert "expires_at" in waiter

    assert r.execute_command("DLOCK.RELEASE", "orders", "worker-1") == 1
    assert join(t, out) > tok


def test_info_is_a_map_in_resp3(server, r):
    r.execute_command("DLOCK.ACQUIRE", "orders", "worker-1")
    c3 = server.client(protocol=3)
    info = c3.execute_command("DLOCK.INFO", "orders")
    assert isinstance(info, dict)
    assert info[b"kind"] == b"mutex"
    assert info[b"holders"][0][b"owner"] == b"worker-1"
    assert c3.execute_command("DLOCK.INFO", "nothing") is None


def test_info_dlock_section(r):
    r.execute_command("DLOCK.ACQUIRE", "a", "w")
    r.execute_command("DLOCK.ACQUIRE", "a", "w")
    r.execute_command("DLOCK.RENEW", "a", "w")
    r.execute_command("DLOCK.RELEASE", "a", "w")
    s = r.info("dlock")
    assert s["dlock_grants"] == 2
    assert s["dlock_reentrant_grants"] == 1
    assert s["dlock_renewals"] == 1
    assert s["dlock_releases"] == 1
    assert s["dlock_locks"] == 1
    assert s["dlock_waiting_clients"] == 0


# --------------------------------------------------------------------------- FORCERELEASE


def test_forcerelease(server, r):
    tok = r.execute_command("DLOCK.ACQUIRE", "orders", "w", "PX", 60000)
    r.execute_command("DLOCK.ACQUIRE", "orders", "w")
    t, out = in_thread(
        lambda: server.client().execute_command("DLOCK.ACQUIRE", "orders", "next", "WAIT", LONG)
    )
    assert wait_until(lambda: len(blocked_waiters(r, "orders")) == 1)
    assert r.execute_command("DLOCK.FORCERELEASE", "orders") == 1
    assert join(t, out) > tok  # the waiter is served
    with pytest.raises(redis.ResponseError, match="^NOTHELD"):
        r.execute_command("DLOCK.RELEASE", "orders", "w")
    assert r.execute_command("DLOCK.RELEASE", "orders", "next") == 1
    assert r.execute_command("DLOCK.FORCERELEASE", "orders") == 0


# --------------------------------------------------------------------------- notifications


def test_channel_names():
    assert channel_of("orders") == "dlock:{orders}"
    assert channel_of("{user1}:lock") == "dlock:{user1}:lock"
    assert channel_of("{}x") == "dlock:{{}x}"


def test_pubsub_released(server, r):
    p = subscribe(server, "dlock:{orders}")
    r.execute_command("DLOCK.ACQUIRE", "orders", "w")
    r.execute_command("DLOCK.ACQUIRE", "orders", "w")
    assert r.execute_command("DLOCK.RELEASE", "orders", "w") == 0
    assert next_message(p, timeout=0.3) is None  # partial release: nothing published
    assert r.execute_command("DLOCK.RELEASE", "orders", "w") == 1
    assert next_message(p) == ("dlock:{orders}", "released")
    p.close()


def test_pubsub_hash_tag_channel_and_forcerelease(server, r):
    key = "{user1}:lock"
    p = subscribe(server, channel_of(key))
    r.execute_command("DLOCK.ACQUIRE", key, "w")
    assert r.execute_command("DLOCK.FORCERELEASE", key) == 1
    assert next_message(p) == ("dlock:{user1}:lock", "released")
    p.close()


def test_pubsub_expired(server, r):
    p = subscribe(server, "dlock:{orders}")
    start = time.monotonic()
    r.execute_command("DLOCK.ACQUIRE", "orders", "w", "PX", 300)
    assert next_message(p, timeout=15) == ("dlock:{orders}", "expired")
    assert time.monotonic() - start >= 0.25  # not before the lease ended
    assert r.execute_command("DLOCK.INFO", "orders") is None
    assert r.info("dlock")["dlock_expirations"] == 1
    p.close()


def test_pubsub_deleted(server, r):
    p = subscribe(server, "dlock:{orders}")
    r.execute_command("DLOCK.ACQUIRE", "orders", "w")
    assert r.delete("orders") == 1
    assert next_message(p) == ("dlock:{orders}", "deleted")
    p.close()


def test_client_side_wait_on_the_channel(server, r):
    """The pattern for clients that do not block a connection: try, and on nil wait
    for the lock's channel, then try again."""
    r.execute_command("DLOCK.ACQUIRE", "orders", "holder", "PX", 60000)
    c = server.client()
    p = subscribe(server, channel_of("orders"))
    assert c.execute_command("DLOCK.ACQUIRE", "orders", "poller") is None
    threading.Timer(0.2, lambda: server.client().execute_command(
        "DLOCK.RELEASE", "orders", "holder")).start()
    token = None
    deadline = time.monotonic() + 15
    while token is None and time.monotonic() < deadline:
        next_message(p, timeout=1.0)
        token = c.execute_command("DLOCK.ACQUIRE", "orders", "poller")
    assert token is not None
    p.close()
