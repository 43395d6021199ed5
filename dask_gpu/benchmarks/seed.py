"""The seed workload, ``(x + 1)[::2, ::2].sum()`` on a normal random array, on each architecture here.

Columns: one CPU core, all CPU cores, and (when there are GPUs and CuPy) all GPUs through
LocalCUDACluster, running the seed's own code. CPU columns past ``CPU_BUDGET`` values are
estimated from a measured corner of the array and marked as estimates.
"""

from __future__ import annotations

import math
import time
from importlib.util import find_spec

import dask
import dask.array as da

from dask_gpu import devices
from dask_gpu.report import machine_dict, table as text_table

SIZES = {"small": (10_000, 1_000), "medium": (50_000, 5_000), "full": (500_000, 10_000)}
CPU_BUDGET = 2.5e9  # values a CPU column generates in full; past this it measures a corner
MEAN = 11.0  # x ~ N(10, 1), so the kept values of x + 1 average 11


def workload(rs, n: int, c: int, corner: int | None = None):
    """The seed's expression; ``corner`` restricts it to the first corner x corner chunks."""
    x = rs.normal(10, 1, size=(n, n), chunks=(c, c))
    if corner is not None:
        x = x[: corner * c, : corner * c]
    return (x + 1)[::2, ::2].sum(), math.ceil(x.shape[0] / 2) * math.ceil(x.shape[1] / 2)


def resolve_size(size: str = "small", shape: int | None = None, chunks: int | None = None) -> tuple[int, int]:
    n, c = SIZES[size]
    n, c = shape or n, chunks or min(c, shape or c)
    if n <= 0 or c <= 0:
        raise ValueError(f"shape and chunks must be positive, not {n} and {c}")
    if c > n:
        raise ValueError(f"chunks ({c}) cannot be larger than the array's side ({n})")
    return n, c


def run(size="small", shape=None, chunks=None, echo=print) -> dict:
    n, c = resolve_size(size, shape, chunks)
    result = {
        "workload": "(x + 1)[::2, ::2].sum(), x = normal(10, 1)",
        "shape": [n, n],
        "chunks": [c, c],
        "machine": machine_dict(),
        "runs": [],
    }
    for label, scheduler in (("1 CPU core", "single-threaded"), ("all CPU cores", "threads")):
        echo(f"running on {label} ...")
        result["runs"].append(_cpu(label, scheduler, n, c))
    system = devices.discover()
    if system.state is devices.State.AVAILABLE and find_spec("cupy"):
        echo(f"running on {len(system.devices)} GPU(s) ...")
        result["runs"].append(_gpus(len(system.devices), n, c))
    else:
        reason = system.message if system.state is not devices.State.AVAILABLE else "CuPy is not installed."
        result["runs"].append({"architecture": "GPUs", "skipped": reason})
    return result


def _cpu(label, scheduler, n, c) -> dict:
    corner = None
    if n * n > CPU_BUDGET:  # measure a corner of k x k chunks and scale up
        corner = max(1, int(math.sqrt(CPU_BUDGET / (c * c))))
    expr, kept = workload(da.random.RandomState(), n, c, corner)
    with dask.config.set(scheduler=scheduler):
        seconds, total = _timed(expr)
    run = _row(label, seconds, total, kept)
    if corner is not None:
        run["estimated"] = True
        run["measured_fraction"] = kept / _kept(n)
        run["seconds"] = seconds * _kept(n) / kept
    return run


def _gpus(count, n, c) -> dict:
    import cupy
    from distributed import Client

    from dask_gpu import LocalCUDACluster

    with LocalCUDACluster(dashboard_address=False) as cluster, Client(cluster):
        expr, kept = workload(da.random.RandomState(RandomState=cupy.random.RandomState), n, c)
        seconds, total = _timed(expr)
    return _row(f"{count} GPU(s)", seconds, float(total), kept)


def _timed(expr):
    start = time.perf_counter()
    value = expr.compute()
    return time.perf_counter() - start, float(value)


def _kept(n: int) -> int:
    return math.ceil(n / 2) ** 2


def _row(label, seconds, total, kept) -> dict:
    mean = total / kept
    # the mean of `kept` N(11, 1) values: six standard errors is a generous, still failing, bound
    return {"architecture": label, "seconds": seconds, "mean": mean, "correct": abs(mean - MEAN) < 6 / math.sqrt(kept)}


def table(result: dict) -> str:
    n, c = result["shape"][0], result["chunks"][0]
    rows = [("architecture", "time", "mean of kept values", "answer")]
    for r in result["runs"]:
        if "skipped" in r:
            rows.append((r["architecture"], "-", "-", f"skipped: {r['skipped']}"))
            continue
        time_text = f"{r['seconds']:.2f} s" + (" (estimate)" if r.get("estimated") else "")
        rows.append((r["architecture"], time_text, f"{r['mean']:.6f}", "right" if r["correct"] else "WRONG"))
    gb = n * n * 8 / 1e9
    return f"(x + 1)[::2, ::2].sum() on a {n} x {n} array ({gb:.1f} GB), chunks {c} x {c}\n" + text_table(rows)


def main(argv=None):
    from dask_gpu.cli import bench

    bench.main(argv, standalone_mode=True)


if __name__ == "__main__":
    main()
