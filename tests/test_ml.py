"""dask_gpu.ml: Dask-ML's searches with every fit on a GPU worker, Array API dispatch there, and the errors."""

import time
import types

import dask
import numpy as np
import pytest

pytest.importorskip("sklearn")
pytest.importorskip("dask_ml")

from dask_ml.model_selection import GridSearchCV  # noqa: E402
from distributed import Client, LocalCluster, get_task_stream, get_worker  # noqa: E402
from sklearn.base import BaseEstimator, RegressorMixin  # noqa: E402
from sklearn.linear_model import LogisticRegression, Ridge  # noqa: E402
from sklearn.model_selection import GridSearchCV as SklearnGridSearchCV  # noqa: E402

from dask_gpu import LocalCUDACluster  # noqa: E402
from dask_gpu.ml import EXECUTOR, GPUs, on_gpus  # noqa: E402

ALPHAS = [0.01, 1.0, 100.0, 1e4]


class Probe(BaseEstimator, RegressorMixin):
    """A regressor that remembers where it was fitted and whether scikit-learn's Array API dispatch was on."""

    def __init__(self, alpha=1.0):
        self.alpha = alpha

    def fit(self, X, y):
        import sklearn

        self.dispatch_ = sklearn.get_config()["array_api_dispatch"]
        self.worker_ = get_worker().name
        self.mean_ = float(np.mean(y))
        return self

    def predict(self, X):
        return np.full(len(X), self.mean_)


def data(n=400, d=5):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, d))
    return x, x @ np.arange(1.0, d + 1) + rng.standard_normal(n)


@pytest.fixture(scope="module")
def mixed():
    """Two simulated GPU workers and a CPU worker, whose workers give scipy its Array API switch."""
    with dask.config.set({"gpu.simulate": 2}):
        with LocalCUDACluster(cpu_workers=1, threads_per_worker=2, dashboard_address=False,
                              env={"SCIPY_ARRAY_API": "1"}) as cluster, Client(cluster) as client:
            yield cluster, client


def names(cluster, tasks):
    return {cluster.scheduler.workers[t["worker"]].name for t in tasks}


def test_every_fit_runs_on_a_gpu_worker_and_matches_scikit_learn(mixed):
    cluster, client = mixed
    x, y = data()
    with on_gpus(client) as gpus, get_task_stream(client) as stream:
        X, Y = gpus.scatter(x, y)
        search = GridSearchCV(Ridge(), {"alpha": ALPHAS}, cv=4).fit(X, Y)
    fits = [t for t in stream.data if "fit-score" in str(t["key"])]
    assert len(fits) == len(ALPHAS) * 4
    assert names(cluster, stream.data) <= {"gpu-0", "gpu-1"}, names(cluster, stream.data)  # never cpu-0
    assert not gpus.array_api and not gpus.device
    assert names(cluster, [{"worker": a} for a in gpus.workers]) == {"gpu-0", "gpu-1"}
    reference = SklearnGridSearchCV(Ridge(), {"alpha": ALPHAS}, cv=4).fit(x, y)
    np.testing.assert_allclose(search.cv_results_["mean_test_score"], reference.cv_results_["mean_test_score"])
    assert search.best_params_ == reference.best_params_
    assert dask.config.get("scheduler") != gpus.get  # the block's scheduler is gone with it


def test_what_the_block_submits_through_the_client_stays_on_gpu_workers(mixed):
    cluster, client = mixed
    with on_gpus(client):
        futures = client.map(lambda i: get_worker().name, range(12), pure=False)
        persisted = client.persist(dask.array.ones(12, chunks=1) + 1)
        ran = set(client.gather(futures))
    assert ran <= {"gpu-0", "gpu-1"}, ran
    holders = {cluster.scheduler.workers[a].name for holders in client.who_has(persisted).values() for a in holders}
    assert holders <= {"gpu-0", "gpu-1"}, holders
    after = client.map(lambda i: get_worker().name, range(12), pure=False, workers=["cpu-0"])
    assert set(client.gather(after)) == {"cpu-0"}  # outside the block, the CPU worker takes work again


def test_a_classifier_with_folds_by_count_computes_its_target_type_on_the_gpus_too(mixed):
    cluster, client = mixed
    x, y = data()
    with on_gpus(client) as gpus, get_task_stream(client) as stream:
        X, classes = gpus.scatter(x, (y > 0).astype(int))
        search = GridSearchCV(LogisticRegression(), {"C": [0.1, 10.0]}, cv=3).fit(X, classes)
    assert any("type_of_target" in str(t["key"]) for t in stream.data)  # Dask-ML's StratifiedKFold choice
    assert names(cluster, stream.data) <= {"gpu-0", "gpu-1"}
    assert search.best_score_ > 0.8


