"""``python -m dlock top``: a terminal view of the most contended locks.

Every refresh lists the lock keys with waiters (``DLOCK.SCAN … CONTENDED``), reads
each one's ``DLOCK.INFO`` and shows the most contended first: waiters, the oldest
wait, the holders (whole owner ids) and how long they have held, and whom the first
waiter is blocked by; with the totals and the wait/hold percentiles of ``INFO dlock``
on top. A server that cannot be reached, or does not have the module, is said in one
line (exit status 1 with ``--once``).

    python -m dlock top [--url redis://localhost:6379/0] [--interval 1] [--rows 20] [--once]
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Dict, List, Optional, Sequence

#: Keys looked at per refresh, at most (a full iteration stops there).
MAX_KEYS = 10_000


def _text(v: Any) -> str:
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return str(v)


def _ms(v: Optional[int]) -> str:
    """A duration in ms, short: 850ms, 12.3s, 4m05s, 2h10m."""
    if v is None or v < 0:
        return "?"
    if v < 1000:
        return f"{v}ms"
    s = v / 1000.0
    if s < 60:
        return f"{s:.1f}s"
    m, s = divmod(int(s), 60)
    if m < 60:
        return f"{m}m{s:02d}s"
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m"


def _cut(s: str, n: int) -> str:
    return s if len(s) <= n else s[: n - 1] + "…"


def rows(client: Any, limit: int = MAX_KEYS) -> List[Dict[str, Any]]:
    """One row per contended lock, most contended first."""
    out = []
    for i, key in enumerate(client.scan_iter(contended=True, count=1000)):
        if i >= limit:
            break
        info = client.info(key)
        if not info or not info.get("waiters"):
            continue
        waiters = info["waiters"]
        holders = info.get("holders") or []
        out.append(
            {
                "key": _text(key),
                "kind": info.get("kind", "?"),
                "waiters": len(waiters),
                "oldest_wait": max((w.get("waited_ms", -1) for w in waiters), default=-1),
                "holders": [_text(h.get("owner")) for h in holders],
                "held": max((h.get("held_ms", -1) for h in holders), default=None),
                "blocked_by": [_text(o) for o in waiters[0].get("blocked_by") or []],
            }
        )
    out.sort(key=lambda r: (-r["waiters"], -(r["oldest_wait"] or 0), r["key"]))
    return out


def _info(redis: Any) -> Dict[str, str]:
    raw = redis.execute_command("INFO", "dlock")
    if isinstance(raw, dict):
        # redis-py parses `p50=1.000,p99=2.000` into a dict: give it back as text.
        return {
            k: ",".join(f"{p}={float(x):.0f}" for p, x in v.items()) if isinstance(v, dict) else _text(v)
            for k, v in raw.items()
        }
    out = {}
    for line in _text(raw).splitlines():
        if ":" in line and not line.startswith("#"):
            k, v = line.split(":", 1)
            out[k] = v
    return out


def render(redis: Any, client: Any, n: int, width: int = 120) -> str:
    """One screen. Owner ids are shown whole (two threads of one client differ only at
    their end); the KEY column is cut to fit ``width``."""
    info = _info(redis)
    rs = rows(client)[:n]
    stamp = time.strftime("%H:%M:%S")
    holders = [", ".join(r["holders"]) or "-" for r in rs]
    hw = max([len("HOLDERS")] + [len(h) for h in holders])
    kw = max(12, min(24, width - 38 - hw))
    lines = [
        _cut(f"dlock top  {stamp}  locks {info.get('dlock_locks', '?')}  "
             f"waiters {info.get('dlock_waiters', '?')}  "
             f"waiting clients {info.get('dlock_waiting_clients', '?')}  "
             f"contended {len(rs)}", width),
        _cut(f"wait µs  {info.get('dlock_wait_percentiles_usec', '-')}", width),
        _cut(f"hold µs  {info.get('dlock_hold_percentiles_usec', '-')}", width),
        "",
        f"{'KEY':<{kw}} {'KIND':<9} {'WAIT':>5} {'OLDEST':>8} {'HELD':>8}  "
        f"{'HOLDERS':<{hw}}  BLOCKED BY (first waiter)",
    ]
    for r, h in zip(rs, holders):
        lines.append(
            f"{_cut(r['key'], kw):<{kw}} {r['kind']:<9} {r['waiters']:>5} "
            f"{_ms(r['oldest_wait']):>8} {_ms(r['held']):>8}  "
            f"{h:<{hw}}  {', '.join(r['blocked_by']) or '-'}"
        )
    if not rs:
        lines.append("(no lock has waiters)")
    return "\n".join(line.rstrip() for line in lines)


def problem(url: str, e: BaseException) -> str:
    """What is wrong, in one line."""
    import redis

    from .errors import ModuleNotLoaded

    text = " ".join(str(e).split())
    if isinstance(e, ModuleNotLoaded):
        return (f"the server at {url} does not have the dlock module (DLOCK.SCAN is an "
                "unknown command there): load it with `MODULE LOAD /path/to/libdlock.so` "
                "or start it with `--loadmodule /path/to/libdlock.so`")
    if isinstance(e, (redis.ConnectionError, redis.TimeoutError, OSError)):
        return f"cannot reach {url}: {text} (is the server running there?)"
    if isinstance(e, redis.ResponseError):
        return f"the server at {url} answered: {text}"
    return f"{type(e).__name__}: {text}"


def top(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m dlock top", description=__doc__.split("\n")[0])
    p.add_argument("--url", default="redis://localhost:6379/0")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between refreshes")
    p.add_argument("--rows", type=int, default=20, help="locks shown")
    p.add_argument("--once", action="store_true", help="print one screen and exit")
    a = p.parse_args(argv)
    import redis

    from . import Client

    try:
        r = redis.Redis.from_url(a.url, socket_timeout=5, socket_connect_timeout=5)
    except ValueError as e:
        print(f"dlock top: {a.url} is not a redis:// URL: {e}", file=sys.stderr)
        return 2
    client = Client(r)
    try:
        while True:
            try:
                screen = render(r, client, a.rows)
            except Exception as e:  # noqa: BLE001 - said in one line
                if a.once:
                    print(f"dlock top: {problem(a.url, e)}", file=sys.stderr)
                    return 1
                screen = f"dlock top  {time.strftime('%H:%M:%S')}  {problem(a.url, e)}"
            if a.once:
                print(screen)
                return 0
            sys.stdout.write("\x1b[H\x1b[2J" + screen + "\n")
            sys.stdout.flush()
            time.sleep(a.interval)
    except KeyboardInterrupt:
        return 0
    finally:
        client.close()
        r.close()


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] != "top":
        print("usage: python -m dlock top [--url URL] [--interval S] [--rows N] [--once]")
        return 2
    return top(args[1:])


if __name__ == "__main__":
    sys.exit(main())
