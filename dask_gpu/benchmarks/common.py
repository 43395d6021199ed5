"""What the benchmark suites share: GPU columns and the notes on missing ones, the run loop over columns,
results on a cluster with a timeout, scaling, the table's cells and the bar chart."""

from __future__ import annotations

import asyncio
import dataclasses
import difflib
import gc
import math
import os
import time
from importlib.util import find_spec
from typing import ClassVar

import dask

from dask_gpu import devices, parse
from dask_gpu.report import table as text_table

TIMEOUT = 900  # seconds a run on a cluster may take before it is cancelled and reported as failed
NO_DASK_CUDA = "dask-cuda is not installed: no comparison columns"
_NAMES = {"cupy": "CuPy", "cudf": "cuDF"}


@dataclasses.dataclass(frozen=True)
class Options:
    """The bench command's options, as given (None where not): what each suite's ``planned`` makes its plan of."""

    size: str = "small"
    workloads: tuple | None = None
    compare: str | None = None
    gpus: str | None = None
    protocol: str | None = None
    repeat: int = 1
    timeout: float | None = None
    shape: int | None = None
    chunks: int | None = None
    cpu_budget: float | None = None
    rows: int | None = None
    scale: float | None = None
    data: str | None = None
    layout: str | None = None
    engines: str | None = None


@dataclasses.dataclass(frozen=True)
class Plan:
    """A checked request: what a suite's ``run`` does, decided before anything starts. Each suite adds what it
    needs of its own (its data, its scale)."""

    size: str
    workloads: tuple
    columns: tuple
    notes: tuple
    protocol: str
    repeat: int
    timeout: float
    references: ClassVar[int] = 0  # the steps before the runs: reference answers

    @property
    def steps(self) -> int:
        return self.references + len(self.columns) * len(self.workloads)


def data_directory(path: str) -> None:
    """``path`` made where it is not there, then checked to be a directory this user can write in: a ValueError
    that names it otherwise, before a suite writes its data there."""
    if os.path.isfile(path):
        raise ValueError(f"--data {path} is a file; give a directory for the parquet data")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise ValueError(f"--data {path} cannot be made ({e.strerror}); give a directory this user can write in") \
            from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ValueError(f"--data {path} is not writable; give a directory this user can write in")


def engine_kinds(engines, known: dict) -> set | None:
    """The column kinds of ``engines`` ("pandas,dask-gpu" or a list; None: every one), from ``known`` (an
    engine's name -> its columns' kind); a ``ValueError`` naming the choices otherwise."""
    if engines is None:
        return None
    names = list(parse.name_list(engines) or ())
    if not names or any(name not in known for name in names):
        raise ValueError(f"--engines {','.join(names)}: choose from {', '.join(known)}")
    return {known[name] for name in names}


def check_options(names, known, compare, protocol, repeat, timeout) -> None:
    """The options both suites take: a ``ValueError`` that names the bad one."""
    unknown = sorted(set(names) - set(known))
    if unknown:
        close = difflib.get_close_matches(unknown[0], list(known), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"unknown workloads {unknown}; choose from {list(known)}{hint}")
    if compare not in (None, "dask-cuda"):
        raise ValueError(f"--compare takes dask-cuda, not {compare!r}")
    if protocol not in ("tcp", "ucx"):
        raise ValueError(f"--protocol takes tcp or ucx, not {protocol!r}")
    if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
        raise ValueError(f"--repeat must be at least 1, not {repeat}")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < math.inf:
        raise ValueError(f"--timeout ({timeout}) must be a positive number of seconds")


def available_gpus(libraries=("cupy",), find=find_spec) -> int:
    """GPUs that the GPU columns can use: those ``CUDA_VISIBLE_DEVICES`` shows (all where it is unset), as a
    cluster here starts a worker on each; none unless every library in ``libraries`` is installed."""
    system = devices.discover()
    ready = system.state is devices.State.AVAILABLE and all(find(name) for name in libraries)
    return _visible(system) if ready else 0


def _visible(system) -> int:
    """The devices of ``system`` that a cluster here would use (every one listed, where none is available)."""
    return len(devices.select(system)) if system.state is devices.State.AVAILABLE else len(system.devices)


