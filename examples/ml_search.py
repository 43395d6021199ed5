"""Hyper-parameter searches with every fit on a GPU worker: Dask-ML's GridSearchCV and RandomizedSearchCV.

    python examples/ml_search.py [--rows 20000] [--features 64] [--cpu-workers 1]

Inside ``dask_gpu.ml.on_gpus(client)`` each fit and score runs on a worker with the ``GPU`` resource (never on
the CPU workers), and scikit-learn computes with CuPy on the arrays that ``gpus.scatter`` put on the device
(its Array API dispatch). The answers are checked against scikit-learn's own search on NumPy here. Without a
GPU and CuPy it runs anyway, on simulated GPU workers with NumPy arrays, and says so.
"""

import argparse
import collections
import os
from importlib.util import find_spec

os.environ.setdefault("SCIPY_ARRAY_API", "1")  # before scipy is imported, here and in the workers

import dask  # noqa: E402
import numpy as np  # noqa: E402
from dask_ml.model_selection import GridSearchCV, RandomizedSearchCV  # noqa: E402
from distributed import Client, get_task_stream  # noqa: E402
from sklearn import model_selection  # noqa: E402
from sklearn.decomposition import PCA  # noqa: E402
from sklearn.linear_model import Ridge  # noqa: E402

import dask_gpu  # noqa: E402
from dask_gpu import LocalCUDACluster  # noqa: E402
from dask_gpu.ml import on_gpus  # noqa: E402


def use_gpus() -> None:
    """Simulated GPU workers where there is no GPU with CuPy, and a line that says so."""
    if find_spec("cupy") is not None and dask_gpu.discover().state is dask_gpu.State.AVAILABLE:
        return
    if not dask_gpu.discover().usable:
        dask.config.set({"gpu.simulate": 2})
    print(f"no GPU with CuPy here: {len(dask_gpu.discover().devices)} simulated GPU workers, NumPy arrays")


def make_data(rows: int, features: int):
    """A rank-features/4 signal plus noise, and a regression target."""
    rng = np.random.default_rng(0)
    rank = features // 4
    x = rng.standard_normal((rows, rank)) @ rng.standard_normal((rank, features))
    x += 0.5 * rng.standard_normal((rows, features))
    return x, x @ rng.standard_normal(features) + rng.standard_normal(rows)


def report(label, search, reference, stream, names):
    """Where the fits ran, and whether their scores are scikit-learn's."""
    ran = collections.Counter(names[t["worker"]] for t in stream.data if "fit-score" in str(t["key"]))
    others = sorted({names[t["worker"]] for t in stream.data} - {n for n in names.values() if n.startswith("gpu")})
    ours, theirs = search.cv_results_, reference.cv_results_
    best = ours["params"][int(np.argmin(ours["rank_test_score"]))]
    right = np.allclose(ours["mean_test_score"], theirs["mean_test_score"], rtol=1e-6) and best == \
        theirs["params"][int(np.argmin(theirs["rank_test_score"]))]
    shown = ", ".join(f"{k}={float(v):.3g}" for k, v in best.items())
    print(f"{label}: {sum(ran.values())} fits on {dict(sorted(ran.items()))}, "
          f"{'none on CPU workers' if not others else 'some on ' + ', '.join(others)}; best {shown}, "
          f"{'the same scores as scikit-learn here: right' if right else 'scores differ from scikit-learn: WRONG'}")


if __name__ == "__main__":  # the workers are processes of their own: this guard keeps them from running it
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--features", type=int, default=64)
    parser.add_argument("--cpu-workers", type=int, default=1)
    args = parser.parse_args()
    use_gpus()
    x, y = make_data(args.rows, args.features)
    components = {"n_components": [args.features * k // 16 for k in range(1, 9)]}
    alphas = {"alpha": list(np.logspace(-3, 4, 16))}
    cv = model_selection.KFold(4)

    with LocalCUDACluster(cpu_workers=args.cpu_workers, dashboard_address=False) as cluster, Client(cluster) as client:
        names = client.run(lambda dask_worker: dask_worker.name)  # address -> name
        with on_gpus(client) as gpus:
            print(f"fits on {gpus}")
            X, Y = gpus.scatter(x, y)  # on a GPU worker, copied to its device once
            with get_task_stream(client) as pca_tasks:
                pca = GridSearchCV(PCA(svd_solver="covariance_eigh"), components, cv=cv, refit=False).fit(X)
            with get_task_stream(client) as ridge_tasks:
                ridge = RandomizedSearchCV(Ridge(solver="svd"), alphas, n_iter=8, cv=cv, refit=False,
                                           random_state=0).fit(X, Y)

    reference = model_selection.GridSearchCV(PCA(svd_solver="covariance_eigh"), components, cv=cv).fit(x)
    report("GridSearchCV(PCA), by log-likelihood", pca, reference, pca_tasks, names)
    candidates = [dict(alpha=a) for a in ridge.cv_results_["param_alpha"]]  # the same 8 draws
    reference = model_selection.GridSearchCV(Ridge(solver="svd"), [{k: [v] for k, v in c.items()} for c in candidates],
                                             cv=cv).fit(x, y)
    report("RandomizedSearchCV(Ridge), by R²", ridge, reference, ridge_tasks, names)
