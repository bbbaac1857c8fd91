"""One scenario run: a server with the module, a proxy in front of it (``via: proxy``),
one driver process, the steps in order, and the result.

The engine plays everything that is not the client under test: the other client (its
own direct connections, named :data:`procs.ENGINE_NAME`), the administrator
(``FORCERELEASE``, ``DEL``, ``CLIENT KILL``, ``CONFIG SET``) and the network (Toxiproxy).
Marks are instants on the engine's monotonic clock: an event's or reply's arrival, or
the return of the engine's own act."""

from __future__ import annotations

import asyncio
import contextvars
import json
import re
import shutil
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Set, Tuple

import redis.asyncio
import redis.exceptions

from . import procs
from .driverproc import DriverGone, DriverProcess, environment
from .model import Driver, Scenario
from .toxiproxy import Proxy, Toxiproxy, ToxiproxyError

#: How long a driver request without ``within_ms`` may take to be answered (s).
DEFAULT_REPLY_S = 60.0
#: How long a reply is still awaited after its ``within_ms`` (to measure how late it is).
LATE_GRACE_S = 10.0
#: ``expect_event`` / ``await`` without ``within_ms`` (s).
DEFAULT_WITHIN_S = 10.0
#: The other client's owner id unless the step names one.
OTHER_OWNER = "conformance-other"
OTHER_LEASE_MS = 30000
ACQUIRE_COMMANDS = {"dlock.acquire", "dlock.fairacquire", "dlock.rwacquire", "dlock.semacquire"}
#: The step at hand (its number and text), per task: an async step's task keeps its own.
_STEP: "contextvars.ContextVar[Tuple[int, Dict[str, Any]]]" = contextvars.ContextVar("step")
_REF = re.compile(r"\{([A-Za-z0-9_-]+)\.([A-Za-z0-9_]+)\}")


class Failed(Exception):
    """A hard failure: the run cannot go on (something awaited never came)."""


class NotApplicable(Exception):
    """The driver answered ``unsupported``."""


@dataclass
class Figure:
    name: str
    ms: float
    ok: bool

    def __str__(self) -> str:
        return f"{self.name} {self.ms:.0f} ms"


@dataclass
class Result:
    server: str
    driver: str
    scenario: str
    status: str = "ok"  # ok | FAIL | n/a
    figures: List[Figure] = field(default_factory=list)
    failures: List[str] = field(default_factory=list)
    note: str = ""
    seconds: float = 0.0
    stderr_tail: List[str] = field(default_factory=list)
    server_log_tail: str = ""
    log_dir: Optional[Path] = None
    #: The failures of earlier runs of this combination (``--rerun``): a run that
    #: passed only on a rerun is marked ``ok*`` in the table and listed as flaky.
    earlier: List["Result"] = field(default_factory=list)

    def cell(self) -> str:
        figs = ", ".join(str(f) for f in self.figures)
        mark = "*" if self.earlier and self.status == "ok" else ""
        return f"{self.status}{mark} {figs}".strip()


@dataclass
class Setup:
    """What every run of one engine invocation shares."""

    root: Path
    module: Path
    toxiproxy: Optional[Toxiproxy]
    python: str
    workdir: Path
    logs: Path


def _fmt(step: Dict[str, Any]) -> str:
    return json.dumps(step, separators=(", ", ": "))


