"""First calls on a new machine: each array expression's first call with no cluster and on a new cluster, a second
process's first call from the same kernel cache, the first dataframe read and group-by, and the steady state.

Every measurement of a first call is a fresh Python process with a kernel cache of its own
(``gpu.kernel-cache``, which dask-gpu gives CuPy as ``CUPY_CACHE_DIR``), with dask-gpu's graph pass on:

- ``local``: no cluster, dask's threaded scheduler in the process, empty cache;
- ``cluster``: a one-GPU ``LocalCUDACluster``, empty cache;
- ``warm``: a second process on ``cluster``'s cache. ``new_kernels`` counts the files it added to the
  cache: 0 when it found every kernel there.

The expressions run on 2000 x 1500 arrays in 500 x 500 chunks (NumPy's random numbers, made where the chunks
are computed, through ``map_blocks(cupy.asarray)``), and the seed workload ``(x + 1)[::2, ::2].sum()`` on a
10000 x 10000 CuPy ``RandomState`` array. The dataframe's first read and group-by come from ``first_call.py``
(dask-gpu, cuDF alone in one process, and dask-cuda where installed). ``--steady`` measures, side by side,
warm runs with CuPy's reductions as dask-gpu sets them (no CUB block reductions) and with CuPy's default
(``CUPY_ACCELERATORS=cub``): the seed's 2 TB workload, CuPy reductions and dask-cuDF operations.

    python benchmarks/cold_start.py [--only NAME ...] [--modes local,cluster,warm] [--groupby-rows 20000000]
                                    [--steady] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import first_call  # beside this script: the dataframe's first calls, and how a probe is run
from first_call import probe_json

EXPRESSIONS = {
    "bool count": "(x > 0.5).sum()",
    "int8 sum": "i8.sum()",
    "float32 sum": "x.sum(dtype='float32')",
    "slice and arithmetic": "((x + 1) * 2)[::3, 1::2].sum()",
    "int mean": "i8.mean()",
    "var, std": "da.stack([x.var(), x.std()])",
    "argmax": "x.argmax()",
    "cumsum": "x.cumsum(axis=0)[-1].sum()",
    "seed 10000 x 10000": "(seed + 1)[::2, ::2].sum()",
}

PROBE = r"""
import json, sys, time
import dask, dask.array as da, numpy as np
from distributed import Client, wait
from dask_gpu import LocalCUDACluster
from dask_gpu.kernel_cache import cupy_cache_dir


def first_calls(expression, client=None):
    import cupy
    rng = da.random.default_rng(0)
    x = rng.random((2000, 1500), chunks=500).map_blocks(cupy.asarray)
    i8 = rng.integers(-100, 100, (2000, 1500), dtype="int8", chunks=500).map_blocks(cupy.asarray)
    seed = da.random.RandomState(RandomState=cupy.random.RandomState, seed=0).normal(
        10, 0.1, size=(10000, 10000), chunks=(2500, 2500))
    x, i8 = client.persist([x, i8]) if client else dask.persist(x, i8)  # the inputs on the GPU first
    wait([x, i8]) if client else None
    times = []
    for _ in range(2):
        start = time.perf_counter()
        value = eval(expression).compute()
        times.append(time.perf_counter() - start)
    return times, value


if __name__ == "__main__":
    expression, mode = sys.argv[1], sys.argv[2]
    if mode == "local":
        (times, value), cache = first_calls(expression), cupy_cache_dir()
    else:
        with LocalCUDACluster(n_workers=1, dashboard_address=False) as cluster, Client(cluster) as client:
            times, value = first_calls(expression, client)
            (cache,) = client.run(cupy_cache_dir).values()
    value = value.get() if hasattr(value, "get") else value  # CuPy's result, to the host
    print(json.dumps({"first": times[0], "second": times[1], "value": np.asarray(value).tolist(),
                      "cache": cache}))
"""

STEADY = r"""
import json, sys, time
import dask, dask.array as da, numpy as np
from distributed import Client, wait
from dask_gpu import LocalCUDACluster


def best(f, runs):
    f()  # warm
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        f()
        times.append(time.perf_counter() - start)
    return min(times)


def reductions():
    import cupy
    return list(cupy._core._accelerator.get_reduction_accelerators())


if __name__ == "__main__":
    size, rows = int(sys.argv[1]), int(sys.argv[2])
    out = {}
    with LocalCUDACluster(n_workers=1, dashboard_address=False) as cluster, Client(cluster) as client:
        import cupy
        (out["reduction accelerators"],) = client.run(reductions).values()
        rs = da.random.RandomState(RandomState=cupy.random.RandomState)
        x = rs.normal(10, 1, size=(size, size), chunks=(10000, 10000))
        out["seed 2 TB"] = best(lambda: float((x + 1)[::2, ::2].sum().compute()), 1)
        y = client.persist(da.random.default_rng(0).random((20000, 20000), chunks=5000).map_blocks(cupy.asarray))
        wait(y)
        for name, expr in {"y.sum(axis=0)": lambda: y.sum(axis=0), "(y > 0.5).sum()": lambda: (y > 0.5).sum(),
                           "y.var()": lambda: y.var(), "y.argmax()": lambda: y.argmax(),
                           "y.mean(axis=1)": lambda: y.mean(axis=1)}.items():
            out[name] = best(lambda: expr().compute(), 3)
        try:
            import dask_cudf  # noqa: F401
        except ImportError:
            rows = 0
        if rows:
            import dask.dataframe as dd
            with dask.config.set({"dataframe.backend": "cudf"}):
                n = np.arange(rows)
                df = client.persist(dd.from_dict({"s": n % 1000, "k": n % 100_000, "x": np.sin(n)}, npartitions=4))
                right = client.persist(dd.from_dict({"k": np.arange(100_000), "w": np.cos(np.arange(100_000))},
                                                    npartitions=1))
                wait([df, right])
                out["groupby(s).agg(x: sum, mean)"] = best(
                    lambda: df.groupby("s").agg({"x": ["sum", "mean"]}).compute(), 3)
                out["merge(right, on=k).w.sum()"] = best(lambda: df.merge(right, on="k").w.sum().compute(), 3)
                out["x / (s + 1), mean"] = best(lambda: (df.x / (df.s + 1)).mean().compute(), 3)
                out["sort_values(x), persist"] = best(lambda: wait(client.persist(df.sort_values("x"))), 3)
    print(json.dumps(out))