def test_simulated_gpus_fall_back_to_numpy_and_say_so(mixed):
    cluster, client = mixed
    with on_gpus(client) as gpus:
        assert str(gpus) == "2 simulated GPU workers: scikit-learn on NumPy arrays (simulated GPUs)"
        x = gpus.scatter(np.ones((3, 2)))
        assert type(x.compute()) is np.ndarray
        moved = gpus.scatter(dask.array.ones((4, 2), chunks=2))
        assert type(moved.compute()) is np.ndarray and moved.sum().compute() == 8
    search = GridSearchCV(Probe(), {"alpha": [1.0, 2.0]}, cv=2)
    with on_gpus(client):
        search.fit(*data())
    assert search.best_estimator_.dispatch_ is False and search.best_estimator_.worker_ in ("gpu-0", "gpu-1")


def test_with_array_api_every_fit_runs_with_scikit_learns_dispatch_on(mixed):
    cluster, client = mixed
    search = GridSearchCV(Probe(), {"alpha": [1.0, 2.0]}, cv=2)
    with on_gpus(client, array_api=True) as gpus, get_task_stream(client) as stream:
        assert str(gpus) == ("2 simulated GPU workers: scikit-learn on NumPy arrays (simulated GPUs, Array API "
                             "dispatch on)")
        search.fit(*data())
    assert search.best_estimator_.dispatch_ is True  # the refit, in the executor that turns it on
    assert names(cluster, stream.data) <= {"gpu-0", "gpu-1"}
    executors = client.run(lambda dask_worker: EXECUTOR in dask_worker.executors)
    by_name = {cluster.scheduler.workers[a].name: has for a, has in executors.items()}
    assert by_name == {"gpu-0": True, "gpu-1": True, "cpu-0": False}


def spans(i):
    start = time.monotonic()
    time.sleep(0.3)
    return get_worker().name, start, time.monotonic()


def overlaps(runs):
    by = {}
    for name, start, end in runs:
        by.setdefault(name, []).append((start, end))
    return any(b[0] < a[1] for times in by.values() for a, b in zip(sorted(times), sorted(times)[1:]))


@pytest.mark.parametrize("fits, overlapping", [(1, False), (2, True)])
def test_fits_per_gpu_runs_that_many_at_once_on_each_gpu(mixed, fits, overlapping):
    cluster, client = mixed  # two threads a GPU worker
    with on_gpus(client, fits_per_gpu=fits) as gpus:
        runs = client.gather(client.map(spans, range(8), pure=False))
    assert {name for name, _, _ in runs} <= {"gpu-0", "gpu-1"} and overlaps(runs) is overlapping
    assert fits == 1 or str(gpus).startswith("2 simulated GPU workers, 2 fits at once on each: ")


def test_a_failing_fit_raises_at_once_rather_than_being_retried(mixed):
    cluster, client = mixed
    start = time.monotonic()
    with pytest.raises(ValueError, match="Invalid parameter 'alpah' for estimator Ridge"):
        with on_gpus(client):
            GridSearchCV(Ridge(), {"alpah": [1.0]}, cv=2).fit(*data())  # Dask-ML's own loop would retry it for ever
    assert time.monotonic() - start < 30


def test_a_cluster_without_gpu_workers_is_an_error_that_says_what_to_do():
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        with pytest.raises(ValueError, match=r"none of the cluster's 1 worker\(s\) has the 'GPU' resource \(none "
                                             r"has a resource\): run GPU workers with dask_gpu.LocalCUDACluster"):
            with on_gpus(client):
                pass


def test_no_client_is_an_error_that_says_what_to_do(monkeypatch):
    from dask_gpu import ml

    def no_client():
        raise ValueError("No clients found")  # distributed's default_client() where there is none

    monkeypatch.setattr(ml, "default_client", no_client)
    with pytest.raises(ValueError, match="on_gpus needs a dask client: start a cluster with GPU workers"):
        with on_gpus():
            pass


def fake_client(resources, states=None):
    """A client whose scheduler and workers answer as given: address -> resources, address -> worker state."""
    workers = {address: {"resources": r, "nthreads": 1} for address, r in resources.items()}
    states = states or {}
    scheduler = types.SimpleNamespace(identity=lambda n_workers: {"workers": workers})
    return types.SimpleNamespace(asynchronous=False, scheduler=scheduler, sync=lambda f, **kwargs: f(**kwargs),
                                 run=lambda f, workers: {a: states[a] for a in workers})


