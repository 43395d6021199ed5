"""The ml suite's models: KMeans (8 clusters) and LinearRegression trained once on many rows of 16 float32
features, their rows, their scores, and the estimator of each library that trains them.

The rows are 8 blobs and a noisy linear target, made in chunks, each from the suite's seed and its own index
(:func:`chunk`), so that a GPU worker makes the chunks it holds and scikit-learn here gets the same rows. Each
trained model is scored on the first rows: KMeans by its inertia, LinearRegression by its R², each computed
here from the model's fitted attributes, whichever library fitted it.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Callable

import numpy as np

from dask_gpu.benchmarks.common import error_text, timed, timing

ROWS = {"small": 20_000, "full": 50_000_000}  # rows a model is trained on
CHUNKS = {"small": 8, "full": 64}
SAMPLE = 1_000_000  # the first rows, on which each trained model is scored
CLUSTERS = 8
FEATURES = 16
RTOL = 0.01  # a model's score against scikit-learn's
SEED = 2026


@dataclasses.dataclass(frozen=True)
class Model:
    text: str  # what it trains, for the table
    target: str | None  # "y", or None (unsupervised)
    score: Callable  # (fitted model, sample) -> its score on the sample
    estimators: dict  # library -> (module, class)


def inertia(model, sample) -> float:
    """The sum of squared distances from each row of the sample to its nearest centre."""
    x, centers = sample["X"].astype(np.float64), host(model.cluster_centers_).astype(np.float64)
    distances = (x * x).sum(1)[:, None] - 2 * x @ centers.T + (centers * centers).sum(1)[None, :]
    return float(np.maximum(distances.min(1), 0).sum())


def r2(model, sample) -> float:
    x, y = sample["X"].astype(np.float64), sample["y"].astype(np.float64)
    predicted = x @ host(model.coef_).astype(np.float64).ravel() + float(host(model.intercept_).ravel()[0])
    return float(1 - ((y - predicted) ** 2).sum() / ((y - y.mean()) ** 2).sum())


MODELS = {
    "kmeans": Model(f"KMeans, {CLUSTERS} clusters, by inertia on the first rows", None, inertia,
                    {"scikit-learn": ("sklearn.cluster", "KMeans"), "cuml": ("cuml.cluster", "KMeans"),
                     "cuml.dask": ("cuml.dask.cluster", "KMeans"), "dask-ml": ("dask_ml.cluster", "KMeans")}),
    "linear": Model("LinearRegression, by R² on the first rows", "y", r2,
                    {"scikit-learn": ("sklearn.linear_model", "LinearRegression"),
                     "cuml": ("cuml.linear_model", "LinearRegression"),
                     "cuml.dask": ("cuml.dask.linear_model", "LinearRegression"),
                     "dask-ml": ("dask_ml.linear_model", "LinearRegression")}),
}


def fit(name: str, library: str, x, y, **keywords):
    """Model ``name`` as ``library`` has it (scikit-learn, cuml, cuml.dask or dask-ml), fitted to ``x`` (and
    ``y``); ``keywords`` go to the estimator (cuML's Dask estimators take their ``client``)."""
    module, cls = MODELS[name].estimators[library]
    options = {"n_clusters": CLUSTERS, "random_state": SEED} if name == "kmeans" else {}
    if library == "dask-ml" and name == "linear":
        options["solver"] = "newton"  # exact in one step; Dask-ML's default, ADMM, iterates for seconds
    model = getattr(importlib.import_module(module), cls)(**options, **keywords)
    return model.fit(x) if y is None else model.fit(x, y)


def bounds(rows: int, chunks: int) -> list[tuple[int, int]]:
    """The rows cut into ``chunks`` (start, stop) as even as they go."""
    edges = np.linspace(0, rows, chunks + 1).astype(int)
    return list(zip(edges[:-1].tolist(), edges[1:].tolist()))


def chunk(index: int, start: int, stop: int, seed: int = SEED) -> dict:
    """Rows ``start:stop``, float32: 8 blobs whose centres lie 20 apart on orthogonal axes (every k-means run
    that starts well finds them), and y a linear function of X plus noise. Made from the seed and the chunk's
    index alone, so that any process makes the same rows."""
    common = np.random.default_rng(seed)
    axes, _ = np.linalg.qr(common.standard_normal((FEATURES, FEATURES)))
    centers, weights = (20 / np.sqrt(2)) * axes[:CLUSTERS], common.standard_normal(FEATURES)
    rng = np.random.default_rng((seed, index))
    x = centers[rng.integers(0, CLUSTERS, stop - start)].astype(np.float32)
    x += rng.standard_normal((stop - start, FEATURES), dtype=np.float32)
    y = x @ weights.astype(np.float32) + rng.standard_normal(stop - start, dtype=np.float32)
    return {"X": x, "y": y}


def rows_here(rows: int, chunks: int) -> dict:
    """All the rows, in this process."""
    parts = [chunk(i, start, stop) for i, (start, stop) in enumerate(bounds(rows, chunks))]
    return {key: np.concatenate([part[key] for part in parts]) for key in ("X", "y")}


def rows_made_where_computed(rows: int, chunks: int) -> tuple:
    """X and y as dask arrays whose chunks are made where they are computed, each from its own seed."""
    import dask
    import dask.array as da

    cut = bounds(rows, chunks)
    parts = [dask.delayed(chunk, pure=True)(i, start, stop) for i, (start, stop) in enumerate(cut)]
    return tuple(da.concatenate([da.from_delayed(part[key], (stop - start, *shape), np.float32)
                                 for part, (start, stop) in zip(parts, cut)])
                 for key, shape in (("X", (FEATURES,)), ("y", ())))


def train(engine, name, whole, shape, repeat, status=None) -> dict:
    """A warm-up fit, then ``repeat`` timed ones, of model ``name`` on all the rows (``engine.rows`` puts them
    where ``engine.train`` fits); the last one's score on the first rows of ``whole``."""
    try:
        with engine.rows(whole, *shape) as (x, y):
            model, times = timed(lambda: engine.train(name, x, y if MODELS[name].target else None), repeat, status)
        score = MODELS[name].score(model, {key: value[:SAMPLE] for key, value in whole.items()})
    except Exception as e:  # a failing workload is a result, not the end of the table
        return {"error": error_text(e)}
    return {**timing(times), "score": score}


def host(array) -> np.ndarray:
    """A fitted attribute as NumPy: CuPy's and cuDF's come back from the device."""
    if hasattr(array, "to_numpy"):
        array = array.to_numpy()
    return np.asarray(array.get() if hasattr(array, "__cuda_array_interface__") else array)
