"""The seeds' workloads on each architecture of this machine: the seed's comparison table.

Workloads (the seeds' code; NumPy chunks on the CPU, CuPy's ``RandomState`` on the GPU):
``sum`` is ``(x + 1)[::2, ::2].sum()`` on a normal random array, ``mean`` its mean variant,
``svd`` the singular values of a tall-and-skinny random matrix, and ``transpose``
``(x + x.T).sum()``, which moves chunks between workers.

Architectures: one CPU core, all CPU cores, one GPU and all GPUs (through LocalCUDACluster;
other counts with ``gpus``), and with ``compare="dask-cuda"`` the GPU columns again on
dask-cuda's cluster. GPU workers talk over UCX when there are several and distributed-ucxx is
installed (NVLink between the GPUs of a machine), else TCP. A CPU column whose workload is
larger than ``cpu_budget`` values runs a measured fraction of it (same chunks, at least one for
each core) and is scaled up, marked as an estimate. GPU columns run once on every worker to warm
up, then ``repeat`` times; the best time counts, and each GPU column's speed-up over one GPU of
its cluster is reported with its efficiency.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from importlib.util import find_spec

import dask
import dask.array as da

from dask_gpu import devices, internals  # noqa: F401  (tests replace devices.discover through this module)
from dask_gpu.benchmarks import common
from dask_gpu.benchmarks.common import (TIMEOUT, available_gpus, check_options, default_protocol, error_text,
                                        gpu_client, gpu_columns, gpu_counts, gpu_notes, run_columns, runs_table,
                                        scaling_lines, startup_lines)
from dask_gpu.benchmarks.common import scaling  # noqa: F401  (seed.scaling, as before the dataframe suite)
from dask_gpu.benchmarks.common import compute as _compute
from dask_gpu.benchmarks.common import plot as bar_chart
from dask_gpu.report import machine_dict

SIZES = {"small": (10_000, 1_000), "medium": (50_000, 5_000), "full": (500_000, 10_000)}
CPU_BUDGET = 2.5e9  # values a CPU column makes in full; past this it measures a fraction


@dataclasses.dataclass(frozen=True)
class Problem:
    """One workload at one size: its dask expression, how much of the whole it is, its check."""

    expr: object
    fraction: float
    check: object  # value -> bool


def _sum(rs, n, c, budget, mean=False):
    k = n if n * n <= budget else max(c, int(math.sqrt(budget) // c * c))  # a corner of whole chunks
    x = rs.normal(10, 1, size=(n, n), chunks=(c, c))[:k, :k]
    y = (x + 1)[::2, ::2]
    kept = math.ceil(k / 2) ** 2
    bound = 6 / math.sqrt(kept)  # six standard errors of the mean of N(11, 1) values
    if mean:
        return Problem(y.mean(), k * k / (n * n), lambda v: abs(float(v) - 11) < bound)
    return Problem(y.sum(), k * k / (n * n), lambda v: abs(float(v) / kept - 11) < bound)


def _svd(rs, n, c, budget):
    rows, cols = n, min(1_000, c)  # the seed's example is 10000 x 1000
    m = rows if rows * cols <= budget else max(c, int(budget // cols // c * c))
    x = rs.random((m, cols), chunks=(c, cols))
    _, s, _ = da.linalg.svd(x)
    expected = 0.5 * math.sqrt(m * cols)  # the mean's rank-one part dominates a uniform matrix
    return Problem(s[0], m / rows, lambda v: abs(float(v) / expected - 1) < 0.01)


def _transpose(rs, n, c, budget):
    side = min(n, 100_000)  # every chunk moves: at most 80 GB
    k = side if side * side <= budget else max(c, int(math.sqrt(budget) // c * c))
    x = rs.normal(10, 1, size=(k, k), chunks=(c, c))
    bound = 6 * math.sqrt(2) / k
    return Problem((x + x.T).sum(), (k / side) ** 2, lambda v: abs(float(v) / (k * k) - 20) < bound)


WORKLOADS = {
    "sum": ("(x + 1)[::2, ::2].sum()", _sum),
    "mean": ("(x + 1)[::2, ::2].mean()", lambda *a: _sum(*a, mean=True)),
    "svd": ("svd(x), x tall and skinny", _svd),
    "transpose": ("(x + x.T).sum()", _transpose),
}


def resolve_size(size: str = "small", shape: int | None = None, chunks: int | None = None) -> tuple[int, int]:
    if size not in SIZES:
        raise ValueError(f"--size {size!r}: the array suite has {', '.join(SIZES)}")
    n, c = SIZES[size]
    n = n if shape is None else shape
    c = min(c, n) if chunks is None else chunks  # 0 is a size given, and refused: not the default
    for value in (n, c):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"--shape and --chunks must be whole numbers >= 1, not {n!r} and {c!r}")
    if c > n:
        raise ValueError(f"chunks ({c}) cannot be larger than the array's side ({n})")
    return n, c


def architectures(compare: str | None = None, gpus: str | None = None) -> list[tuple[str, str, int]]:
    """(label, kind, count) of each column: kind is "cpu", "gpu" or "dask-cuda"."""
    cores = os.cpu_count() or 1
    columns = [("1 CPU core", "cpu", 1), (f"{cores} CPU cores", "cpu", cores)]
    return columns + gpu_columns(gpu_counts(gpus, available_gpus(("cupy",), find_spec)), compare)


@dataclasses.dataclass(frozen=True)
class Plan(common.Plan):
    shape: int
    chunks: int
    cpu_budget: float


def plan(size="small", shape=None, chunks=None, workloads=None, compare=None, protocol=None, repeat=1,
         timeout=None, cpu_budget=None, gpus=None) -> Plan:
    """Checks every argument (a ``ValueError`` that names the bad one) and settles the columns."""
    n, c = resolve_size(size, shape, chunks)
    cols, names = architectures(compare, gpus), tuple(workloads or WORKLOADS)
    protocol, timeout = protocol or default_protocol(cols), timeout or TIMEOUT
    check_options(names, WORKLOADS, compare, protocol, repeat, timeout)
    if cpu_budget is not None and not 0 < cpu_budget < math.inf:
        raise ValueError(f"--cpu-budget ({cpu_budget}) must be a positive number of values")
    cols, notes = gpu_notes(cols, compare, ("cupy",), find_spec)
    return Plan(size=size, workloads=names, columns=tuple(cols), notes=tuple(notes), protocol=protocol,
                repeat=int(repeat), timeout=timeout, shape=n, chunks=c, cpu_budget=cpu_budget or CPU_BUDGET)


def planned(options) -> Plan:
    """The bench command's options (:class:`~dask_gpu.benchmarks.common.Options`) as this suite's plan."""
    return plan(options.size, options.shape, options.chunks, options.workloads, options.compare, options.protocol,
                options.repeat, options.timeout, options.cpu_budget, options.gpus)


def run(plan: Plan, progress=None, checkpoint=None, status=None) -> dict:
    """Every workload on every architecture; ``progress(label)`` is called before each run, ``status(label)``
    as a GPU column warms up, and ``checkpoint(result)`` after each column, so that a run stopped part way
    keeps what it measured."""
    result = {"shape": plan.shape, "chunks": plan.chunks, "protocol": plan.protocol, "repeat": plan.repeat,
              "cpu_budget": plan.cpu_budget, "workloads": {w: WORKLOADS[w][0] for w in plan.workloads},
              "machine": machine_dict(), "columns": [label for label, _, _ in plan.columns], "runs": [],
              "notes": list(plan.notes)}

    def measure(context, name, count):
        return _measure(name, count, plan, context.client, status)

    return run_columns(result, list(plan.columns), list(plan.workloads),
                       lambda kind, count: _context(kind, count, plan.protocol), measure, progress, checkpoint)


class _context:
    """The scheduler a column runs on: dask's local ones, or a GPU cluster started once per column."""

    def __init__(self, kind, count, protocol):
        self.kind, self.count, self.protocol = kind, count, protocol
        self.stack = self.client = None

    def __enter__(self):
        if self.kind == "cpu":
            self.config = dask.config.set(scheduler="single-threaded" if self.count == 1 else "threads")
            return self
        from contextlib import ExitStack

        self.stack = ExitStack()
        self.client = gpu_client(self.stack, self.kind, self.count, self.protocol)
        return self

    def __exit__(self, *exc):
        if self.stack is not None:
            self.stack.close()
        else:
            self.config.__exit__(*exc)


