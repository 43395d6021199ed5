"""cuML's Dask estimators on dask-gpu's cluster, unchanged, against scikit-learn on a sample; and the one pool
that CuPy, cuDF and cuML share on its workers. On real GPUs with cuML and raft-dask installed."""

import numpy as np
import pytest

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cluster():
    """dask-gpu's cluster on up to two of the GPUs here, and a client of it."""
    pytest.importorskip("cuml")
    pytest.importorskip("raft_dask")
    from distributed import Client

    from dask_gpu import LocalCUDACluster
    from dask_gpu.benchmarks.common import available_gpus

    with LocalCUDACluster(n_workers=min(2, available_gpus()), dashboard_address=False) as cluster, \
            Client(cluster) as client:
        yield client


def on_gpus(client, rows=40_000, chunks=8):
    """The ml suite's model rows, made chunk by chunk on the GPU workers as CuPy chunks, and the same rows here."""
    from dask_gpu.benchmarks import models

    x, y = (array.map_blocks(_device, dtype=np.float32) for array in models.rows_made_where_computed(rows, chunks))
    x, y = client.persist([x, y])
    return x, y, models.rows_here(rows, chunks)


def _device(block):
    import cupy

    return cupy.asarray(block)


def test_kmeans_and_linear_regression_across_the_gpus_match_scikit_learn(cluster):
    from cuml.dask.cluster import KMeans
    from cuml.dask.linear_model import LinearRegression
    from sklearn.cluster import KMeans as SklearnKMeans
    from sklearn.linear_model import LinearRegression as SklearnLinearRegression

    from dask_gpu.benchmarks import models

    x, y, here = on_gpus(cluster)
    kmeans = KMeans(n_clusters=models.CLUSTERS, random_state=models.SEED, client=cluster).fit(x)
    linear = LinearRegression(client=cluster).fit(x, y)
    reference = SklearnKMeans(models.CLUSTERS, random_state=models.SEED).fit(here["X"])
    assert models.inertia(kmeans, here) == pytest.approx(models.inertia(reference, here), rel=0.01)
    r2 = models.r2(SklearnLinearRegression().fit(here["X"], here["y"]), here)
    assert r2 > 0.9 and models.r2(linear, here) == pytest.approx(r2, rel=0.01)


def test_nearest_neighbors_and_random_forest_across_the_gpus_match_scikit_learn(cluster):
    from cuml.dask.ensemble import RandomForestClassifier
    from cuml.dask.neighbors import NearestNeighbors
    from sklearn.ensemble import RandomForestClassifier as SklearnForest
    from sklearn.neighbors import NearestNeighbors as SklearnNeighbors

    import dask.array as da

    from dask_gpu.benchmarks import models

    x, y, here = on_gpus(cluster, rows=20_000)
    queries = here["X"][:500]
    distances, _ = NearestNeighbors(n_neighbors=5, client=cluster).fit(x).kneighbors(
        da.from_array(queries, chunks=250).map_blocks(_device, dtype=np.float32))
    expected, _ = SklearnNeighbors(n_neighbors=5).fit(here["X"]).kneighbors(queries)
    np.testing.assert_allclose(models.host(distances.compute()), expected, rtol=1e-3, atol=1e-3)

    classes = (here["y"] > np.median(here["y"])).astype(np.int32)  # two classes, split by y: not separable by X's blobs
    labels = da.from_array(classes, chunks=x.chunks[0]).map_blocks(_device, dtype=np.int32)
    forest = RandomForestClassifier(n_estimators=20, max_depth=12, random_state=models.SEED, client=cluster)
    forest.fit(x, labels.persist())
    test = models.rows_here(24_000, 8)
    test_x, test_classes = test["X"][20_000:], (test["y"][20_000:] > np.median(here["y"])).astype(np.int32)
    mine = float((models.host(forest.predict(da.from_array(test_x, chunks=2_000).map_blocks(_device, dtype=np.float32))
                           .compute()) == test_classes).mean())
    theirs = SklearnForest(n_estimators=20, max_depth=12, random_state=models.SEED).fit(here["X"], classes).score(
        test_x, test_classes)
    assert theirs > 0.7 and mine == pytest.approx(theirs, abs=0.03)


def test_one_pool_serves_cupy_cudf_and_cuml(cluster):
    """cuDF and cuML point CuPy at RMM as they are imported; the worker's RMM resource is dask-gpu's, which
    spills on failure: one pool for the three."""
    pytest.importorskip("cudf")

    def allocators():
        import cudf
        import cuml  # noqa: F401
        import cupy
        import rmm
        from rmm.allocators.cupy import rmm_cupy_allocator

        cudf.Series([1, 2, 3]).sum()
        allocate = cupy.cuda.get_allocator()
        routed = allocate is rmm_cupy_allocator or getattr(allocate, "malloc", None) is rmm_cupy_allocator
        return routed, type(rmm.mr.get_current_device_resource()).__name__

    for routed, resource in cluster.run(allocators).values():
        assert routed and resource == "FailureCallbackResourceAdaptor"
