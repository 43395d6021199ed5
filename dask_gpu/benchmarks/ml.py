"""The ml suite of ``dask gpu bench``: hyper-parameter searches, and models trained once on many rows.

**Searches.** One grid search, run by scikit-learn on every core (its ``GridSearchCV`` with ``n_jobs=-1``:
joblib's processes, one fit each) and by Dask-ML on dask-gpu's GPU workers (each fit on a GPU, scikit-learn
computing on CuPy arrays through its Array API dispatch: :mod:`dask_gpu.ml`). One GPU also runs 4 fits at
once (``fits_per_gpu``), which overlaps one fit's host-side steps with another's kernels. Every column
searches the same grid with the same 4 folds (``KFold``, unshuffled) on the same data, drawn here from a
fixed seed: ``rows`` samples of a rank-``features/4`` signal plus noise, a regression target and 4 classes.
None refits. The scikit-learn column's mean test scores are the reference that each GPU column's must match
(to 1e-3 of their value: the GPU sums in another order, and the logistic regression's solver stops where its
tolerance says).

**Models.** KMeans (8 clusters) and LinearRegression on 16 float32 features, trained on all the rows: by
scikit-learn on every core, by cuML on one GPU in this process, and by cuML's Dask estimators
(``cuml.dask``) across the GPU workers, where the rows are made, chunk by chunk from seeds of their own,
on the workers that hold them. Where cuML is not installed on the GPU workers (simulated GPUs), Dask-ML's
KMeans and LinearRegression train on NumPy chunks instead, and the table says so. Each model is scored on
the first rows (KMeans' inertia, LinearRegression's R²), which must be within 1% of scikit-learn's.
"""

from __future__ import annotations

import dataclasses
import gc
import os
from contextlib import ExitStack, contextmanager
from importlib.metadata import PackageNotFoundError, version
from importlib.util import find_spec
from typing import Callable

import numpy as np

from dask_gpu.benchmarks.common import (TIMEOUT, available_gpus, check_options, default_protocol, error_text,
                                        gpu_client, gpu_columns, gpu_counts, gpu_notes, run_columns, runs_table,
                                        scaling_lines, startup_lines, timed, timing)
from dask_gpu.benchmarks import common, models
from dask_gpu.benchmarks.models import MODELS, SEED
from dask_gpu.benchmarks.common import plot as bar_chart
from dask_gpu.report import machine_dict
from dask_gpu.report import table as text_table

SIZES = {"small": 2_000, "full": 100_000}  # rows of a search
FOLDS = 4
CLASSES = 4
RTOL = 1e-3
AT_ONCE = 4  # fits at once on one GPU in the shared column: host-side steps of one overlap another's kernels
LIBRARIES = ("scikit-learn", "dask-ml", "scipy", "numpy", "cupy-cuda13x", "cupy-cuda12x", "cuml-cu13", "cuml-cu12",
             "raft-dask-cu13", "raft-dask-cu12")


@dataclasses.dataclass(frozen=True)
class Workload:
    text: str  # what it searches, for the table
    features: dict  # size -> columns of X
    search: Callable  # features -> (estimator, grid of 8 candidates)
    target: str | None  # "y" (regression), "classes", or None (unsupervised)