def gpu_counts(spec: str | None, available: int) -> list[int]:
    """The GPU counts of the GPU columns: ``spec`` ("1,2,4,8"), or 1 and all of them."""
    if spec is None:
        return sorted({1, available}) if available else []
    counts = parse.counts(spec, "--gpus", "GPU counts")
    present = _visible(devices.discover())  # simulated ones too: a count is checked where no column can run
    if counts[0] < 1 or counts[-1] > max(present, available):
        raise ValueError(f"--gpus {spec}: each count must be 1 to the number of GPUs visible here "
                         f"({max(present, available)})")
    return counts if available else []  # no GPU columns; the table's note says why


def gpu_columns(counts, compare=None, prefix="") -> list[tuple[str, str, int]]:
    """(label, kind, count) of each GPU column: dask-gpu's, then dask-cuda's with ``compare="dask-cuda"``."""
    kinds = {"gpu": prefix, "dask-cuda": "dask-cuda, "}
    if compare != "dask-cuda":
        kinds.pop("dask-cuda")
    return [(f"{name}{g} GPU{'s' if g > 1 else ''}", kind, g) for kind, name in kinds.items() for g in counts]


def gpu_notes(columns, compare=None, libraries=("cupy",), find=find_spec):
    """The columns that can run here, and notes on those that cannot."""
    notes = []
    if not any(kind == "gpu" for _, kind, _ in columns):
        notes.append("no GPU columns: " + why_no_gpus(libraries, find))
    if compare == "dask-cuda" and find("dask_cuda") is None:
        columns = [col for col in columns if col[1] != "dask-cuda"]
        notes.append(NO_DASK_CUDA)
    return columns, notes


def why_no_gpus(libraries=("cupy",), find=find_spec) -> str:
    system = devices.discover()
    if system.state is not devices.State.AVAILABLE:
        return system.message
    missing = [_NAMES.get(name, name) for name in libraries if find(name) is None]
    return f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not installed."


def default_protocol(columns) -> str:
    """UCX for a cluster of several GPU workers where distributed-ucxx is installed: GPU to GPU over NVLink, not
    sockets. TCP otherwise: between a client, a scheduler and one worker, it answers sooner."""
    several = any(kind in ("gpu", "dask-cuda") and count > 1 for _, kind, count in columns)
    return "ucx" if several and find_spec("distributed_ucxx") else "tcp"


def gpu_client(stack, kind: str, count: int, protocol: str):
    """A client of a GPU cluster of ``count`` workers, dask-gpu's or dask-cuda's, closed with ``stack``."""
    from distributed import Client

    if kind == "dask-cuda":
        from dask_cuda import LocalCUDACluster

        stack.enter_context(dask.config.set({"gpu.array-optimize": False}))  # dask-cuda as it is
    else:
        from dask_gpu import LocalCUDACluster
    cluster = LocalCUDACluster(n_workers=count, protocol=protocol, dashboard_address=":0")
    return stack.enter_context(Client(stack.enter_context(cluster)))


def run_columns(result, columns, names, open_column, measure, progress=None, checkpoint=None, runs=None) -> dict:
    """Every workload of ``names`` in each column, on what ``open_column(kind, count)`` opens once per column;
    ``measure(context, name, count)`` gives a run's fields. ``runs(kind, name)``, where given, says which
    workloads a column of that kind runs (the others are left out of it). ``progress(label)`` is called before
    each run and ``checkpoint(result)`` after each column, so that a run stopped part way keeps what it
    measured."""
    kinds = {label: (kind, count) for label, kind, count in columns}
    for label, kind, count in columns:
        done, mine = [], [name for name in names if runs is None or runs(kind, name)]
        if not mine:
            continue
        try:
            began = time.perf_counter()
            with open_column(kind, count) as context:
                result.setdefault("startup", {})[label] = {"seconds": time.perf_counter() - began,
                                                           **worker_startup(context)}
                for name in mine:
                    if progress:
                        progress(f"{name} on {label}")
                    done.append({"workload": name, "architecture": label, **measure(context, name, count)})
        except Exception as e:  # a cluster that fails to start or stop is a result too
            error = {"architecture": label, "error": error_text(e)}
            done += [{"workload": name, **error} for name in mine[len(done):]]
        result["runs"] += done
        result["scaling"] = scaling(result["runs"], kinds)
        if checkpoint:
            checkpoint(result)
    return result