def _measure(name, count, plan: Plan, client, status=None) -> dict:
    make, n, c, repeat, timeout = WORKLOADS[name][1], plan.shape, plan.chunks, plan.repeat, plan.timeout
    if client is None:  # a CPU column: one run
        rs, repeat = da.random.RandomState(), 1
        budget = max(plan.cpu_budget, count * c * c)  # a chunk for every core at least
    else:
        import cupy

        rs = da.random.RandomState(RandomState=cupy.random.RandomState)
        budget = math.inf
    times = []
    try:
        if client is not None:
            warm_up(client, make, rs, c, timeout, status and (lambda worker: status(f"warming up on {worker}")))
        for _ in range(repeat):
            problem = make(rs, n, c, budget)
            start = time.perf_counter()
            value = _compute(problem.expr, client, timeout)
            times.append(time.perf_counter() - start)
    except Exception as e:  # a failing workload is a result, not the end of the table
        return {"error": error_text(e)}
    seconds = min(times)
    row = {"seconds": seconds / problem.fraction, "value": float(value), "correct": bool(problem.check(value))}
    if repeat > 1:
        row["all_seconds"] = [t / problem.fraction for t in times]
    if problem.fraction < 1:
        row.update(estimated=True, measured_fraction=problem.fraction, measured_seconds=seconds)
    return row


def warm_up(client, make, rs, c, timeout=TIMEOUT, status=None) -> None:
    """``make``'s workload, two chunks a side, once on every worker: imports, kernels and generators on every GPU.
    ``status(name)`` before each worker's."""
    for address, worker in internals.scheduler_identity(client)["workers"].items():
        if status:
            status(worker.get("name", address))
        _compute(make(rs, 2 * c, c, math.inf).expr, client, timeout, workers=[address])


def table(result: dict) -> str:
    n, c = result["shape"], result["chunks"]
    head = f"n = {n} ({n * n * 8 / 1e9:.1f} GB for n x n float64), chunks {c}"
    if any("GPU" in column for column in result["columns"]):
        head += f"; GPU workers over {result.get('protocol', 'tcp')}, best of {result.get('repeat', 1)} runs"
    lines = [head, runs_table(result, ok=" ✓"), *startup_lines(result), *scaling_lines(result)]
    return "\n".join([*lines, *result["notes"]])


def plot(result: dict, path: str) -> None:
    """A bar chart of the table, log scale, one group per workload (needs matplotlib)."""
    bar_chart(result, path, f"n = {result['shape']}, chunks {result['chunks']}")
