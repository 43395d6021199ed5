"""First calls on a new machine: each array expression's first call with dask-gpu's graph pass on and off,
a second process's first call from the same kernel cache, and the first dataframe groupby against dask-cuda.

Every measurement is a fresh Python process with a one-GPU ``LocalCUDACluster`` and a kernel cache of its
own (``gpu.kernel-cache``, which dask-gpu's workers give CuPy as ``CUPY_CACHE_DIR``):

- ``on``: the pass on, empty cache; ``off``: the pass off (``gpu.array-optimize: false``), empty cache;
- ``warm``: the pass on, a second process on ``on``'s cache. ``new_kernels`` counts the files it added
  to the cache: 0 when it found every kernel there;
- ``after dask gpu warmup``: the seed workload on a cache that only ``dask gpu warmup`` filled.

The expressions run on 2000 x 1500 arrays in 500 x 500 chunks (NumPy's random numbers, made on the
workers, through ``map_blocks(cupy.asarray)``), and the seed workload ``(x + 1)[::2, ::2].sum()`` on a
10000 x 10000 CuPy ``RandomState`` array. The groupby comes from ``first_call.py`` (dask-gpu against
dask-cuda, alternating).

    python benchmarks/cold_start.py [--only NAME ...] [--groupby-rows 20000000] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

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


if __name__ == "__main__":
    expression, optimize = sys.argv[1], sys.argv[2] == "on"
    with dask.config.set({"gpu.array-optimize": optimize}):
        with LocalCUDACluster(n_workers=1, dashboard_address=False) as cluster, Client(cluster) as client:
            import cupy
            rng = da.random.default_rng(0)
            x = rng.random((2000, 1500), chunks=500).map_blocks(cupy.asarray)
            i8 = rng.integers(-100, 100, (2000, 1500), dtype="int8", chunks=500).map_blocks(cupy.asarray)
            seed = da.random.RandomState(RandomState=cupy.random.RandomState, seed=0).normal(
                10, 0.1, size=(10000, 10000), chunks=(2500, 2500))
            x, i8 = client.persist([x, i8])  # the inputs on the GPU: the clock is for the expression alone
            wait([x, i8])
            (cache,) = client.run(cupy_cache_dir).values()
            times = []
            for _ in range(2):
                start = time.perf_counter()
                value = eval(expression).compute()
                times.append(time.perf_counter() - start)
    value = value.get() if hasattr(value, "get") else value  # CuPy's result, to the host
    print(json.dumps({"first": times[0], "second": times[1], "value": np.asarray(value).tolist(),
                      "cache": cache}))
"""


def same(a, b) -> bool:
    import numpy as np

    return bool(np.allclose(np.asarray(a, dtype=float), np.asarray(b, dtype=float), rtol=1e-6))


def files(directory: str) -> int:
    return sum(len(names) for _, _, names in os.walk(directory))


def environ(cache: str) -> dict:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # this checkout's dask_gpu, not another
    return {**os.environ, "DASK_GPU__KERNEL_CACHE": cache,
            "PYTHONPATH": os.pathsep.join([root, *filter(None, [os.environ.get("PYTHONPATH")])])}


def run(probe: str, expression: str, mode: str, cache: str) -> dict:
    env = environ(cache)
    before = files(cache)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, probe, expression, "off" if mode == "off" else "on"], env=env,
                          capture_output=True, text=True, timeout=600)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    out = json.loads(lines[-1]) if lines else {"error": done.stderr[-2000:]}
    out.update(process=time.perf_counter() - start, new_kernels=files(cache) - before)
    return out


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", choices=list(EXPRESSIONS), help="these expressions only")
    parser.add_argument("--groupby-rows", type=int, default=20_000_000, help="0: no dataframe groupby")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    from dask_gpu.report import machine_dict

    result = {"machine": machine_dict(), "expressions": {}}
    with tempfile.TemporaryDirectory() as tmp:
        probe = os.path.join(tmp, "probe.py")
        with open(probe, "w") as f:
            f.write(PROBE)
        for i, name in enumerate(args.only or EXPRESSIONS):
            caches = {mode: os.path.join(tmp, f"cache-{i}-{mode}") for mode in ("on", "off")}
            row = {}
            for mode, cache in [("off", caches["off"]), ("on", caches["on"]), ("warm", caches["on"])]:
                row[mode] = run(probe, EXPRESSIONS[name], mode, cache)
            if all("first" in r for r in row.values()):
                row["on - off"] = row["on"]["first"] - row["off"]["first"]
                row["same value"] = same(row["on"]["value"], row["off"]["value"])
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
    if args.groupby_rows:
        here = os.path.dirname(os.path.abspath(__file__))
        sys.path.insert(0, here)
        import first_call

        result["groupby"] = first_call.main(["--rows", str(args.groupby_rows), "--repeat", "1"])
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    return result


if __name__ == "__main__":
    main()
