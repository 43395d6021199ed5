"""What a GPU worker does for cuDF dataframes as it starts, so that its first query costs what its second does.

The first dataframe task of a fresh worker paid for importing cuDF and dask-cudf, for the CUDA context and the
allocator, and for each of cuDF's operations the first time it runs: a query's first run took 10 s where its
second took 0.5 s. A worker that will hold cuDF partitions now does all of that in a thread beside its
registration with the scheduler: it imports dask-cudf, writes and reads a small parquet file in its directory and
groups it, all before its first task, then filters, joins and sorts it, giving way to the worker's tasks.
Workers that started before the ``gpu`` backend was set warm when a client first uses the backend
(:func:`warm_workers`), each in a thread of its own.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import time
import weakref

logger = logging.getLogger("dask_gpu")
BACKENDS = ("gpu", "cudf")  # dask's dataframe backends whose partitions are cuDF frames
WARMING = "dask-gpu-warm-cudf"  # the name of a thread that warms cuDF


def wanted(simulated: bool) -> bool:
    """Whether a GPU worker started now should warm cuDF: a real device, dask-cudf installed, and cuDF's
    partitions asked for by the ``dataframe.backend`` of the process that starts it."""
    import dask

    return not simulated and dask.config.get("dataframe.backend", None) in BACKENDS and _dask_cudf_installed()


def _dask_cudf_installed() -> bool:
    return importlib.util.find_spec("dask_cudf") is not None


GIVE_WAY = 30.0  # seconds a warm-up waits, in all, for a worker's tasks: after that, the rest is left undone


def warm(directory: str, busy=None, ready=None) -> float:
    """Import dask-cudf and make cuDF's first calls on a few rows in ``directory``: first the reader and group-bys
    (:func:`_first_calls`), then ``ready()``, then filters, joins and sorts (:func:`_later_calls`), giving way between
    operations while ``busy()`` says the worker runs tasks, and stopping once it has waited :data:`GIVE_WAY` seconds.
    A worker takes no task before ``ready()``: a query's first group-by, run beside the warm-up's own, took 2.2 × its
    second. Returns the seconds."""
    start, waited = time.perf_counter(), 0.0
    later = _later_calls(_first_calls(directory))
    if ready is not None:
        ready()
    for _ in later:
        waited += _give_way(busy, GIVE_WAY - waited)
        if waited >= GIVE_WAY:
            logger.info("cuDF's warm-up left undone: its worker has run tasks for %.0f s", waited)
            break
    seconds = time.perf_counter() - start
    logger.info("cuDF warmed in %.2f s", seconds)
    return seconds


def import_cudf() -> None:
    """Import cuDF and dask-cudf."""
    import cudf  # noqa: F401
    import dask_cudf  # noqa: F401  registers cuDF with dask's dispatches, which every task looks up


def _give_way(busy, limit: float) -> float:
    """Wait while ``busy()``, for ``limit`` seconds at most; returns the seconds waited."""
    start = time.perf_counter()
    while busy is not None and busy() and time.perf_counter() - start < limit:
        time.sleep(0.01)
    return time.perf_counter() - start


def _first_calls(directory: str):
    """The calls a query makes first, on a few rows: the imports, the parquet reader, and group-bys on the usual
    key types with the division of a mean's sum by its count. Returns the frame read."""
    import_cudf()
    import cudf

    frame = _read_back(directory, cudf)
    for key in ("k32", "k", "s"):
        sums, counts = frame.groupby(key).x.sum(), frame.groupby(key).x.count()
        (sums / counts).to_pandas(), (sums / counts.astype("int64")).to_pandas()
        frame.groupby(key).agg({"x": ["sum", "mean", "count", "min", "max"]}).to_pandas()
    return frame


