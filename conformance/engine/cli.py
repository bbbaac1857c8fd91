"""The engine's command line: which servers, drivers and scenarios; the builds; the runs
in parallel; the tables and the failures (conformance/README.md, "Output")."""

from __future__ import annotations

import argparse
import asyncio
import fnmatch
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from . import procs
from .model import SERVER_NAMES, Driver, FormatError, Scenario, load_driver, load_scenario
from .runner import Result, Setup, run_one
from .toxiproxy import Toxiproxy, ToxiproxyError

ROOT = Path(__file__).resolve().parents[2]
#: Terminal colour codes (GLIDE's logger writes them), left out of the report.
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
HERE = ROOT / "conformance"
#: Exit status of a build command that did not find its tool (a shell's "command not
#: found"): the driver is skipped, not failed.
MISSING_TOOL = 127


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m conformance.engine",
        description="Runs the conformance scenarios (conformance/scenarios/*.json) with every "
        "driver (conformance/drivers/*.json) on each server, and prints a table per server.",
    )
    p.add_argument("--servers", default=",".join(SERVER_NAMES),
                   help="comma-separated: redis70 (REDIS_SERVER, else redis-server on PATH), "
                   "valkey91 (VALKEY91_SERVER, else what `scripts/deps.sh valkey9` prints), or "
                   "NAME=/path/to/server (default: %(default)s)")
    p.add_argument("--drivers", default="*",
                   help="comma-separated driver names or patterns (python-*); default: all")
    p.add_argument("--scenarios", default="*",
                   help="comma-separated scenario names or patterns; default: all")
    p.add_argument("-j", "--jobs", type=int, default=6,
                   help="scenario runs at once (default: %(default)s; they mostly wait)")
    p.add_argument("--list", action="store_true",
                   help="list the servers, drivers and scenarios, and exit")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    p.add_argument("--rerun", type=int, default=0, metavar="N",
                   help="run a failed combination again, one at a time after all the others, "
                   "up to N times; one that then passes is 'ok*' in the table and listed as "
                   "flaky with its first failure (default: %(default)s)")
    p.add_argument("--build-only", action="store_true",
                   help="build the drivers and exit (CI builds them before the suites that "
                   "run beside the conformance suite start)")
    p.add_argument("--no-build", action="store_true",
                   help="run the drivers as built before (--build-only), without their builds")
    p.add_argument("--strict", action="store_true",
                   help="a driver skipped because a tool its build needs is missing fails "
                   "the run (CI: every driver must run)")
    a = p.parse_args(argv)
    if a.jobs < 1:
        p.error(f"-j must be at least 1, got {a.jobs}")
    if a.rerun < 0:
        p.error(f"--rerun must be 0 or more, got {a.rerun}")
    return a


def _pick(names: List[str], spec: str, what: str) -> List[str]:
    pats = [s.strip() for s in spec.split(",") if s.strip()]
    out = [n for n in names if any(fnmatch.fnmatchcase(n, pat) for pat in pats)]
    for pat in pats:
        literal = not any(c in pat for c in "*?[")
        if literal and pat not in names:
            raise SystemExit(f"conformance: no {what} matches {pat!r} (there are: {', '.join(names)})")
    return out


def load_all() -> Tuple[List[Driver], List[Scenario]]:
    try:
        drivers = [load_driver(p) for p in sorted((HERE / "drivers").glob("*.json"))]
        scenarios = [load_scenario(p) for p in sorted((HERE / "scenarios").glob("*.json"))]
    except FormatError as e:
        raise SystemExit(f"conformance: {e}") from None
    return drivers, scenarios


def _deps(what: str) -> str:
    """The path ``scripts/deps.sh what`` prints (it installs what is missing)."""
    r = subprocess.run([str(ROOT / "scripts" / "deps.sh"), what], cwd=ROOT,
                       stdout=subprocess.PIPE, text=True)
    path = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""
    if r.returncode != 0 or not path:
        raise SystemExit(f"conformance: `scripts/deps.sh {what}` failed (exit {r.returncode})")
    return path


def resolve_servers(spec: str) -> List[Tuple[str, str]]:
    out = []
    for item in (s.strip() for s in spec.split(",")):
        if not item:
            continue
        if "=" in item:
            name, path = item.split("=", 1)
        elif item == "redis70":
            name, path = item, os.environ.get("REDIS_SERVER") or "redis-server"
        elif item == "valkey91":
            name, path = item, os.environ.get("VALKEY91_SERVER") or _deps("valkey9")
        else:
            raise SystemExit(f"conformance: unknown server {item!r}: redis70, valkey91 or NAME=/path")
        found = shutil.which(path)
        if found is None:
            raise SystemExit(f"conformance: server {name}: {path} not found "
                             "(install it, or set REDIS_SERVER / VALKEY91_SERVER)")
        out.append((name, found))
    return out


def project_python() -> str:
    venv = Path(os.environ.get("VENV") or ROOT / ".venv")
    py = venv / "bin" / "python"
    return str(py) if py.exists() else sys.executable