"""


def same(a, b) -> bool:
    import numpy as np

    return bool(np.allclose(np.asarray(a, dtype=float), np.asarray(b, dtype=float), rtol=1e-6))


def files(directory: str) -> int:
    return sum(len(names) for _, _, names in os.walk(directory))


def environ(cache: str) -> dict:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # this checkout's dask_gpu, not another
    return {**os.environ, "DASK_GPU__KERNEL_CACHE": cache, "CUPY_CACHE_DIR": cache,  # workers; this process
            "PYTHONPATH": os.pathsep.join([root, *filter(None, [os.environ.get("PYTHONPATH")])])}


def run(probe: str, expression: str, mode: str, cache: str) -> dict:
    before = files(cache)
    start = time.perf_counter()
    out = probe_json([probe, expression, "local" if mode == "local" else "cluster"], environ(cache))
    out.update(process=time.perf_counter() - start, new_kernels=files(cache) - before)
    return out


def steady(tmp: str, size: int, rows: int, rounds: int = 2) -> dict:
    """Warm runs with dask-gpu's choice of CuPy's reductions and with CuPy's default, alternating."""
    probe = os.path.join(tmp, "steady.py")
    with open(probe, "w") as f:
        f.write(STEADY)
    settings = {"dask-gpu (no CUB block reductions)": {}, "CuPy's default (CUPY_ACCELERATORS=cub)":
                {"CUPY_ACCELERATORS": "cub"}}
    out = {name: [] for name in settings}
    for _ in range(rounds):
        for name, extra in settings.items():
            env = {**environ(os.path.join(tmp, "cache-steady")), **extra}
            if not extra:
                env.pop("CUPY_ACCELERATORS", None)
            out[name].append(probe_json([probe, str(size), str(rows)], env))
            print("steady", name, json.dumps(out[name][-1]), flush=True)
    best = {name: {k: min(r[k] for r in runs if k in r) for k in runs[0] if isinstance(runs[0][k], float)}
            for name, runs in out.items() if runs and "error" not in runs[0]}
    if len(best) == 2:
        ours, default = best.values()
        best["ratio (dask-gpu / CuPy's default)"] = {k: ours[k] / default[k] for k in ours if k in default}
    return {"runs": out, "best": best, "size": size, "rows": rows}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", choices=list(EXPRESSIONS), help="these expressions only")
    parser.add_argument("--modes", default="local,cluster,warm", help="of local, cluster, warm (after cluster)")
    parser.add_argument("--groupby-rows", type=int, default=20_000_000, help="0: no dataframe read and group-by")
    parser.add_argument("--steady", action="store_true", help="also the steady state, side by side")
    parser.add_argument("--steady-size", type=int, default=500_000, help="side of the seed's array (2 TB)")
    parser.add_argument("--steady-rounds", type=int, default=2, help="runs of each setting, alternating")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    from dask_gpu.report import machine_dict

    modes = args.modes.split(",")
    result = {"machine": machine_dict(), "modes": modes, "expressions": {}}
    with tempfile.TemporaryDirectory() as tmp:
        probe = os.path.join(tmp, "probe.py")
        with open(probe, "w") as f:
            f.write(PROBE)
        for i, name in enumerate(args.only or EXPRESSIONS):
            row = {}
            for mode in modes:  # warm: a second process on the cluster's cache
                cache = os.path.join(tmp, f"cache-{i}-{'cluster' if mode == 'warm' else mode}")
                row[mode] = run(probe, EXPRESSIONS[name], mode, cache)
            values = [r["value"] for r in row.values() if "value" in r]
            row["same value"] = len(values) == len(modes) and all(same(v, values[0]) for v in values)
            row["slowest first call"] = max((r.get("first", float("inf")) for r in row.values()
                                             if isinstance(r, dict)), default=None)
            result["expressions"][name] = row
            print(name, json.dumps(row), flush=True)
        if "seed 10000 x 10000" in (args.only or EXPRESSIONS):  # dask gpu warmup first, then a new cluster
            cache = os.path.join(tmp, "cache-warmup")
            start = time.perf_counter()
            warm = subprocess.run([sys.executable, "-m", "dask", "gpu", "warmup", "--kernel-cache", cache],
                                  env=environ(cache), capture_output=True, text=True, timeout=600)
            row = {"warmup": time.perf_counter() - start, "warmup_output": (warm.stdout + warm.stderr)[-3000:],
                   "kernels": files(cache)}
            row.update(run(probe, EXPRESSIONS["seed 10000 x 10000"], "warm", cache))
            result["after dask gpu warmup"] = row
            print("after dask gpu warmup", json.dumps(row), flush=True)
        if args.steady:
            result["steady"] = steady(tmp, args.steady_size, args.groupby_rows, args.steady_rounds)
    if args.groupby_rows:
        result["dataframe"] = first_call.main(["--rows", str(args.groupby_rows), "--repeat", "1"])
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    return result


if __name__ == "__main__":
    main()