def _later_calls(frame):
    """cuDF's other usual first calls on ``frame``, with a pause after each: filters, new columns, joins, sorts."""
    import numpy as np

    kept = frame[(frame.x > -0.5) & frame.s.str.contains("b") | (frame.t.dt.year > 1970) | frame.k.isin([1, 2])
                 | frame.s.str.startswith("a") | (frame.t <= np.datetime64("1970-01-01T00:10", "us"))]
    kept = kept.assign(y=kept.x / (kept.k + 1),  # cuDF checks a divisor with CuPy's kernels, of its dtype:
                       ratio=kept.x / (kept.x + 2.0),  # integers, then floats
                       z=kept.x.where(kept.s == "bb", 0.0), head=kept.s.str.slice(0, 1))
    yield
    groups = kept.groupby(["k", "s"]).agg({"x": ["sum", "mean", "count", "min"], "y": "max", "t": "max"})
    groups.columns = ["sum", "mean", "count", "min", "max", "last"]
    joined = kept.merge(groups.reset_index(), on=["k", "s"], how="left").merge(groups.reset_index(), on="k")
    yield
    joined.sort_values(["sum_x", "x"]).head(10).to_pandas()
    kept.groupby("t").k.nunique().to_pandas()
    kept[["k", "head"]].drop_duplicates().to_pandas()
    float(kept.x.sum()), float(kept.z.max()), kept.t.min()
    yield


def _read_back(directory: str, cudf):
    """A few rows written as parquet in ``directory`` and read back as a read task reads: row groups of several
    files in one call (cuDF plans them as a pyarrow dataset)."""
    import numpy as np

    from dask_gpu.dataframe import parquet  # its read expression imports dask's dataframe expressions

    rows = np.arange(4096)
    frame = cudf.DataFrame({"k": rows % 7, "k32": (rows % 5).astype("int32"), "x": np.linspace(-1, 1, len(rows)),
                            "s": np.array(["a", "bb", "ccc", "dddd"])[rows % 4],
                            "t": rows.astype("datetime64[s]").astype("datetime64[us]")})
    path = os.path.join(directory, "dask-gpu-warm.parquet")
    try:
        frame.to_parquet(path)
        return parquet.read_pieces(((path, (0,)), (path, (0,))), list(frame.columns), "cudf")
    finally:
        if os.path.exists(path):
            os.remove(path)


def warm_worker(dask_worker, ready=None) -> float:
    """:func:`warm` in ``dask_worker``'s directory, giving way to its tasks; a failure is a warning and 0 seconds:
    the worker starts all the same, and its first dataframe task meets the error again, where the user looks."""
    try:
        return warm(dask_worker.local_directory, busy=lambda: dask_worker.state.executing_count > 0, ready=ready)
    except Exception as e:  # noqa: BLE001
        logger.warning("worker %s did not warm cuDF: %s", dask_worker.name, e)
        return 0.0


def client_warm_up(dask_cudf):
    """What the first dataframe calls of a client pay otherwise, for a cluster to run in this process while its
    workers start: the ``gpu`` backend's dask-cudf imported (by calling ``dask_cudf``), the CUDA context made, and
    the usual operations planned once (:func:`plan_usual`)."""

    def run():
        dask_cudf()
        import cudf

        start = time.perf_counter()
        for collection in plan_usual(cudf.DataFrame):
            collection.optimize()
        logger.debug("the client's cuDF warmed in %.2f s", time.perf_counter() - start)

    return run