def build(driver: Driver, python: str, run_build: bool = True) -> Tuple[str, str]:
    """``("ok" | "skipped" | "failed", why)`` for one driver (without running its build
    command when not ``run_build``)."""
    for tool in driver.requires:
        if shutil.which(tool) is None:
            return "skipped", f"{tool} not installed (the driver needs it on PATH)"
    run = driver.run[0].replace("{python}", python).replace("{root}", str(ROOT))
    if "/" not in run and shutil.which(run) is None:
        return "skipped", f"{run} not installed (the driver runs it)"
    if not driver.build or not run_build:
        return "ok", ""
    argv = [a.replace("{python}", python).replace("{root}", str(ROOT)) for a in driver.build]
    t0 = time.monotonic()
    try:
        r = subprocess.run(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, errors="replace")
    except FileNotFoundError as e:
        return "skipped", f"its build tool is not installed: {e.filename or argv[0]}"
    tail = "\n".join(r.stdout.strip().splitlines()[-15:])
    if r.returncode == MISSING_TOOL:
        return "skipped", f"a tool its build needs is missing: {tail or '(no output)'}"
    if r.returncode != 0:
        return "failed", f"build {' '.join(argv)} exited {r.returncode}:\n{tail}"
    if "/" in run and not (ROOT / run).exists():
        return "failed", f"the build succeeded but made no {run}"
    return "ok", f"built in {time.monotonic() - t0:.1f} s"


def module_path() -> Path:
    env = os.environ.get("DLOCK_MODULE")
    p = Path(env) if env else ROOT / "target" / "release" / "libdlock.so"
    p = p.resolve()
    if not p.is_file():
        raise SystemExit(f"conformance: the dlock module is not at {p}: run `cargo build "
                         "--release` (or `make build`), or set DLOCK_MODULE")
    return p


# ---------------------------------------------------------------------------
# Output