def timed(run, repeat: int, status=None, prepare=gc.collect) -> tuple:
    """A warm-up call of ``run()``, then ``repeat`` timed ones: the last call's value and every call's seconds.
    ``prepare()`` goes before each call, untimed, once the previous call's value is let go; ``status(text)``
    before each says which call it is."""
    value, times = None, []
    for i in range(1 + repeat):
        if status:
            status("warm-up run" if i == 0 else f"timed run {i} of {repeat}")
        value = None
        prepare()
        start = time.perf_counter()
        value = run()
        times.append(time.perf_counter() - start)
    return value, times


def timing(times: list) -> dict:
    """A row's times from :func:`timed`'s: the warm-up's, the best timed one's, and every timed one's where
    there were several."""
    row = {"first_seconds": times[0], "seconds": min(times[1:])}
    if len(times) > 2:
        row["all_seconds"] = times[1:]
    return row


def error_text(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"[:500]


def compute(expr, client, timeout, persist=False, **kwargs):
    """The value of ``expr`` (with ``persist``, ``expr`` held in the cluster's memory); on a cluster,
    cancelled with an error after ``timeout`` seconds."""
    if client is None:
        return expr.persist() if persist else expr.compute()
    from distributed import futures_of, wait

    done = client.persist(expr, **kwargs) if persist else client.compute(expr, **kwargs)
    futures = futures_of(done)
    try:
        wait(futures, timeout=timeout)
    except TimeoutError:
        client.cancel(futures)
        raise TimeoutError(f"no result after {timeout} s") from None
    if persist:
        for future in futures:
            if future.status == "error":
                future.result()  # raises the task's error
        return done
    try:
        return client.gather(done)
    finally:  # released now, not when the collector frees a cycle that holds them: a run again computes anew,
        for future in futures:  # where it would find the answer of this one still held
            future.release()
        settle(client)


def sent(client) -> dict:
    """What the workers of ``client`` have sent so far, in bytes: task data that a worker fetched from another
    (``task_bytes``), and P2P shuffles' pieces, which the device shuffle sends only to other workers
    (``shuffle_bytes``)."""

    def totals(dask_worker):
        pieces = sum(value for key, value in dask_worker.digests_total.items() if isinstance(key, tuple)
                     and key[:1] == ("p2p",) and key[-3:] == ("background-comms", "process", "bytes"))
        return dask_worker.transfer_outgoing_bytes_total, pieces

    found = list(client.run(totals).values())
    return {"task_bytes": sum(t for t, _ in found), "shuffle_bytes": sum(p for _, p in found)}


def shuffle_seconds(stream: list) -> float:
    """From the first of a task stream's shuffle transfers (the tasks that send a P2P shuffle's input) starting to
    the last one's end: the seconds its pieces took to move (0.0 without a shuffle)."""
    from dask.utils import key_split

    spans = [(s["start"], s["stop"]) for task in stream if key_split(task["key"]) == "shuffle-transfer"
             for s in task["startstops"] if s["action"] == "compute"]
    return max(stop for _, stop in spans) - min(start for start, _ in spans) if spans else 0.0


def spread(stream: list) -> dict:
    """How a task stream's work was spread: the workers that computed, the seconds they computed in all, and from
    the first task's start to the last one's end; busy / (span * workers) is the share of the workers' time spent
    computing."""
    spans = [(task["worker"], s["start"], s["stop"]) for task in stream for s in task["startstops"]
             if s["action"] == "compute"]
    if not spans:
        return {"workers": 0, "busy_seconds": 0.0, "span_seconds": 0.0}
    return {"workers": len({worker for worker, _, _ in spans}),
            "busy_seconds": sum(stop - start for _, start, stop in spans),
            "span_seconds": max(stop for _, _, stop in spans) - min(start for _, start, _ in spans)}


def settle(client) -> None:
    """The client's loop has taken in the releases of futures let go so far (a future releases its key through the
    loop): the next call of the same keys computes them, where it would find them still held."""
    if client is not None:
        client.sync(asyncio.sleep, 0)


def scaling(runs: list[dict], columns: dict) -> list[dict]:
    """Each GPU column's speed-up over the 1-GPU column of its cluster, and its efficiency (speed-up / GPUs)."""
    one = {(r["workload"], columns[r["architecture"]][0]): r for r in runs
           if columns[r["architecture"]][1:] == (1,) and "seconds" in r}
    rows = []
    for r in runs:
        kind, count = columns[r["architecture"]]
        base = one.get((r["workload"], kind))
        if kind not in ("cpu", "cudf") and count > 1 and base and "seconds" in r:
            speedup = base["seconds"] / r["seconds"]
            rows.append({"workload": r["workload"], "architecture": r["architecture"], "gpus": count,
                         "speedup": speedup, "efficiency": speedup / count})
    return rows


def worker_startup(context) -> dict:
    """What a column's GPU workers did as they started, beside one another: the seconds the slowest took to get
    ready (dask.array, CuPy and the CUDA context, and cuDF where its partitions are asked for); a column in a
    process of its own says so itself (``startup``)."""
    if isinstance(getattr(context, "startup", None), dict):
        return context.startup
    client = getattr(context, "client", None)
    if client is None:
        return {}
    warmed = [s for s in client.run(_warmed).values() if s is not None]
    return {"worker_ready_seconds": max(warmed)} if warmed else {}


async def _warmed(dask_worker):
    """What getting ready took the worker, once it is done (it runs beside the worker's registration)."""
    plugin = dask_worker.plugins.get("dask-gpu")
    warming = getattr(plugin, "warming", None)
    if warming is not None:
        await asyncio.get_running_loop().run_in_executor(None, warming.join, 60)
    return getattr(plugin, "warmed_seconds", None)


def startup_lines(result: dict) -> list[str]:
    """Each column's start-up: from asking for it to its first workload, and how long its workers took to get ready."""
    parts = []
    for label, s in result.get("startup", {}).items():
        warm = f", each worker ready in {s['worker_ready_seconds']:.2f} s" if "worker_ready_seconds" in s else ""
        parts.append(f"{label} {s['seconds']:.2f} s{warm}")
    return ["start-up: " + "; ".join(parts)] if parts else []


def scaling_lines(result: dict) -> list[str]:
    return [f"{r['workload']} on {r['architecture']}: {r['speedup']:.2f} x one GPU ({r['efficiency']:.0%} efficiency)"
            for r in result.get("scaling", [])]


def duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.2f} s"
    return f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def cell(run: dict, ok: str = " ✓") -> str:
    """A run in the table: its time, "(est.)" where scaled up, then ``ok`` or " WRONG"."""
    if "error" in run:
        return "failed"
    return duration(run["seconds"]) + (" (est.)" if run.get("estimated") else "") + (ok if run["correct"] else " WRONG")


