"""``python -m conformance.engine.selftest``: the engine checked against itself.

Runs scenarios with a driver that lies (``fake_driver.py``: every request answered as a
success, no ``lost`` event ever) on Redis (``REDIS_SERVER`` or ``redis-server``), and
checks that each run fails at the step that must catch it, with the message it must
give. Exits 0 when every one did; prints what did not otherwise."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from pathlib import Path
from typing import List, Tuple

from .. import procs
from ..cli import ROOT, load_all, module_path, project_python
from ..model import Driver
from ..runner import Result, Setup, run_one
from ..toxiproxy import Toxiproxy

HERE = Path(__file__).resolve().parent

#: scenario → a text its failure report must contain.
MUST_FAIL: List[Tuple[str, str]] = [
    ("partition-2s", "expected: a lost event for 'h' within 10000 ms"),
    ("forcerelease", "expected: a lost event for 'h' within 15000 ms"),
    ("lease-end", "expected: a lost event for 'h' within 5000 ms"),
    ("bad-input", "expected: error invalid_argument"),
    ("wrong-type", "expected: error wrong_kind"),
    ("long-wait", "expected: grant ≥ -5 ms"),
    ("unlock-no-renew", "expected: the other client not granted"),
    ("deadline-refused", "expected: error timeout or connection"),
]


async def _run(setup: Setup, server: str, driver: Driver, names: List[str]) -> List[Result]:
    _, scenarios = load_all()
    by_name = {s.name: s for s in scenarios}
    return list(await asyncio.gather(*(
        run_one(setup, "redis70", server, driver, by_name[n]) for n in names
    )))


def main() -> int:
    server = shutil.which(os.environ.get("REDIS_SERVER") or "redis-server")
    if server is None:
        print("selftest: no redis-server (set REDIS_SERVER)", file=sys.stderr)
        return 2
    toxi_bin = os.environ.get("TOXIPROXY_SERVER")
    if not toxi_bin:
        from ..cli import _deps

        toxi_bin = _deps("toxiproxy")
    driver = Driver(name="fake", path=HERE / "fake_driver.py",
                    run=["{python}", str(HERE / "fake_driver.py")])
    workdir = procs.new_workdir("dlock-conformance-selftest-")
    toxi = Toxiproxy(toxi_bin, workdir)
    bad: List[str] = []
    try:
        toxi.start()
        setup = Setup(root=ROOT, module=module_path(), toxiproxy=toxi, python=project_python(),
                      workdir=workdir, logs=workdir / "logs")
        results = asyncio.run(_run(setup, server, driver, [n for n, _ in MUST_FAIL]))
    finally:
        toxi.stop()
        procs.stop_all()
        procs.remove_dir(workdir)
    for (name, text), r in zip(MUST_FAIL, results, strict=True):
        report = "\n".join(r.failures)
        if r.status != "FAIL" or text not in report:
            bad.append(f"{name}: {r.status}, expected FAIL with {text!r}; got:\n{report}")
        else:
            print(f"selftest: {name}: FAIL as it must ({text})")
    for b in bad:
        print(f"selftest: WRONG {b}")
    print(f"selftest: {len(MUST_FAIL) - len(bad)} of {len(MUST_FAIL)} runs failed as they must")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
