"""What cuDF's first division costs in compiling, and what dask-gpu does about it.

dask-cudf computes a group-by's mean as sum / count; cuDF's division checks the divisor with
``cupy.all`` and the quotient with ``cupy.any``, which CuPy runs as CUB block reductions compiled by
NVRTC, one per block size. Each measurement is a fresh process with an empty kernel cache:

- ``sequential``: six of these reductions one after another, NVRTC's precompiled headers off and on
  (``CUPY_NVRTC_USE_PCH``);
- ``background``: ``dask_gpu.warmup.compile_cudf_kernels`` (what a cluster starts beside its workers),
  with 1, 2, 5 and 10 processes;
- ``group_bys``: dask-cudf group-bys of 1000, 100, 5000 and 100000 groups (the synchronous scheduler),
  on an empty cache with the headers off and on, and on the cache the background compile filled.
  ``cub_compiles`` has the seconds of each CUB kernel they compiled, or loaded from the cache (0.01 s).

    python benchmarks/cub_compile.py [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time

TRACE = textwrap.dedent("""
    import json, time, cupy.cuda.compiler as compiler
    compiles, real = [], compiler._compile_with_cache_cuda
    def traced(source, *args, **kwargs):
        start = time.perf_counter()
        out = real(source, *args, **kwargs)
        if "BlockReduce" in source:
            compiles.append(time.perf_counter() - start)
        return out
    compiler._compile_with_cache_cuda = traced
    times = {}
""")
SEQUENTIAL = TRACE + textwrap.dedent("""
    import cupy
    for n in (200, 1000, 5000):
        for op in ("all", "any"):
            start = time.perf_counter()
            getattr(cupy, op)(cupy.zeros(n, dtype=bool))
            times[f"{op} {n}"] = time.perf_counter() - start
    print(json.dumps({"seconds": times, "cub_compiles": compiles}))
""")
GROUP_BYS = TRACE + textwrap.dedent("""
    import dask, dask.dataframe as dd, numpy as np
    dask.config.set({"dataframe.backend": "cudf", "scheduler": "sync"})
    for groups in (1000, 100, 5000, 100_000):
        df = dd.from_dict({"s": np.arange(8 * groups) % groups, "x": np.arange(8 * groups) * 0.5}, npartitions=4)
        start = time.perf_counter()
        df.groupby("s").agg({"x": ["sum", "mean"]}).compute()
        times[f"{groups} groups"] = time.perf_counter() - start
    print(json.dumps({"seconds": times, "cub_compiles": compiles}))
""")
BACKGROUND = textwrap.dedent("""
    import sys
    from dask_gpu import devices
    from dask_gpu.warmup import compile_cudf_reductions
    from dask_gpu.spec import worker_env
    selected = devices.select(devices.discover())
    compile_cudf_reductions(selected[0][1].describe(), worker_env(selected, 0), int(sys.argv[1])).join()
""")


def run(code: str, cache: str, *args: str, **env: str) -> dict:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code, *args], env={**os.environ, "CUPY_CACHE_DIR": cache, **env},
                          capture_output=True, text=True, timeout=600)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    out = json.loads(lines[-1]) if lines else {}
    if done.returncode:
        out["error"] = done.stderr[-2000:]
    return {**out, "wall": time.perf_counter() - start}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    from dask_gpu.report import machine_dict

    result = {"machine": machine_dict(), "sequential": {}, "background": {}, "group_bys": {}}
    with tempfile.TemporaryDirectory() as tmp:
        def cache(name):
            return os.path.join(tmp, name)

        for pch in ("0", "1"):
            result["sequential"][f"CUPY_NVRTC_USE_PCH={pch}"] = run(SEQUENTIAL, cache(f"seq{pch}"),
                                                                    CUPY_NVRTC_USE_PCH=pch)
        for pch in ("0", "1"):
            result["group_bys"][f"empty cache, CUPY_NVRTC_USE_PCH={pch}"] = run(GROUP_BYS, cache(f"cold{pch}"),
                                                                              CUPY_NVRTC_USE_PCH=pch)
        for processes in (1, 2, 5, 10):
            result["background"][f"{processes} processes"] = run(BACKGROUND, cache(f"bg{processes}"), str(processes))
        result["group_bys"]["after the background compile (5 processes)"] = run(GROUP_BYS, cache("bg5"))
    print(json.dumps({k: v for k, v in result.items() if k != "machine"}, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    return result


if __name__ == "__main__":
    main()
