"""Time from ``LocalCUDACluster()`` to a first completed task: dask-gpu against dask-cuda.

Each measurement runs in a fresh Python process (imports done before the clock starts),
alternating the two packages, and records: the first trivial task, the first GPU task
(a CuPy allocation and kernel), and closing. Writes JSON with the machine's description.

    python benchmarks/startup.py [--repeat 5] [--out benchmarks/results/startup.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from importlib.util import find_spec

# The seed's snippet (shared/seeds 000) as a script: the cluster import at the top, nothing else.
# Spawned worker processes re-run these top-level imports, as they would for a user's script.
PROBE = r"""
import json, sys, time
from distributed import Client
if sys.argv[1] == "dask-gpu":
    from dask_gpu import LocalCUDACluster
else:
    from dask_cuda import LocalCUDACluster

def gpu_task():
    import cupy
    return float(cupy.arange(1000, dtype="float64").sum())

if __name__ == "__main__":
    t0 = time.perf_counter()
    cluster = LocalCUDACluster()
    client = Client(cluster)
    assert client.submit(sum, [1, 2], pure=False).result() == 3
    t1 = time.perf_counter()
    assert client.submit(gpu_task, pure=False).result() == 499500.0
    t2 = time.perf_counter()
    workers = len(client.nthreads())
    client.close(); cluster.close()
    t3 = time.perf_counter()
    print(json.dumps({"first_task": t1 - t0, "first_gpu_task": t2 - t0, "close": t3 - t2, "workers": workers}))
"""


def measure(package: str, probe: str) -> dict:
    out = subprocess.run([sys.executable, probe, package], capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        return {"error": out.stderr[-2000:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", default="benchmarks/results/startup.json")
    args = parser.parse_args()

    from dask_gpu.report import machine_dict

    packages = ["dask-gpu"] + (["dask-cuda"] if find_spec("dask_cuda") else [])
    probe = os.path.join(os.path.dirname(os.path.abspath(args.out)), "_startup_probe.py")
    os.makedirs(os.path.dirname(probe), exist_ok=True)
    with open(probe, "w") as f:
        f.write(PROBE)
    runs = {p: [] for p in packages}
    try:
        for i in range(args.repeat):
            for package in packages if i % 2 == 0 else packages[::-1]:
                runs[package].append(measure(package, probe))
                print(package, runs[package][-1], flush=True)
    finally:
        os.remove(probe)

    summary = {}
    for package, samples in runs.items():
        ok = [s for s in samples if "error" not in s]
        summary[package] = {
            key: statistics.median(s[key] for s in ok) for key in ("first_task", "first_gpu_task", "close")
        } if ok else {"error": samples[-1]["error"]}
    if all("first_task" in summary.get(p, {}) for p in ("dask-gpu", "dask-cuda")):
        summary["ratio_first_task"] = summary["dask-gpu"]["first_task"] / summary["dask-cuda"]["first_task"]
        summary["ratio_first_gpu_task"] = summary["dask-gpu"]["first_gpu_task"] / summary["dask-cuda"]["first_gpu_task"]
    result = {
        "benchmark": "startup",
        "measure": "seconds from LocalCUDACluster() to a first completed task (sum) and GPU task (CuPy), "
        "each run in a fresh process, packages alternating, median over runs",
        "machine": machine_dict(),
        "summary": summary,
        "runs": runs,
    }
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