def _pca(d):
    from sklearn.decomposition import PCA

    return PCA(svd_solver="covariance_eigh"), {"n_components": [max(1, d * k // 16) for k in range(1, 9)]}


def _ridge(d):
    from sklearn.linear_model import Ridge

    return Ridge(solver="svd"), {"alpha": list(np.logspace(-3, 4, 8))}


def _logistic(d):
    from sklearn.linear_model import LogisticRegression

    return LogisticRegression(max_iter=500), {"C": list(np.logspace(-4, 3, 8))}


WORKLOADS = {
    "pca": Workload("PCA(svd_solver='covariance_eigh'), 8 n_components, by log-likelihood",
                    {"small": 16, "full": 1024}, _pca, None),
    "ridge": Workload("Ridge(solver='svd'), 8 alphas, by R²", {"small": 16, "full": 256}, _ridge, "y"),
    "logistic": Workload(f"LogisticRegression(lbfgs), 8 C, {CLASSES} classes, by accuracy",
                         {"small": 16, "full": 256}, _logistic, "classes"),
}


@dataclasses.dataclass(frozen=True)
class Plan(common.Plan):
    rows: int
    model_rows: int = 0

    @property
    def steps(self) -> int:
        return sum(runs(kind, name) for _, kind, _ in self.columns for name in self.workloads)


def plan(size="small", rows=None, workloads=None, compare=None, gpus=None, protocol=None, repeat=1,
         timeout=None, model_rows=None) -> Plan:
    """Checks every argument (a ``ValueError`` that names the bad one) and settles the columns."""
    if size not in SIZES:
        raise ValueError(f"--size {size}: the ml suite has {' and '.join(SIZES)}")
    missing = [name for name, module in (("scikit-learn", "sklearn"), ("dask-ml", "dask_ml")) if not find_spec(module)]
    if missing:
        raise ImportError(f"the ml suite needs {' and '.join(missing)}: pip install 'dask-gpu[ml]'")
    if compare is not None:
        raise ValueError("--compare: the ml suite has no dask-cuda column (its searches run the same on both)")
    rows = SIZES[size] if rows is None else int(rows)
    if rows < 2 * FOLDS * CLASSES:
        raise ValueError(f"rows must be at least {2 * FOLDS * CLASSES} for {FOLDS} folds of {CLASSES} classes, "
                         f"not {rows}")
    model_rows = models.ROWS[size] if model_rows is None else int(model_rows)
    if model_rows < models.CHUNKS[size] * models.CLUSTERS:
        raise ValueError(f"model_rows must be at least {models.CHUNKS[size] * models.CLUSTERS}, not {model_rows}")
    names, cols, timeout = tuple(workloads or [*WORKLOADS, *MODELS]), columns(gpus), timeout or TIMEOUT
    protocol = protocol or default_protocol(cols)
    check_options(names, {**WORKLOADS, **MODELS}, compare, protocol, repeat, timeout)
    cols, notes = gpu_notes(cols, None)
    return Plan(size=size, workloads=names, columns=tuple(cols), notes=tuple(notes), protocol=protocol,
                repeat=int(repeat), timeout=timeout, rows=rows, model_rows=model_rows)


def planned(options) -> Plan:
    """The bench command's options (:class:`~dask_gpu.benchmarks.common.Options`) as this suite's plan."""
    return plan(options.size, None, options.workloads, options.compare, options.gpus, options.protocol,
                options.repeat, options.timeout)


def columns(gpus=None) -> list[tuple[str, str, int]]:
    """(label, kind, count): scikit-learn on every core, cuML on one GPU in this process (where it is installed),
    dask-gpu's GPU columns (one fit at a time on each GPU), and one GPU with AT_ONCE fits at a time."""
    cores = os.cpu_count() or 1
    counts = gpu_counts(gpus, available_gpus(("cupy",), find_spec))
    cuml = [("cuML, 1 GPU", "cuml", 1)] if 1 in counts and find_spec("cuml") is not None else []
    shared = [(f"dask-gpu, 1 GPU, {AT_ONCE} fits at once", "gpu-shared", 1)] if 1 in counts else []
    return [(f"scikit-learn, {cores} cores", "cpu", cores), *cuml, *gpu_columns(counts, None, "dask-gpu, "), *shared]


def runs(kind: str, name: str) -> bool:
    """Whether a column of ``kind`` runs workload ``name``: searches everywhere but on cuML alone, models
    everywhere but where several fits share a GPU."""
    return kind != "cuml" if name in WORKLOADS else kind != "gpu-shared"


def data(rows: int, features: int, seed: int = SEED) -> dict:
    """X (rows x features) of a rank-features/4 signal plus noise, a regression target y, and 4 classes of
    noisy linear scores (not separable: the logistic regression converges for every C)."""
    rng = np.random.default_rng(seed)
    rank = max(1, features // 4)
    x = rng.standard_normal((rows, rank)) @ rng.standard_normal((rank, features))
    x += 0.5 * rng.standard_normal((rows, features))
    y = x @ rng.standard_normal(features) + rng.standard_normal(rows)
    logits = x @ rng.standard_normal((features, CLASSES))
    classes = np.argmax(logits + logits.std() * rng.standard_normal(logits.shape), axis=1)  # not separable
    return {"X": x, "y": y, "classes": classes}


def run(plan: Plan, progress=None, checkpoint=None, status=None) -> dict:
    """Every workload in every column that runs it; ``progress(label)`` before each, ``status(text)`` before its
    warm-up and timed runs, ``checkpoint(result)`` after each column."""
    searches = [name for name in plan.workloads if name in WORKLOADS]
    trained = [name for name in plan.workloads if name in MODELS]
    result = {"suite": "ml", "size": plan.size, "rows": plan.rows, "folds": FOLDS, "candidates": 8,
              "features": {name: WORKLOADS[name].features[plan.size] for name in searches},
              "protocol": plan.protocol, "repeat": plan.repeat,
              "workloads": {name: (WORKLOADS.get(name) or MODELS[name]).text for name in plan.workloads},
              "machine": machine_dict(), "libraries": libraries(), "runs": [], "notes": list(plan.notes),
              "columns": [label for label, kind, _ in plan.columns if any(runs(kind, n) for n in plan.workloads)]}
    shape = (plan.model_rows, models.CHUNKS[plan.size])
    if trained:
        result.update(model_rows=plan.model_rows, model_features=models.FEATURES, chunks=shape[1],
                      sample_rows=min(models.SAMPLE, plan.model_rows))
    datasets = {name: data(plan.rows, WORKLOADS[name].features[plan.size]) for name in searches}
    whole = {}  # the models' rows, made here once the first column needs them
    references = {}

    def measure(engine, name, count):
        if name in MODELS:
            if not whole:
                whole.update(models.rows_here(*shape))
            row = models.train(engine, name, whole, shape, plan.repeat, status)
            if "score" in row:
                reference = references.setdefault(name, row["score"])  # the first column, scikit-learn's
                row["correct"] = abs(row["score"] - reference) <= models.RTOL * abs(reference)
            return row
        row = _measure(engine, name, datasets[name], plan.repeat, status)
        if "scores" in row:
            references.setdefault(name, row["scores"])  # the first column, scikit-learn's
            row["correct"] = bool(np.allclose(row["scores"], references[name], rtol=RTOL, atol=1e-12))
        return row

    def keep(result):
        result["ratios"] = ratios(result["runs"], plan.columns)
        if engine_notes:
            result["notes"] = list(dict.fromkeys(result["notes"] + engine_notes))
        if checkpoint:
            checkpoint(result)

    engine_notes = []
    return run_columns(result, list(plan.columns), list(plan.workloads),
                       lambda kind, count: _column(kind, count, plan.protocol, engine_notes, bool(trained)),
                       measure, progress, keep, runs)


def libraries() -> dict:
    found = {}
    for name in LIBRARIES:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            pass
    return found


def _measure(engine, name, arrays, repeat, status=None) -> dict:
    """A warm-up search, then ``repeat`` timed ones; the last one's mean test scores."""
    workload = WORKLOADS[name]
    try:
        estimator, grid = workload.search(arrays["X"].shape[1])
        with engine.data(arrays["X"], arrays[workload.target] if workload.target else None) as (x, y):
            search, times = timed(lambda: engine.search(estimator, grid, x, y), repeat, status)
    except Exception as e:  # a failing workload is a result, not the end of the table
        return {"error": error_text(e)}
    results = search.cv_results_  # best_params_ is Dask-ML's only where it refits
    scores = [float(s) for s in results["mean_test_score"]]
    best = results["params"][int(np.argmin(results["rank_test_score"]))]
    return {**timing(times), "fits": FOLDS * len(scores), "scores": scores,
            "best_params": {k: _plain(v) for k, v in best.items()}}


def _plain(value):
    return value.item() if hasattr(value, "item") else value


@contextmanager
def _column(kind, count, protocol, notes, trains=False):
    """The engine of one column: scikit-learn or cuML here, or a GPU cluster started once."""
    if kind == "cpu":
        yield _ScikitLearn()
        return
    if kind == "cuml":
        yield _CuML()
        return
    from dask_gpu.ml import on_gpus

    with ExitStack() as stack:
        if os.environ.get("SCIPY_ARRAY_API") != "1":  # the workers' scipy, imported after they start, needs it
            os.environ["SCIPY_ARRAY_API"] = "1"
            stack.callback(os.environ.pop, "SCIPY_ARRAY_API")
        at_once = AT_ONCE if kind == "gpu-shared" else 1
        if at_once > 1:
            from distributed import Client

            from dask_gpu import LocalCUDACluster

            cluster = LocalCUDACluster(n_workers=count, threads_per_worker=at_once, protocol=protocol,
                                       dashboard_address=":0")
            client = stack.enter_context(Client(stack.enter_context(cluster)))
        else:
            client = gpu_client(stack, kind, count, protocol)
        gpus = stack.enter_context(on_gpus(client, fits_per_gpu=at_once))
        notes.append(f"dask-gpu on {gpus}")
        engine = _GPUs(client, gpus)
        if trains and kind == "gpu":
            notes.append(f"models on dask-gpu: {engine.trainer()}")
        yield engine


class _ScikitLearn:
    """scikit-learn on NumPy arrays, every core busy: GridSearchCV's joblib processes, the models' threads."""

    client = None

    @contextmanager
    def data(self, x, y):
        yield x, y

    def search(self, estimator, grid, x, y):
        from sklearn.model_selection import GridSearchCV, KFold

        return GridSearchCV(estimator, grid, cv=KFold(FOLDS), n_jobs=-1, refit=False).fit(x, y)

    @contextmanager
    def rows(self, whole, rows, chunks):
        yield whole["X"], whole["y"]

    def train(self, name, x, y):
        return models.fit(name, "scikit-learn", x, y)


class _CuML:
    """cuML on one GPU, in this process, on CuPy arrays copied there once."""

    client = None

    @contextmanager
    def rows(self, whole, rows, chunks):
        import cupy

        x, y = cupy.asarray(whole["X"]), cupy.asarray(whole["y"])
        try:
            yield x, y
        finally:
            del x, y
            gc.collect()
            cupy.get_default_memory_pool().free_all_blocks()

    def train(self, name, x, y):
        return models.fit(name, "cuml", x, y)


class _GPUs:
    """Dask-ML's GridSearchCV with every fit on a GPU worker, the data there as the estimators' arrays; and
    cuML's Dask estimators (Dask-ML's where cuML is not on the workers) on rows made on the GPU workers."""

    def __init__(self, client, gpus):
        self.client, self.gpus = client, gpus
        self.cuml = gpus.device and all(self.client.run(_installed, "cuml", workers=gpus.workers).values())

    def trainer(self) -> str:
        if self.cuml:
            return "cuML's Dask estimators on CuPy chunks"
        why = "simulated GPUs" if self.gpus.simulated else "cuML is not installed there"
        return f"Dask-ML's KMeans and LinearRegression on NumPy chunks ({why})"

    @contextmanager
    def data(self, x, y):
        yield self.gpus.scatter(x, y)  # sent and moved to the device once, before the searches

    def search(self, estimator, grid, x, y):
        from dask_ml.model_selection import GridSearchCV
        from sklearn.model_selection import KFold

        return GridSearchCV(estimator, grid, cv=KFold(FOLDS), refit=False).fit(x, y)

    @contextmanager
    def rows(self, whole, rows, chunks):
        """The rows made chunk by chunk on the GPU workers, from the chunks' seeds, and kept there."""
        from distributed import futures_of, wait

        x, y = self.gpus.scatter(*models.rows_made_where_computed(rows, chunks))
        wait(futures_of([x, y]))
        try:
            yield x, y
        finally:
            del x, y

    def train(self, name, x, y):
        if self.cuml:
            return models.fit(name, "cuml.dask", x, y, client=self.client)
        return models.fit(name, "dask-ml", x, y)


def _installed(module: str) -> bool:
    return find_spec(module) is not None


def ratios(runs: list[dict], columns) -> list[dict]:
    """Each GPU column's speed-up over scikit-learn on every core (its seconds / the GPU's), correct runs only."""
    kinds = {label: kind for label, kind, _ in columns}
    cpu = next((label for label, kind, _ in columns if kind == "cpu"), None)
    seconds = {(r["workload"], r["architecture"]): r["seconds"] for r in runs if r.get("correct")}
    return [{"workload": name, "architecture": label, "against": cpu, "speedup": seconds[name, cpu] / mine}
            for (name, label), mine in seconds.items() if kinds[label] != "cpu" and (name, cpu) in seconds]


def table(result: dict) -> str:
    heads = []
    if result["features"]:
        heads.append(f"searches: {result['rows']:,} rows, {FOLDS} folds, 8 candidates: {8 * FOLDS} fits a search, "
                     "no refit")
    if "model_rows" in result:
        heads.append(f"models: {result['model_rows']:,} rows x {result['model_features']} float32 features in "
                     f"{result['chunks']} chunks, scored on the first {result['sample_rows']:,}")
    head = "; ".join(heads) + f"; each time is the best of {result['repeat']} after a warm-up run"
    lines = [head, runs_table(result, ok=" ✓")]
    if result.get("ratios"):
        names = list(result["workloads"])
        by = {}
        for r in result["ratios"]:
            by.setdefault(f"{r['architecture']}: speed-up over {r['against']}", {})[r["workload"]] = r["speedup"]
        rows = [(key, *(f"{cells[n]:.2f}x" if n in cells else "-" for n in names)) for key, cells in by.items()]
        lines.append(text_table([("ratios", *names), *rows]))
    return "\n".join([*lines, *startup_lines(result), *scaling_lines(result), *result["notes"]])


def plot(result: dict, path: str) -> None:
    """A bar chart of the table, log scale, one group per workload (needs matplotlib)."""
    bar_chart(result, path, f"{result['rows']:,} rows, {8 * FOLDS} fits a search"
              + (f"; models on {result['model_rows']:,} rows" if "model_rows" in result else ""))
