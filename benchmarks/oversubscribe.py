"""A workload whose data is several times the device memory limit: dask-gpu against dask-cuda.

``x = random((n, n), chunks).persist(); (x.T @ x).sum()`` with ``device_memory_limit`` set
well below the size of ``x``, so workers must spill device data to the host and back. The
answer is checked against ``(x.sum(axis=1) ** 2).sum()``, which is equal in exact arithmetic.
Each package runs in a fresh process; the JSON has the machine's description.

    python benchmarks/oversubscribe.py [--n 40000] [--chunks 5000] [--limit 4GB] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from importlib.util import find_spec

PROBE = r"""
import json, sys, time
import cupy
import dask
import dask.array as da
from distributed import Client, wait
package, n, chunks, limit = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
if package == "dask-gpu":
    from dask_gpu import LocalCUDACluster
    from dask_gpu.memory.stats import memory_stats
else:
    from dask_cuda import LocalCUDACluster
    memory_stats = None

if __name__ == "__main__":
    result = {"package": package}
    with LocalCUDACluster(n_workers=1, device_memory_limit=limit, dashboard_address=False) as cluster, \
            Client(cluster) as client:
        rs = da.random.RandomState(RandomState=cupy.random.RandomState, seed=42)
        start = time.perf_counter()
        try:
            x = rs.random((n, n), chunks=chunks).persist()
            wait(x)
            result["persist_seconds"] = time.perf_counter() - start
            total = float((x.T @ x).sum().compute())
            result["seconds"] = time.perf_counter() - start
            reference = float((x.sum(axis=1) ** 2).sum().compute())
            result["relative_error"] = abs(total - reference) / abs(reference)
            result["correct"] = result["relative_error"] < 1e-9
        except Exception as e:  # report how it failed, as the benchmark's answer
            result["error"] = f"{type(e).__name__}: {e}"[:2000]
            result["seconds"] = time.perf_counter() - start
        if memory_stats is not None:
            result["memory"] = memory_stats(client)
    print(json.dumps(result))
"""


def run(package: str, probe: str, n: int, chunks: int, limit: str, timeout: float) -> dict:
    try:
        out = subprocess.run(
            [sys.executable, probe, package, str(n), str(chunks), limit],
            capture_output=True, text=True, timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return {"package": package, "error": f"did not finish in {timeout:.0f} s"}
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if not lines:
        return {"package": package, "error": f"exit code {out.returncode}: {out.stderr[-2000:]}"}
    return json.loads(lines[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=40000)
    parser.add_argument("--chunks", type=int, default=5000)
    parser.add_argument("--limit", default="4GB")
    parser.add_argument("--timeout", type=float, default=240)
    parser.add_argument("--out", default="benchmarks/results/oversubscribe.json")
    args = parser.parse_args()

    from dask.utils import parse_bytes

    from dask_gpu.report import machine_dict

    packages = ["dask-gpu"] + (["dask-cuda"] if find_spec("dask_cuda") else [])
    with tempfile.TemporaryDirectory() as tmp:
        probe = os.path.join(tmp, "oversubscribe_probe.py")
        with open(probe, "w") as f:
            f.write(PROBE)
        runs = [run(p, probe, args.n, args.chunks, args.limit, args.timeout) for p in packages]
    data_bytes = args.n * args.n * 8
    result = {
        "benchmark": "oversubscribe",
        "workload": f"x = random(({args.n}, {args.n}), chunks={args.chunks}).persist(); (x.T @ x).sum()",
        "device_memory_limit": args.limit,
        "data_over_limit": data_bytes / parse_bytes(args.limit),
        "machine": machine_dict(),
        "runs": runs,
    }
    times = {r["package"]: r["seconds"] for r in runs if r.get("correct")}
    if len(times) == 2:
        result["ratio_dask_gpu_over_dask_cuda"] = times["dask-gpu"] / times["dask-cuda"]
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    for r in runs:
        status = "right" if r.get("correct") else r.get("error", "WRONG")
        print(f"{r['package']:10s} {r.get('seconds', float('nan')):8.2f} s  {status}")
    if "ratio_dask_gpu_over_dask_cuda" in result:
        print(f"dask-gpu / dask-cuda: {result['ratio_dask_gpu_over_dask_cuda']:.2f}")


if __name__ == "__main__":
    main()
