"""The first dataframe computation on a new cluster: dask-gpu against cuDF alone and dask-cuda, each in a fresh process.

Each run starts a one-GPU cluster in a new process with an empty CuPy kernel cache (``CUPY_CACHE_DIR``)
(``cluster``: until its worker is up), reads a parquet dataset onto the GPU (``read``: the cluster's first
task), then times the first ``groupby(s).agg({"x": ["sum", "mean"]})`` and the second; ``total`` is the
first three, from the cluster's start to the first answer. ``cudf`` is cuDF alone in one process: its
import, its read of the same files, and the same group-by. Where cuDF is imported (in the worker's start
or its first task) differs between packages: ``total`` counts it wherever it is. Packages alternate, so that
the machine's noise falls on both; the JSON has every run and the machine.

    python benchmarks/first_call.py [--rows 20000000] [--repeat 3] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from importlib.util import find_spec

PROBE = r"""
import json, sys, time
package, data = sys.argv[1], sys.argv[2]


def group_bys(out, group_by):  # the first and the second group-by, timed, and the number of groups
    for name in ("first", "second"):
        start = time.perf_counter()
        result = group_by()
        out[name] = time.perf_counter() - start
    out["groups"] = len(result)


def cudf_alone(out):
    start = time.perf_counter()
    import cudf
    out["import"] = time.perf_counter() - start
    start = time.perf_counter()
    df = cudf.read_parquet(data)
    len(df)
    out["read"] = time.perf_counter() - start
    group_bys(out, lambda: df.groupby("s").agg({"x": ["sum", "mean"]}).to_pandas())
    out["total"] = out["import"] + out["read"] + out["first"]


def on_a_cluster(out):
    import dask, dask.dataframe as dd
    from distributed import Client, wait
    if package == "dask-gpu":
        from dask_gpu import LocalCUDACluster
    else:
        from dask_cuda import LocalCUDACluster
    start = time.perf_counter()
    with dask.config.set({"dataframe.backend": "cudf"}), \
            LocalCUDACluster(n_workers=1, dashboard_address=False) as cluster, Client(cluster) as client:
        out["cluster"] = time.perf_counter() - start
        start = time.perf_counter()
        df = dd.read_parquet(data).persist()
        wait(df)
        out["read"] = time.perf_counter() - start
        group_bys(out, lambda: df.groupby("s").agg({"x": ["sum", "mean"]}).compute())
        out["total"] = out["cluster"] + out["read"] + out["first"]


if __name__ == "__main__":
    out = {"package": package}
    cudf_alone(out) if package == "cudf" else on_a_cluster(out)
    print(json.dumps(out))
"""


def probe_json(args: list, env: dict) -> dict:
    """The JSON line a probe prints last, in a new process; its error output where it printed none."""
    done = subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=600)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if lines else {"error": done.stderr[-2000:]}


def generate(path: str, rows: int) -> None:
    import cupy
    import cudf

    os.makedirs(path, exist_ok=True)
    rng = cupy.random.default_rng(7)
    for i in range(4):
        n = rows // 4
        cudf.DataFrame({"s": rng.integers(0, 1000, n, dtype="int32"), "x": rng.standard_normal(n)}).to_parquet(
            os.path.join(path, f"part-{i}.parquet"))


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    from dask_gpu.report import machine_dict

    packages = ["dask-gpu", "cudf"] + (["dask-cuda"] if find_spec("dask_cuda") else [])
    result = {"rows": args.rows, "machine": machine_dict(), "runs": []}
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "data")
        generate(data, args.rows)
        probe = os.path.join(tmp, "probe.py")
        with open(probe, "w") as f:
            f.write(PROBE)
        for i in range(args.repeat):
            for package in packages:
                env = {**os.environ, "CUPY_CACHE_DIR": os.path.join(tmp, f"cupy-cache-{package}-{i}")}
                run = {"package": package, **probe_json([probe, package, data], env)}
                result["runs"].append(run)
                print(json.dumps(run), flush=True)
    result["median"] = {
        package: {key: statistics.median(r[key] for r in result["runs"] if r["package"] == package and key in r)
                  for key in ("import", "cluster", "read", "first", "second", "total")
                  if any(key in r for r in result["runs"] if r["package"] == package)}
        for package in packages if any("first" in r for r in result["runs"] if r["package"] == package)
    }
    print(json.dumps(result["median"], indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    return result


if __name__ == "__main__":
    main()