class Run:
    def __init__(self, setup: Setup, server_name: str, server_bin: str, driver: Driver,
                 scenario: Scenario) -> None:
        self.setup = setup
        self.server_bin = server_bin
        self.driver_spec = driver
        self.scenario = scenario
        self.result = Result(server_name, driver.name, scenario.name)
        self.dir = setup.workdir / f"{server_name}-{driver.name}-{scenario.name}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.server: Optional[procs.Server] = None
        self.bare: Optional[procs.Server] = None  # the server without the module
        self.proxy: Optional[Proxy] = None
        self.driver: Optional[DriverProcess] = None
        self.admin: Optional["redis.asyncio.Redis"] = None
        self.raw: Optional["redis.asyncio.Redis"] = None  # replies as sent (server steps)
        self.marks: Dict[str, float] = {}
        self.replies: Dict[str, Dict[str, Any]] = {}
        self.counts: Dict[str, int] = {}  # DLOCK.* calls at a {"mark": …} step
        self.tasks: Dict[str, "asyncio.Task[None]"] = {}
        self.bound: Set[int] = set()
        self.open_url: Optional[str] = None
        self.exit_reply_at: Optional[float] = None
        self.step_no = 0
        self.step: Dict[str, Any] = {}

    # -- failures ----------------------------------------------------------------

    def fail(self, expected: str, happened: str) -> None:
        """A soft failure of the step at hand (an async step's own, in its task):
        recorded, and the run goes on."""
        no, step = _STEP.get((self.step_no, self.step))
        self.result.failures.append(
            f"step {no}: {_fmt(step)}\n    expected: {expected}\n    happened: {happened}"
        )

    def hard(self, expected: str, happened: str) -> Failed:
        self.fail(expected, happened)
        return Failed()

    # -- the run -----------------------------------------------------------------

    async def execute(self) -> Result:
        start = time.monotonic()
        try:
            await asyncio.wait_for(self._run(), self.scenario.timeout_s)
        except Failed:
            pass
        except NotApplicable as e:
            self.result.status = "n/a"
            self.result.note = str(e)
        except asyncio.TimeoutError:
            self.result.failures.append(
                f"the scenario ran over its {self.scenario.timeout_s:.0f} s (at step "
                f"{self.step_no}: {_fmt(self.step)})"
            )
        except (ToxiproxyError, RuntimeError, OSError, redis.exceptions.RedisError) as e:
            self.result.failures.append(
                f"step {self.step_no}: {_fmt(self.step)}\n    the engine could not do it: "
                f"{type(e).__name__}: {e}"
            )
        except Exception:  # noqa: BLE001 - a bug of the engine fails this cell, not the run
            self.result.failures.append(
                f"step {self.step_no}: {_fmt(self.step)}\n    the engine failed:\n"
                + traceback.format_exc()
            )
        finally:
            await self._cleanup()
        self.result.seconds = time.monotonic() - start
        if self.driver is not None:
            for v in self.driver.violations:
                self.result.failures.append(f"driver protocol: {v}")
            self.result.stderr_tail = list(self.driver.stderr_tail)
        if self.result.status != "n/a" and self.result.failures:
            self.result.status = "FAIL"
        if self.result.status == "FAIL":
            self._keep_logs()
        procs.remove_dir(self.dir)
        return self.result

    async def _run(self) -> None:
        self.step = {"engine": "start the server, the proxy and the driver"}
        self.server = procs.Server(self.server_bin, self.setup.module, self.dir, "server")
        await self.server.start()
        self.admin = self.server.client()
        self.raw = self.server.client()
        self.raw.response_callbacks = type(self.raw.response_callbacks)({})
        if self.scenario.via == "proxy":
            if self.setup.toxiproxy is None:
                raise RuntimeError("this scenario goes through Toxiproxy, which is not running")
            self.proxy = await self.setup.toxiproxy.proxy(self.server.port)
        spec = self.driver_spec
        argv = [self._subst_path(a) for a in spec.run]
        self.driver = DriverProcess(argv, self.setup.root, environment(), self.dir)
        try:
            await self.driver.start()
        except OSError as e:
            raise RuntimeError(f"cannot start the driver {argv}: {e}") from e
        if not self.scenario.explicit_open:
            self.step = {"driver": "open", "options": self._options()}
            _STEP.set((0, self.step))
            await self._driver_step(dict(self.step))
        for i, step in enumerate(self.scenario.steps, 1):
            self.step_no, self.step = i, step
            _STEP.set((i, step))  # what an async step's task keeps as its own
            await self._do(self._subst(step))

    def _subst_path(self, a: str) -> str:
        return a.replace("{python}", self.setup.python).replace("{root}", str(self.setup.root))

    def _options(self) -> Dict[str, Any]:
        return dict((self.scenario.open or {}).get("options", {}))

    def _url(self) -> str:
        if self.open_url is not None:
            return self.open_url
        if self.proxy is not None:
            return self.proxy.url
        assert self.server is not None
        return self.server.url

    def _subst(self, v: Any) -> Any:
        """``{MARK.field}`` in a string: that field of the reply marked MARK."""
        if isinstance(v, dict):
            return {k: self._subst(x) for k, x in v.items()}
        if isinstance(v, list):
            return [self._subst(x) for x in v]
        if isinstance(v, str):
            def one(m: "re.Match[str]") -> str:
                reply = self.replies.get(m.group(1))
                if reply is None or m.group(2) not in reply:
                    raise self.hard(f"a reply marked {m.group(1)!r} with field {m.group(2)!r}",
                                    f"marked replies: {sorted(self.replies)}")
                return str(reply[m.group(2)])
            return _REF.sub(one, v)
        return v

    async def _do(self, step: Dict[str, Any]) -> None:
        if "driver" in step:
            if step.get("async"):
                self._spawn(step["mark"], self._driver_step(step))
            else:
                await self._driver_step(step)
        elif "do" in step:
            await self._act(step)
        elif "expect_event" in step:
            await self._expect_event(step)
        elif "expect_no_event" in step:
            await self._expect_no_event(step)
        elif "await" in step:
            await self._await(step)
        elif "sleep_ms" in step:
            await asyncio.sleep(step["sleep_ms"] / 1000.0)
        elif "figure" in step:
            self._figure(step)
        elif "expect_no_renewals" in step:
            await self._no_renewals(step)
        elif "expect_no_commands" in step:
            await self._no_commands(step)
        elif "expect_exit" in step:
            await self._expect_exit(step)
        elif "expect_waiters" in step:
            await self._expect_waiters(step)
        elif "mark" in step:
            self.marks[step["mark"]] = time.monotonic()
            self.counts[step["mark"]] = await self._dlock_calls()

    def _spawn(self, mark: str, coro: Any) -> None:
        self.tasks[mark] = asyncio.create_task(coro)  # with the context: its own step

    # -- driver requests ---------------------------------------------------------

    async def _driver_step(self, step: Dict[str, Any]) -> None:
        assert self.driver is not None
        op = step["driver"]
        fields = {k: v for k, v in step.items() if k not in ("driver", "expect", "mark", "async")}
        if op == "open":
            fields.setdefault("url", self._url())
            fields.setdefault("options", self._options())
        sent, fut = self.driver.send(op, fields)
        expect = step.get("expect", "ok")
        within = expect.get("within_ms") if isinstance(expect, dict) else None
        wait_s = DEFAULT_REPLY_S if within is None else within / 1000.0 + LATE_GRACE_S
        try:
            at, reply = await asyncio.wait_for(asyncio.shield(fut), wait_s)
        except asyncio.TimeoutError:
            raise self.hard(f"a reply to {op}", f"none within {wait_s * 1000:.0f} ms") from None
        except DriverGone as e:
            await self.driver.wait_exit(2.0)
            raise self.hard(f"a reply to {op}", f"{e} (exit code {self.driver.returncode})") from None
        took = (at - sent) * 1000.0
        if "mark" in step:
            self.marks[step["mark"]] = at
            self.replies[step["mark"]] = reply
        if op == "exit":
            self.exit_reply_at = at
        self._check_reply(op, expect, reply, took)
        if op in ("acquire", "acquire_multi", "campaign") and reply.get("ok") is True and (
            step.get("bind") or self._options().get("bind")
        ):
            await self._note_bound()

    def _check_reply(self, op: str, expect: Any, reply: Dict[str, Any], took: float) -> None:
        ok = reply.get("ok") is True
        got = reply.get("error")
        err: Dict[str, Any] = got if isinstance(got, dict) else {}
        kind = err.get("kind")
        said = f"error {kind}: {err.get('message', '')}" if not ok else f"ok {json.dumps(reply)}"
        wanted_kinds = _list(expect.get("error")) if isinstance(expect, dict) else []
        if not ok and kind == "unsupported" and "unsupported" not in wanted_kinds:
            raise NotApplicable(f"{op}: {err.get('message', 'unsupported')}")
        if expect == "ok" or (isinstance(expect, dict) and "error" not in expect):
            if not ok:
                raise self.hard("an ok reply", said)
            for k, allowed in (expect.items() if isinstance(expect, dict) else ()):
                if k == "within_ms":
                    continue
                if reply.get(k) not in allowed:
                    self.fail(f"{k} one of {allowed}", f"{k} = {json.dumps(reply.get(k))} ({said})")
        else:
            if ok:
                self.fail(f"error {' or '.join(wanted_kinds)}", said)
            elif kind not in wanted_kinds:
                self.fail(f"error {' or '.join(wanted_kinds)}", said)
            else:
                reasons = _list(expect.get("reason"))
                if reasons and err.get("reason") not in reasons:
                    self.fail(f"error {kind} with reason {' or '.join(reasons)}",
                              f"reason {err.get('reason')!r} ({said})")
        within = expect.get("within_ms") if isinstance(expect, dict) else None
        if within is not None:
            # A bounded reply is a figure of its own: how long the client took.
            self.result.figures.append(Figure(op, took, took <= within))
            if took > within:
                self.fail(f"the reply within {within} ms", f"it came after {took:.0f} ms ({said})")

    async def _note_bound(self) -> None:
        """The driver's connections whose last command is an acquire, right after its
        BIND acquire was answered: what ``kill_clients bound`` kills."""
        for c in await self._driver_clients():
            if c.get("cmd", "").lower() in ACQUIRE_COMMANDS:
                self.bound.add(int(c["id"]))

    async def _driver_clients(self) -> List[Dict[str, str]]:
        assert self.admin is not None
        raw = await self.admin.execute_command("CLIENT", "LIST", "TYPE", "normal")
        text = raw.decode() if isinstance(raw, bytes) else str(raw)
        out = []
        for line in text.splitlines():
            fields = dict(kv.split("=", 1) for kv in line.split(" ") if "=" in kv)
            if fields.get("name") != procs.ENGINE_NAME:
                out.append(fields)
        return out

    # -- the engine's acts ---------------------------------------------------------

    async def _act(self, step: Dict[str, Any]) -> None:
        act = step["do"]
        if act == "other_acquire":
            if step.get("async"):
                self._spawn(step["mark"], self._other_acquire(step))
            else:
                await self._other_acquire(step)
            return
        if act in ("partition", "heal", "refuse", "latency"):
            if self.proxy is None:
                raise self.hard("a scenario with \"via\": \"proxy\"", f"{act} on a direct connection")
            if act == "partition":
                await self.proxy.partition()
            elif act == "heal":
                await self.proxy.heal()
            elif act == "refuse":
                await self.proxy.refuse()
            else:
                await self.proxy.latency(int(step["ms"]))
        elif act == "server":
            await self._server_cmd(step)
        elif act == "kill_clients":
            await self._kill(step)
        elif act == "stop_server":
            assert self.server is not None
            await asyncio.to_thread(self.server.stop)
        elif act == "restart_server":
            assert self.server is not None
            await asyncio.to_thread(self.server.stop)
            await self.server.start(same_port=True)
        elif act == "no_module_server":
            self.bare = procs.Server(self.server_bin, None, self.dir, "bare")
            await self.bare.start()
            self.open_url = self.bare.url
        if "mark" in step:
            self.marks[step["mark"]] = time.monotonic()

    async def _server_cmd(self, step: Dict[str, Any]) -> None:
        assert self.raw is not None
        try:
            got = await self.raw.execute_command(*step["cmd"])
        except redis.exceptions.ResponseError as e:
            raise self.hard("the command to succeed", f"{e}") from None
        if "expect" in step and _plain(got) != step["expect"]:
            self.fail(f"the reply {json.dumps(step['expect'])}", f"{json.dumps(_plain(got))}")

    async def _kill(self, step: Dict[str, Any]) -> None:
        assert self.admin is not None
        clients = await self._driver_clients()
        ids = [int(c["id"]) for c in clients]
        if step["which"] == "bound":
            ids = [i for i in ids if i in self.bound]
            if not ids:
                raise self.hard(
                    "a connection of the driver's BIND acquire",
                    "none: no driver connection had an acquire as its last command when the "
                    f"BIND acquire was answered (driver connections now: {clients})",
                )
        elif not ids:
            raise self.hard("a connection of the driver to kill", "the driver has none")
        for i in ids:
            await self.admin.execute_command("CLIENT", "KILL", "ID", i)

    async def _other_acquire(self, step: Dict[str, Any]) -> None:
        assert self.server is not None
        key, kind = step["key"], step.get("kind", "mutex")
        owner = step.get("owner", OTHER_OWNER)
        wait = int(step.get("wait_ms", 0))
        args: List[Any]
        if kind == "mutex":
            args = ["DLOCK.ACQUIRE", key, owner]
        elif kind == "fair":
            args = ["DLOCK.FAIRACQUIRE", key, owner]
        elif kind in ("read", "write"):
            args = ["DLOCK.RWACQUIRE", key, owner, kind.upper()]
        else:
            args = ["DLOCK.SEMACQUIRE", key, owner, "LIMIT", int(step.get("limit", 1)),
                    "PERMITS", int(step.get("permits", 1))]
        args += ["PX", int(step.get("lease_ms", OTHER_LEASE_MS))]
        if wait:
            args += ["WAIT", wait]
        conn = self.server.client(socket_timeout=None, single_connection_client=True)
        try:
            try:
                got = await conn.execute_command(*args)
            except redis.exceptions.RedisError as e:
                raise self.hard(f"the other client's {args[0]} to be answered",
                                f"{type(e).__name__}: {e}") from None
            at = time.monotonic()
        finally:
            await conn.aclose()
        granted = got is not None
        if "mark" in step:
            self.marks[step["mark"]] = at
        want = step.get("expect", "granted")
        if (want == "granted") != granted:
            self.fail(f"the other client {'granted' if want == 'granted' else 'not granted'}",
                      "granted" if granted else f"not granted within {wait} ms")

    # -- expectations ----------------------------------------------------------------

    async def _expect_event(self, step: Dict[str, Any]) -> None:
        assert self.driver is not None
        handle = step["handle"]
        within = step.get("within_ms", DEFAULT_WITHIN_S * 1000)
        t0 = time.monotonic()
        ev = await self.driver.wait_event(handle, within / 1000.0)
        if ev is None:
            others = {h: e[0].body for h, e in self.driver.events.items() if e}
            seen = f"events of other handles: {others}" if others else "no event at all"
            code = self.driver.returncode
            gone = "" if code is None else f"; the driver exited, code {code}"
            raise self.hard(f"a lost event for {handle!r} within {within} ms",
                            f"none after {(time.monotonic() - t0) * 1000:.0f} ms ({seen}{gone})")
        if "mark" in step:
            self.marks[step["mark"]] = ev.at
        reasons = _list(step.get("reason"))
        got = ev.body.get("reason")
        if reasons and got not in reasons:
            self.fail(f"reason {' or '.join(reasons)}",
                      f"reason {got!r}, {max(0.0, ev.at - t0) * 1000:.0f} ms into the step")

    async def _expect_no_event(self, step: Dict[str, Any]) -> None:
        assert self.driver is not None
        handle = step["handle"]
        t0 = time.monotonic()
        ev = await self.driver.wait_event(handle, step["for_ms"] / 1000.0)
        if ev is not None:
            self.fail(f"no lost event for {handle!r} for {step['for_ms']} ms",
                      f"lost ({ev.body.get('reason')!r}) at {(ev.at - t0) * 1000:.0f} ms")
            left = step["for_ms"] / 1000.0 - (time.monotonic() - t0)
            if left > 0:
                await asyncio.sleep(left)

    async def _await(self, step: Dict[str, Any]) -> None:
        mark = step["await"]
        task = self.tasks.get(mark)
        if task is None:
            if mark in self.marks:
                return
            raise self.hard(f"an async step marked {mark!r} before this one", "none")
        within = step.get("within_ms", DEFAULT_WITHIN_S * 1000)
        try:
            await asyncio.wait_for(asyncio.shield(task), within / 1000.0)
        except asyncio.TimeoutError:
            raise self.hard(f"{mark!r} within {within} ms", "it had not come") from None

    def _figure(self, step: Dict[str, Any]) -> None:
        a, b = step["from"], step["to"]
        missing = [m for m in (a, b) if m not in self.marks]
        if missing:
            raise self.hard(f"marks {a!r} and {b!r}", f"no mark {missing[0]!r}")
        ms = (self.marks[b] - self.marks[a]) * 1000.0
        ok = True
        if "min_ms" in step and ms < step["min_ms"]:
            ok = False
            self.fail(f"{step['figure']} ≥ {step['min_ms']} ms", f"{step['figure']} {ms:.0f} ms")
        if "max_ms" in step and ms > step["max_ms"]:
            ok = False
            self.fail(f"{step['figure']} ≤ {step['max_ms']} ms", f"{step['figure']} {ms:.0f} ms")
        self.result.figures.append(Figure(step["figure"], ms, ok))

    async def _commandstats(self) -> Dict[str, Dict[str, Any]]:
        assert self.admin is not None
        return await self.admin.info("commandstats")  # type: ignore[no-any-return]

    async def _renewals(self) -> int:
        s = (await self._commandstats()).get("cmdstat_dlock.renew", {})
        return int(s.get("calls", 0))

    async def _dlock_calls(self) -> int:
        total = 0
        for name, s in (await self._commandstats()).items():
            if name.lower().startswith("cmdstat_dlock."):
                total += int(s.get("calls", 0)) + int(s.get("rejected_calls", 0))
        return total

    async def _no_renewals(self, step: Dict[str, Any]) -> None:
        before = await self._renewals()
        await asyncio.sleep(step["for_ms"] / 1000.0)
        after = await self._renewals()
        if after != before:
            self.fail(f"no DLOCK.RENEW for {step['for_ms']} ms",
                      f"{after - before} DLOCK.RENEW reached the server")

    async def _no_commands(self, step: Dict[str, Any]) -> None:
        mark = step["since"]
        if mark not in self.counts:
            raise self.hard(f"a {{\"mark\": {mark!r}}} step before this one", "none")
        now = await self._dlock_calls()
        if now != self.counts[mark]:
            stats = {k: v.get("calls") for k, v in (await self._commandstats()).items()
                     if k.lower().startswith("cmdstat_dlock.")}
            self.fail(f"no DLOCK.* command since {mark!r}",
                      f"{now - self.counts[mark]} reached the server (commandstats: {stats})")

    async def _expect_exit(self, step: Dict[str, Any]) -> None:
        assert self.driver is not None
        t0 = self.exit_reply_at or time.monotonic()
        within = step["within_ms"] / 1000.0
        at = await self.driver.wait_exit(max(0.0, t0 + within - time.monotonic()) + LATE_GRACE_S)
        if at is None:
            raise self.hard(f"the driver process to end within {step['within_ms']} ms of exit",
                            f"it still ran {(time.monotonic() - t0) * 1000:.0f} ms later")
        ms = (at - t0) * 1000.0
        self.result.figures.append(Figure("exit", ms, ms <= step["within_ms"]))
        if ms > step["within_ms"]:
            self.fail(f"the driver process to end within {step['within_ms']} ms of exit",
                      f"it ended after {ms:.0f} ms")

    async def _expect_waiters(self, step: Dict[str, Any]) -> None:
        assert self.admin is not None
        want = step["expect_waiters"]
        within = step.get("within_ms", 0) / 1000.0
        t0 = time.monotonic()
        while True:
            got = _waiters(await self.admin.execute_command("DLOCK.INFO", step["key"]))
            if got == want:
                return
            if time.monotonic() - t0 >= within:
                self.fail(f"{want} waiters in DLOCK.INFO {step['key']} within {within * 1000:.0f} ms",
                          f"{got} waiters after {(time.monotonic() - t0) * 1000:.0f} ms")
                return
            await asyncio.sleep(0.01)

    # -- the end -----------------------------------------------------------------------

    async def _cleanup(self) -> None:
        for t in self.tasks.values():
            t.cancel()
        for t in self.tasks.values():
            try:
                await t
            except BaseException:  # noqa: BLE001 - unawaited async steps end with the run
                pass
        if self.driver is not None:
            await self.driver.stop()
        for c in (self.admin, self.raw):
            if c is not None:
                try:
                    await c.aclose()
                except Exception:  # noqa: BLE001
                    pass
        if self.proxy is not None:
            try:
                await self.proxy.delete()
            except ToxiproxyError as e:
                self.result.failures.append(f"the engine could not remove its proxy: {e}")
        for s in (self.server, self.bare):
            if s is not None:
                await asyncio.to_thread(s.stop)
        if self.server is not None:
            self.result.server_log_tail = self.server.log_tail()

    def _keep_logs(self) -> None:
        dest = self.setup.logs / self.result.server / self.result.driver / self.result.scenario
        shutil.rmtree(dest, ignore_errors=True)
        try:
            shutil.copytree(self.dir, dest, ignore=shutil.ignore_patterns("*.rdb", "*.aof"))
            self.result.log_dir = dest
        except OSError:
            pass


def _list(v: Any) -> List[Any]:
    if v is None:
        return []
    return list(v) if isinstance(v, list) else [v]


def _plain(v: Any) -> Any:
    if isinstance(v, bytes):
        return v.decode(errors="replace")
    if isinstance(v, list):
        return [_plain(x) for x in v]
    return v


def _waiters(info: Any) -> int:
    """The number of waiters in a DLOCK.INFO reply (0 for no lock)."""
    if info is None:
        return 0
    if isinstance(info, dict):
        pairs = list(info.items())
    else:
        pairs = list(zip(info[0::2], info[1::2], strict=True))
    for k, v in pairs:
        if _plain(k) == "waiters":
            return len(v) if isinstance(v, (list, tuple)) else int(v)
    return 0


async def run_one(setup: Setup, server_name: str, server_bin: str, driver: Driver,
                  scenario: Scenario) -> Result:
    return await Run(setup, server_name, server_bin, driver, scenario).execute()