def test_bad_input_is_refused_before_anything_runs():
    with pytest.raises(ValueError, match=r"has the 'gpu' resource \(the resources there are 'GPU'\).*on_gpus\("
                                         r"resource=\.\.\.\)"):
        GPUs(fake_client({"tcp://a": {"GPU": 1}}), "gpu")
    with pytest.raises(ValueError, match="the cluster has no workers yet: wait for them"):
        GPUs(fake_client({}))
    with pytest.raises(TypeError, match="resource must be the name of the workers' GPU resource"):
        GPUs(fake_client({"tcp://a": {"GPU": 1}}), {"GPU": 1})
    with pytest.raises(ValueError, match=r"fits_per_gpu must be a whole number of fits at once on each GPU, 1 or more, "
                                         r"not 0"):
        GPUs(fake_client({"tcp://a": {"GPU": 1}}), fits_per_gpu=0)
    with pytest.raises(ValueError, match=r"fits_per_gpu=2, but the GPU workers run 1 thread\(s\) each: start them "
                                         r"with 2 \(LocalCUDACluster\(threads_per_worker=2\)"):
        GPUs(fake_client({"tcp://a": {"GPU": 1}}), fits_per_gpu=2)
    lacking = {"tcp://a": {"sklearn": None, "cupy": True, "simulated": False}}
    with pytest.raises(ImportError, match=r"scikit-learn is not installed on the GPU worker\(s\) tcp://a: install "
                                          r"dask-gpu\[ml\]"):
        GPUs(fake_client({"tcp://a": {"GPU": 1}, "tcp://b": {}}, lacking))


def test_what_the_gpus_say_they_run():
    real = {"tcp://a": {"sklearn": "1.9", "cupy": True, "simulated": False}}
    gpus = GPUs(fake_client({"tcp://a": {"GPU": 1}}, real))
    assert gpus.device and gpus.array_api and str(gpus) == "1 GPU worker: scikit-learn on CuPy arrays"
    off = GPUs(fake_client({"tcp://a": {"GPU": 1}}, real), array_api=False)
    assert str(off) == "1 GPU worker: scikit-learn on CuPy arrays, without Array API dispatch"
    no_cupy = {"tcp://a": {"sklearn": "1.9", "cupy": False, "simulated": False}}
    assert str(GPUs(fake_client({"tcp://a": {"GPU": 1}}, no_cupy))) == (
        "1 GPU worker: scikit-learn on NumPy arrays (CuPy is not installed there)")


def test_the_plugin_refuses_a_worker_whose_scipy_came_without_the_switch(monkeypatch):
    from dask_gpu.ml import ArrayAPI, ArrayAPIThreadPoolExecutor

    def worker(resources):
        return types.SimpleNamespace(name="w", executors={}, state=types.SimpleNamespace(total_resources=resources,
                                                                                           nthreads=2))

    monkeypatch.delenv("SCIPY_ARRAY_API", raising=False)
    monkeypatch.setitem(__import__("sys").modules, "scipy", types.ModuleType("scipy"))
    with pytest.raises(RuntimeError, match="worker w imported scipy without SCIPY_ARRAY_API=1.*LocalCUDACluster"):
        ArrayAPI().setup(worker({"GPU": 1}))
    cpu = worker({})
    ArrayAPI().setup(cpu)  # no GPU: nothing to do
    assert cpu.executors == {}
    monkeypatch.setenv("SCIPY_ARRAY_API", "1")
    gpu = worker({"GPU": 1})
    ArrayAPI().setup(gpu)
    executor = gpu.executors[EXECUTOR]
    try:
        assert isinstance(executor, ArrayAPIThreadPoolExecutor) and executor._max_workers == 2
        import sklearn

        assert executor.submit(lambda: sklearn.get_config()["array_api_dispatch"]).result() is True
    finally:
        executor.shutdown()


@pytest.mark.gpu
def test_on_a_gpu_the_search_computes_on_cupy_arrays():
    import cupy

    from sklearn.decomposition import PCA

    x, y = data(4000, 32)
    with LocalCUDACluster(n_workers=1, dashboard_address=False, env={"SCIPY_ARRAY_API": "1"}) as cluster, \
            Client(cluster) as client:
        with on_gpus(client) as gpus:
            assert gpus.device and gpus.array_api and "CuPy" in str(gpus)
            X, Y = gpus.scatter(x, y)
            assert type(X.compute()) is cupy.ndarray
            ridge = GridSearchCV(Ridge(solver="svd"), {"alpha": ALPHAS}, cv=4).fit(X, Y)
            pca = GridSearchCV(PCA(svd_solver="covariance_eigh"), {"n_components": [2, 4, 8, 16]}, cv=4,
                               refit=False).fit(X)
    assert type(ridge.best_estimator_.coef_) is cupy.ndarray  # fitted on the device, with its arrays there
    for search, estimator, grid, target in ((ridge, Ridge(solver="svd"), {"alpha": ALPHAS}, y),
                                            (pca, PCA(svd_solver="covariance_eigh"), {"n_components": [2, 4, 8, 16]},
                                             None)):
        reference = SklearnGridSearchCV(estimator, grid, cv=4).fit(x, target)
        np.testing.assert_allclose(search.cv_results_["mean_test_score"], reference.cv_results_["mean_test_score"],
                                   rtol=1e-6)