def _table(server: str, version: str, scenarios: List[str], drivers: List[str],
           cells: Dict[Tuple[str, str], Result]) -> str:
    head = ["scenario"] + drivers
    rows = []
    for sc in scenarios:
        row = [sc]
        for d in drivers:
            r = cells.get((d, sc))
            row.append("-" if r is None else r.cell())
        rows.append(row)
    widths = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]
    def line(cells: List[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    out = [f"== {server}: {version}", line(head), line(["-" * w for w in widths])]
    out += [line(r) for r in rows]
    return "\n".join(out)


def _failure(r: Result) -> str:
    out = [f"--- FAIL {r.server} / {r.driver} / {r.scenario} ({r.seconds:.1f} s)"]
    out += ["  " + f for f in r.failures]
    if r.stderr_tail:
        out.append("  driver stderr (last lines):")
        out += ["    " + _ANSI.sub("", line) for line in r.stderr_tail[-20:]]
    if r.log_dir is not None:
        try:
            shown = r.log_dir.relative_to(ROOT)
        except ValueError:
            shown = r.log_dir
        out.append(f"  logs (driver stderr, server log): {shown}/")
    return "\n".join(out)


# ---------------------------------------------------------------------------
# main


async def _run_all(setup: Setup, combos: List[Tuple[str, str, Driver, Scenario]], jobs: int,
                   quiet: bool) -> List[Result]:
    sem = asyncio.Semaphore(jobs)
    done = 0
    # Ctrl-C, SIGTERM, SIGHUP: every run is cancelled and cleans up (its driver, servers
    # and proxy stopped) before the engine ends.
    loop = asyncio.get_running_loop()
    me = asyncio.current_task()
    assert me is not None
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        loop.add_signal_handler(sig, me.cancel)

    async def one(server: str, binary: str, driver: Driver, sc: Scenario) -> Result:
        nonlocal done
        async with sem:
            r = await run_one(setup, server, binary, driver, sc)
        done += 1
        if not quiet:
            _say(f"[{done}/{len(combos)}] {server} {driver.name} {sc.name}: {r.cell()} ({r.seconds:.1f} s)")
        return r

    return list(await asyncio.gather(*(one(*c) for c in combos)))


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    # SIGTERM and SIGHUP end the engine as Ctrl-C does: what it started is stopped.
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGHUP, _interrupt)
    drivers, scenarios = load_all()
    drivers = [d for d in drivers if d.name in _pick([d.name for d in drivers], args.drivers, "driver")]
    scenarios = [s for s in scenarios
                 if s.name in _pick([s.name for s in scenarios], args.scenarios, "scenario")]
    if args.list:
        for name in SERVER_NAMES:
            print(f"server   {name}")
        for d in drivers:
            print(f"driver   {d.name:16} {d.language:8} {d.transport}")
        for s in scenarios:
            print(f"scenario {s.name:26} {s.title}")
        return 0
    servers = resolve_servers(args.servers)
    module = module_path()
    python = project_python()

    # Builds, one driver after another (they are the CPU-heavy part).
    ready: List[Driver] = []
    skipped: List[str] = []
    broken: List[str] = []
    for d in drivers:
        status, why = build(d, python, run_build=not args.no_build)
        if status == "ok":
            ready.append(d)
            if not args.quiet and why:
                _say(f"driver {d.name}: {why}")
        elif status == "skipped":
            skipped.append(f"skipped: {d.name}: {why}")
            _say(skipped[-1])
        else:
            broken.append(f"--- FAIL driver {d.name}: {why}")
            _say(broken[-1])

    if args.build_only:
        for line in broken + skipped:
            print(line)
        print(f"conformance: {len(ready)} drivers built"
              + (f", {len(broken)} driver builds failed" if broken else "")
              + (f", {len(skipped)} drivers skipped" if skipped else ""))
        return 1 if broken or (skipped and args.strict) else 0
    combos = [
        (sname, sbin, d, sc)
        for sname, sbin in servers for d in ready for sc in scenarios
        if sc.servers is None or sname in sc.servers
    ]
    combos.sort(key=lambda c: -c[3].estimate_s())
    workdir = procs.new_workdir("dlock-conformance-")
    toxi: Optional[Toxiproxy] = None
    results: List[Result] = []
    versions = {name: procs.version_of(b) for name, b in servers}
    try:
        if any(c[3].via == "proxy" for c in combos):
            binary = os.environ.get("TOXIPROXY_SERVER") or _deps("toxiproxy")
            toxi = Toxiproxy(binary, workdir)
            try:
                toxi.start()
            except ToxiproxyError as e:
                raise SystemExit(f"conformance: {e}") from None
        setup = Setup(root=ROOT, module=module, toxiproxy=toxi, python=python,
                      workdir=workdir, logs=ROOT / "target" / "conformance" / "logs")
        if combos:
            results = asyncio.run(_run_all(setup, combos, args.jobs, args.quiet))
        # Reruns of what failed, one at a time: most timing failures on a loaded
        # machine come from the runs beside them, so a rerun runs alone.
        for attempt in range(args.rerun):
            again = [(c, r) for c, r in zip(combos, results) if r.status == "FAIL"]
            if not again:
                break
            _say(f"conformance: rerunning {len(again)} failed runs one at a time "
                 f"(rerun {attempt + 1} of {args.rerun})")
            redo = asyncio.run(_run_all(setup, [c for c, _ in again], 1, args.quiet))
            by_combo = {id(c): new for (c, _), new in zip(again, redo)}
            for i, c in enumerate(combos):
                new = by_combo.get(id(c))
                if new is not None:
                    old = results[i]
                    new.earlier = old.earlier + [old]
                    results[i] = new
    except (KeyboardInterrupt, asyncio.CancelledError):
        _say("conformance: interrupted; stopping what was started")
        return 130
    finally:
        if toxi is not None:
            toxi.stop()
        procs.stop_all()
        procs.remove_dir(workdir)

    # The tables, then what failed.
    names = [d.name for d in ready]
    for sname, _ in servers:
        cells = {(r.driver, r.scenario): r for r in results if r.server == sname}
        print(_table(sname, versions[sname], [s.name for s in scenarios], names, cells))
        print()
    results.sort(key=lambda r: (r.server, r.driver, r.scenario))
    fails = [r for r in results if r.status == "FAIL"]
    for r in fails:
        print(_failure(r))
        print()
    for b in broken:
        print(b)
        print()
    flaky = [r for r in results if r.earlier and r.status != "FAIL"]
    if flaky:
        print("flaky (failed, then passed when rerun alone; their first failure):")
        for r in flaky:
            first = r.earlier[0]
            print(f"  {r.server} / {r.driver} / {r.scenario}: "
                  + ("; ".join(first.failures) or "(no failure text)"))
        print()
    nas = [r for r in results if r.status == "n/a"]
    if nas:
        print("n/a (the driver answered unsupported):")
        for r in nas:
            print(f"  {r.server} / {r.driver} / {r.scenario}: {r.note}")
        print()
    for line in skipped:
        print(line)
    if skipped:
        print()
    for sname, _ in servers:
        for d in ready:
            rs = [r for r in results if r.server == sname and r.driver == d.name]
            if rs:
                print(f"time: {sname} {d.name}: {sum(r.seconds for r in rs):.0f} s over "
                      f"{len(rs)} scenarios (longest {max(rs, key=lambda r: r.seconds).scenario} "
                      f"{max(r.seconds for r in rs):.0f} s)")
    ok = sum(r.status == "ok" for r in results)
    print(f"conformance: {ok} ok, {len(fails)} FAIL, {len(nas)} n/a"
          + (f", {len(broken)} driver builds failed" if broken else "")
          + (f", {len(skipped)} drivers skipped" if skipped else "")
          + (f", {len(flaky)} passed only when rerun" if flaky else "")
          + f"; total time {time.monotonic() - started:.0f} s (-j {args.jobs})")
    if skipped and args.strict:
        print("conformance: --strict: a skipped driver is a failure")
        return 1
    return 1 if fails or broken else 0
