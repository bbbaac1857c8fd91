"""Scenario and driver files: loading and checking them (conformance/README.md gives
the format). A file that does not follow the format is refused at load, with the file,
the step and what was expected, before any server starts."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

#: The servers the engine knows by name (``--servers``).
SERVER_NAMES = ("redis70", "valkey91")

ERROR_KINDS = {
    "lost", "timeout", "wrong_kind", "module_not_loaded", "deadlock", "queue_full",
    "not_durable", "connection", "invalid_argument", "unsupported", "other",
}
REASONS = {"forced", "expired", "deleted", "disconnected", "unreachable", "not_held", "no_quorum"}
DRIVER_OPS = {"open", "acquire", "acquire_multi", "campaign", "unlock", "held", "close", "exit"}
KINDS = {"mutex", "read", "write", "fair", "semaphore"}
DO_ACTS = {
    "partition", "heal", "refuse", "latency", "other_acquire", "server", "kill_clients",
    "stop_server", "restart_server", "no_module_server",
}
FIGURES = {"lead", "lateness", "grant"}
OPEN_OPTIONS = {
    "watchdog_lease_ms", "renew_interval_ms", "transport_timeout_ms", "wait_mode",
    "replicas", "bind",
}


class FormatError(Exception):
    pass


@dataclass
class Scenario:
    name: str
    title: str
    path: Path
    via: str
    open: Optional[Dict[str, Any]]
    steps: List[Dict[str, Any]]
    servers: Optional[List[str]] = None
    timeout_s: float = 120.0

    @property
    def explicit_open(self) -> bool:
        """The steps open the client themselves (no open is sent before them)."""
        return any(s.get("driver") == "open" for s in self.steps)

    def estimate_s(self) -> float:
        """A rough length, to start the long runs first."""
        total = 0.0
        for s in self.steps:
            total += float(s.get("sleep_ms", 0)) + float(s.get("for_ms", 0))
            if "expect_event" in s or "await" in s:
                total += float(s.get("within_ms", 0)) / 2
        return total / 1000.0


@dataclass
class Driver:
    name: str
    path: Path
    language: str = ""
    transport: str = ""
    build: Optional[List[str]] = None
    run: List[str] = field(default_factory=list)
    requires: List[str] = field(default_factory=list)


def _load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise FormatError(f"{path}: not a readable JSON file: {e}") from e


def _argv(path: Path, what: str, v: Any) -> List[str]:
    if not isinstance(v, list) or not v or not all(isinstance(a, str) for a in v):
        raise FormatError(f"{path}: {what!r} must be a non-empty list of strings, got {v!r}")
    return list(v)


def load_driver(path: Path) -> Driver:
    d = _load_json(path)
    if not isinstance(d, dict):
        raise FormatError(f"{path}: expected a JSON object")
    name = d.get("name")
    if name != path.stem:
        raise FormatError(f"{path}: 'name' must be the file's name {path.stem!r}, got {name!r}")
    build = d.get("build")
    requires = d.get("requires", [])
    if not isinstance(requires, list) or not all(isinstance(r, str) for r in requires):
        raise FormatError(f"{path}: 'requires' must be a list of command names, got {requires!r}")
    return Driver(
        name=name, path=path, language=str(d.get("language", "")),
        transport=str(d.get("transport", "")),
        build=None if build is None else _argv(path, "build", build),
        run=_argv(path, "run", d.get("run")), requires=list(requires),
    )


def _need(cond: bool, where: str, what: str) -> None:
    if not cond:
        raise FormatError(f"{where}: {what}")


def _ms(step: Dict[str, Any], key: str, where: str, required: bool = False) -> None:
    if key not in step:
        _need(not required, where, f"needs {key!r} (milliseconds)")
        return
    v = step[key]
    _need(isinstance(v, (int, float)) and not isinstance(v, bool), where,
          f"{key!r} must be a number of milliseconds, got {v!r}")


def _strings(v: Any) -> List[str]:
    return [v] if isinstance(v, str) else list(v) if isinstance(v, list) else []


def _check_expect(expect: Any, where: str) -> None:
    if expect == "ok":
        return
    _need(isinstance(expect, dict), where,
          f"'expect' must be \"ok\" or an object, got {expect!r}")
    if "error" in expect:
        kinds = _strings(expect["error"])
        _need(bool(kinds) and all(k in ERROR_KINDS for k in kinds), where,
              f"'expect.error' must name kinds of {sorted(ERROR_KINDS)}, got {expect['error']!r}")
        for r in _strings(expect.get("reason", [])):
            _need(r in REASONS, where, f"unknown loss reason {r!r} (one of {sorted(REASONS)})")
    for k, v in expect.items():
        if k in ("error", "reason"):
            continue
        if k == "within_ms":
            _ms(expect, k, where)
            continue
        _need(isinstance(v, list), where,
              f"'expect.{k}' must be the list of allowed values, got {v!r}")


def check_step(step: Any, where: str) -> None:
    _need(isinstance(step, dict) and bool(step), where, f"a step must be an object, got {step!r}")
    if "driver" in step:
        op = step["driver"]
        _need(op in DRIVER_OPS, where, f"unknown driver op {op!r} (one of {sorted(DRIVER_OPS)})")
        _check_expect(step.get("expect", "ok"), where)
        if op in ("acquire", "acquire_multi", "unlock", "held", "campaign"):
            _need(isinstance(step.get("handle"), str), where, f"{op} needs a 'handle'")
        if op == "acquire":
            _need(isinstance(step.get("key"), str), where, "acquire needs a 'key'")
            _need(step.get("kind", "mutex") in KINDS, where,
                  f"'kind' must be one of {sorted(KINDS)}, got {step.get('kind')!r}")
        if op == "acquire_multi":
            keys = step.get("keys")
            _need(isinstance(keys, list) and bool(keys) and all(isinstance(k, str) for k in keys),
                  where, "acquire_multi needs 'keys', a list of keys")
        if op == "campaign":
            _need(isinstance(step.get("name"), str), where, "campaign needs a 'name'")
        if op == "open" and "options" in step:
            opts = step["options"]
            _need(isinstance(opts, dict) and set(opts) <= OPEN_OPTIONS, where,
                  f"open options must be among {sorted(OPEN_OPTIONS)}, got {opts!r}")
        for k in ("lease_ms", "wait_ms"):
            if k in step and step[k] is not None:
                _ms(step, k, where)
        if step.get("async"):
            _need(isinstance(step.get("mark"), str), where, "an async step needs a 'mark' to await")
    elif "do" in step:
        act = step["do"]
        _need(act in DO_ACTS, where, f"unknown act {act!r} (one of {sorted(DO_ACTS)})")
        if act == "latency":
            _ms(step, "ms", where, required=True)
        if act == "other_acquire":
            _need(isinstance(step.get("key"), str), where, "other_acquire needs a 'key'")
            _need(step.get("kind", "mutex") in KINDS, where,
                  f"'kind' must be one of {sorted(KINDS)}, got {step.get('kind')!r}")
            _need(step.get("expect", "granted") in ("granted", "not_granted"), where,
                  "other_acquire's 'expect' is \"granted\" (default) or \"not_granted\"")
            _ms(step, "wait_ms", where)
            _ms(step, "lease_ms", where)
            if step.get("async"):
                _need(isinstance(step.get("mark"), str), where,
                      "an async step needs a 'mark' to await")
        if act == "server":
            cmd = step.get("cmd")
            _need(isinstance(cmd, list) and bool(cmd) and all(isinstance(a, (str, int)) for a in cmd),
                  where, "server needs 'cmd', a list of the command's words")
        if act == "kill_clients":
            _need(step.get("which") in ("normal", "bound"), where,
                  "kill_clients needs 'which': \"normal\" or \"bound\"")
    elif "expect_event" in step:
        _need(step["expect_event"] == "lost", where, "only 'lost' events exist")
        _need(isinstance(step.get("handle"), str), where, "expect_event needs a 'handle'")
        _ms(step, "within_ms", where)
        for r in _strings(step.get("reason", [])):
            _need(r in REASONS, where, f"unknown loss reason {r!r} (one of {sorted(REASONS)})")
    elif "expect_no_event" in step:
        _need(step["expect_no_event"] == "lost", where, "only 'lost' events exist")
        _need(isinstance(step.get("handle"), str), where, "expect_no_event needs a 'handle'")
        _ms(step, "for_ms", where, required=True)
    elif "await" in step:
        _need(isinstance(step["await"], str), where, "'await' names a mark")
        _ms(step, "within_ms", where)
    elif "sleep_ms" in step:
        _ms(step, "sleep_ms", where, required=True)
    elif "figure" in step:
        _need(step["figure"] in FIGURES, where, f"'figure' is one of {sorted(FIGURES)}")
        _need(isinstance(step.get("from"), str) and isinstance(step.get("to"), str), where,
              "a figure needs 'from' and 'to' marks")
        _need("min_ms" in step or "max_ms" in step, where, "a figure needs 'min_ms' or 'max_ms'")
    elif "expect_no_renewals" in step:
        _ms(step, "for_ms", where, required=True)
    elif "expect_no_commands" in step:
        _need(isinstance(step.get("since"), str), where, "expect_no_commands needs 'since' (a mark)")
    elif "expect_exit" in step:
        _ms(step, "within_ms", where, required=True)
    elif "expect_waiters" in step:
        _need(isinstance(step["expect_waiters"], int), where, "'expect_waiters' is a count")
        _need(isinstance(step.get("key"), str), where, "expect_waiters needs a 'key'")
        _ms(step, "within_ms", where)
    elif "mark" in step:
        _need(isinstance(step["mark"], str), where, "'mark' names the mark")
    else:
        raise FormatError(f"{where}: unknown step {json.dumps(step)}")


def load_scenario(path: Path) -> Scenario:
    d = _load_json(path)
    _need(isinstance(d, dict), str(path), "expected a JSON object")
    name = d.get("name")
    _need(name == path.stem, str(path), f"'name' must be the file's name {path.stem!r}, got {name!r}")
    via = d.get("via", "direct")
    _need(via in ("proxy", "direct"), str(path), f"'via' is \"proxy\" or \"direct\", got {via!r}")
    servers = d.get("servers")
    if servers is not None:
        _need(isinstance(servers, list) and all(isinstance(s, str) for s in servers),
              str(path), f"'servers' is a list of server names, got {servers!r}")
    opened = d.get("open", {})
    _need(isinstance(opened, dict), str(path), f"'open' must be an object, got {opened!r}")
    opts = opened.get("options", {})
    _need(isinstance(opts, dict) and set(opts) <= OPEN_OPTIONS, str(path),
          f"open options must be among {sorted(OPEN_OPTIONS)}, got {opts!r}")
    steps = d.get("steps")
    _need(isinstance(steps, list) and bool(steps), str(path), "'steps' must be a non-empty list")
    for i, step in enumerate(steps, 1):
        check_step(step, f"{path.name} step {i}")
    timeout_s = d.get("timeout_s", 120)
    _need(isinstance(timeout_s, (int, float)) and timeout_s > 0, str(path),
          f"'timeout_s' must be a positive number of seconds, got {timeout_s!r}")
    return Scenario(
        name=name, title=str(d.get("title", "")), path=path, via=via, open=opened,
        steps=steps, servers=servers, timeout_s=float(timeout_s),
    )