def plan_usual(frame_type) -> list:
    """Small collections of ``frame_type``'s frames (cuDF's, or pandas') with the operations a query usually
    plans: filters on numbers, strings and dates, new columns, joins on one and two keys, inner and left, group-bys
    of one to three keys, distinct rows, reductions, sorts and a comparison with a reduction. Optimizing them runs,
    once, what a query's first plan pays for each of these in a new process: on cuDF, the first calls of an
    operation on the empty frames of dask's metas cost a few times its later ones, and a query's plan makes
    hundreds of them."""
    import dask.dataframe as dd
    import numpy as np
    import pandas as pd

    rows = np.arange(64)
    day = pd.Timestamp("1970-01-01")
    left = dd.from_pandas(frame_type({
        "k": rows % 8, "j": rows % 3, "x": np.linspace(0.0, 1.0, len(rows)),
        "s": np.array(["ab", "cd", "ef", "gh"])[rows % 4],
        "d": (rows * 86_400).astype("datetime64[s]").astype("datetime64[us]")}), npartitions=2)
    right = dd.from_pandas(frame_type({"k": rows[:8], "j2": rows[:8] % 3, "t": np.array(["a", "c"])[rows[:8] % 2],
                                       "y": np.ones(8)}), npartitions=1)
    kept = left[(left.d >= day) & (left.d < day + pd.Timedelta(days=30)) & (left.x > 0.1) & (left.k != 3)
                | left.s.str.startswith("a") | left.s.str.contains("e") | left.k.isin([1, 2])
                | left.s.str.endswith("h") & ~left.s.str.contains("c.*d", regex=True)]
    kept = kept.assign(r=kept.x * (1 - kept.x), year=kept.d.dt.year, head=kept.s.str.slice(0, 1),
                       share=kept.x / (kept.k + 1.0),  # cuDF's first division imports CuPy's special functions
                       w=kept.x.where(kept.s.str.startswith("a"), 0.0), flag=kept.s.isin(["ab"]).astype("int64"),
                       small=(kept.k % 5).astype("int32"))
    joined = kept.merge(right, on="k").merge(right.rename(columns={"k": "k2"}), left_on="j", right_on="k2",
                                             how="left")
    pairs = kept.merge(right[right.t == "a"], left_on=["k", "j"], right_on=["k", "j2"])
    groups = joined.groupby(["s", "year"]).agg({"r": "sum", "x": "mean", "k": "count", "y_x": "max"})
    totals = kept.groupby(["k", "s", "d"]).r.sum().to_frame("total").reset_index()
    averages = kept.groupby("k").x.mean().to_frame("average").reset_index().merge(kept, on="k")
    unmatched = kept.merge(right[right.t == "c"], on="k", how="left")
    return [groups.reset_index().sort_values(["r", "s"], ascending=[False, True]).head(10, compute=False),
            joined.groupby("t_x").k.nunique().reset_index(), pairs.groupby("k").x.min().reset_index(),
            kept[["k"]].drop_duplicates(), totals[totals.total == totals.total.max()].sort_values("k"),
            unmatched[unmatched.y.isna()].groupby("small").k.count().to_frame("n").reset_index(),
            averages[averages.x < 0.5 * averages.average].x.sum(),
            (kept.x * kept.r).sum() / kept.x.sum(), kept.x.mean(), kept.k.sum(), kept.x.max(), kept.k.min(),
            kept.k.count(), kept.d.max(), (kept.w + kept.flag).sum()]


_asked = weakref.WeakSet()  # the clients whose workers were asked to warm


def warm_workers() -> None:
    """Have the GPU workers of this process's client warm cuDF where they did not as they started (the backend was
    set after the cluster started): asked once for each client, answered at once (one round trip). Nothing inside a
    task, without a client, or with an asynchronous one; a failure is left to the call that follows to report."""
    from distributed import default_client, get_worker

    try:
        get_worker()
        return  # a task's own call
    except ValueError:
        pass
    try:
        client = default_client()
    except ValueError:
        return
    if client.asynchronous or client in _asked:
        return
    _asked.add(client)
    try:
        client.run(warm_if_cold)
    except Exception as e:  # noqa: BLE001
        logger.debug("the workers were not asked to warm cuDF: %s", e)


def warm_if_cold(dask_worker) -> bool:
    """On a GPU worker that did not warm cuDF as it started (its plugin says so), with a real device and dask-cudf:
    its plugin's warm-up of cuDF, this call returning once cuDF's first calls are made (``warm_cudf_now``); True.
    False elsewhere."""
    plugin = next((p for p in dask_worker.plugins.values() if hasattr(p, "warm_cudf")), None)
    if plugin is None or plugin.warm_cudf or plugin.device.get("simulated") or not _dask_cudf_installed():
        return False
    plugin.warm_cudf_now(dask_worker)
    return True
