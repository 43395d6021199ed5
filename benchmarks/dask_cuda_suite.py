"""dask-cuda's own test suite against ``dask_gpu.cuda``: the evidence that changing the import is enough.

Fetches dask-cuda's wheel (``pip download``, or ``--wheel`` where there is no network), takes its test files, changes
``dask_cuda`` to ``dask_gpu.cuda`` and the command ``dask cuda worker`` to ``dask gpu worker`` (nothing else), and runs
them with pytest: on ``--simulate`` simulated GPUs where the machine has none, on the real ones where it has them.
The summary (counts, each test's outcome and the first line of each failure) goes to ``--out`` as JSON. None of
dask-cuda's files are kept.

    python benchmarks/dask_cuda_suite.py [--version 26.10.0] [--simulate 9] [--out FILE] [-- PYTEST ARGS]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import subprocess
import sys
import sysconfig
import tempfile
import time
import xml.etree.ElementTree as ET
import zipfile
from collections import Counter
from importlib.util import find_spec


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", default="26.10.0", help="dask-cuda's version [26.10.0]")
    parser.add_argument("--wheel", help="dask-cuda's wheel, where pip cannot download it")
    parser.add_argument("--simulate", type=int, default=9, help="simulated GPUs where there is no real one [9]")
    parser.add_argument("--timeout", type=int, default=120, help="seconds a test may take, with pytest-timeout [120]")
    parser.add_argument("--out", help="the summary JSON")
    parser.add_argument("pytest_args", nargs="*", help="more arguments for pytest (after --)")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="dask-cuda-suite-") as work:
        wheel = args.wheel or download(args.version, work)
        tests = extract(wheel, os.path.join(work, "tests"))
        simulated = None if real_gpus() else args.simulate
        python, paths = python_beside_dask(work)
        env = {**os.environ, **paths, **({"DASK_GPU__SIMULATE": str(simulated)} if simulated else {})}
        report = os.path.join(work, "report.xml")
        start = time.perf_counter()
        limit = [f"--timeout={args.timeout}"] if find_spec("pytest_timeout") else []
        subprocess.run([python, "-m", "pytest", tests, "-p", "no:cacheprovider", "-q", "-rN",
                        "--continue-on-collection-errors", *limit, f"--junitxml={report}", "-o", "junit_family=xunit2",
                        *args.pytest_args], env=env, cwd=work, check=False)
        if not os.path.exists(report):
            raise SystemExit("pytest wrote no report: see its output above")
        result = summary(report)
    result.update(dask_cuda=os.path.basename(wheel), simulated=simulated, seconds=round(time.perf_counter() - start, 1))
    from dask_gpu.report import machine_dict

    result["machine"] = machine_dict()
    counts = result["counts"]
    print(f"{counts} of {result['tests']} tests; {result['pass_rate_without_skips']:.1%} of those that ran passed")
    for reason, n in result["failures_by_reason"].items():
        print(f"  {n:4d}  {reason}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)
    return result


def download(version: str, where: str) -> str:
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                    f"dask-cuda=={version}", "-d", where], check=True)
    return glob.glob(os.path.join(where, "dask_cuda-*.whl"))[0]


def extract(wheel: str, where: str) -> str:
    """The wheel's test files under ``where``, pointed at ``dask_gpu.cuda``."""
    os.makedirs(where)
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            if name.startswith("dask_cuda/tests/") and name.endswith(".py"):
                text = retarget(archive.read(name).decode())
                with open(os.path.join(where, os.path.basename(name)), "w") as f:
                    f.write(text)
    return where


def retarget(text: str) -> str:
    """dask-cuda's import path and worker command, made dask-gpu's; nothing else changes."""
    text = re.sub(r"\bdask_cuda\b", "dask_gpu.cuda", text)
    text = re.sub(r'("dask",\s*)"cuda"', r'\1"gpu"', text)
    return text.replace("dask cuda worker", "dask gpu worker")


def python_beside_dask(work: str) -> tuple[str, dict]:
    """A Python whose scripts directory holds ``dask``, and the environment it needs: distributed's ``popen``,
    with which the tests start ``dask gpu worker``, looks there (a ``--target`` install puts the command
    elsewhere). This one where it has it; else a virtual environment made for the run, with this one's packages
    on PYTHONPATH."""
    if os.path.exists(os.path.join(sysconfig.get_path("scripts"), "dask")):
        return sys.executable, {}
    venv = os.path.join(work, "venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    python = os.path.join(venv, "bin", "python")
    with open(os.path.join(venv, "bin", "dask"), "w") as f:
        f.write(f'#!/bin/sh\nexec "{python}" -m dask "$@"\n')
    os.chmod(os.path.join(venv, "bin", "dask"), 0o755)
    return python, {"PYTHONPATH": os.pathsep.join(path for path in sys.path if path)}


def real_gpus() -> bool:
    from dask_gpu import devices

    return bool(devices.discover().devices) and not os.environ.get("DASK_GPU__SIMULATE")


def summary(report: str) -> dict:
    """Counts, each test's outcome, and the failures grouped by their message's first line."""
    outcomes, reasons = {}, Counter()
    for case in ET.parse(report).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        outcome, message = "passed", ""
        for kind in ("failure", "error", "skipped"):
            found = case.find(kind)
            if found is not None:
                outcome = {"failure": "failed"}.get(kind, kind)
                message = (found.get("message") or found.text or "").strip().splitlines()[:1]
                message = message[0][:200] if message else ""
                break
        if outcome == "error" and name in outcomes:  # an error in teardown after a result
            outcomes[name]["teardown_error"] = message
            continue
        outcomes[name] = {"outcome": outcome, **({"message": message} if message else {})}
        if outcome in ("failed", "error"):
            reasons[message] += 1
    counts = Counter(o["outcome"] for o in outcomes.values())
    ran = counts["passed"] + counts["failed"] + counts["error"]
    return {"tests": len(outcomes), "counts": dict(counts),
            "pass_rate_without_skips": counts["passed"] / ran if ran else 0.0,
            "failures_by_reason": dict(reasons.most_common()), "outcomes": outcomes}


if __name__ == "__main__":
    main()