def runs_table(result: dict, ok: str = " ✓") -> str:
    """One row per workload, one column per architecture."""
    cells = {(r["workload"], r["architecture"]): cell(r, ok) for r in result["runs"]}
    rows = [("workload", *result["columns"])]
    for name, text in result["workloads"].items():
        rows.append((f"{name}: {text}", *(cells.get((name, col), "-") for col in result["columns"])))
    return text_table(rows)


def plot(result: dict, path: str, title: str) -> None:
    """A bar chart of the table, log scale, one group per workload (needs matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names, columns = list(result["workloads"]), result["columns"]
    seconds = {(r["workload"], r["architecture"]): r.get("seconds") for r in result["runs"]}
    width = 0.8 / max(1, len(columns))
    fig, ax = plt.subplots(figsize=(min(2 + 1.8 * len(names), 18), 4))  # 22 TPC-H queries fit a page
    for i, col in enumerate(columns):
        xs = [j + i * width for j in range(len(names))]
        ax.bar(xs, [seconds.get((name, col)) or 0 for name in names], width, label=col)
    ax.set_xticks([j + width * (len(columns) - 1) / 2 for j in range(len(names))], names)
    ax.set_yscale("log")
    ax.set_ylabel("seconds (log scale)")
    ax.set_title(title)
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
