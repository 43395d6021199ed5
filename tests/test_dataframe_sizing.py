"""Partition sizing of the gpu dataframe backend, on the CPU."""

import dask
import pandas as pd
import pytest
from distributed import Client

from dask_gpu import LocalCUDACluster
from dask_gpu.dataframe import sizing

GB = 10**9


@pytest.mark.parametrize(("stored", "pieces", "memory", "gpus", "expected"), [
    (4.5 * GB, 40, 80 * GB, 1, 2),  # 2.25 GB a partition, against 2.5 GB: two even ones
    (4.5 * GB, 40, 80 * GB, 2, 2),
    (4.5 * GB, 40, 80 * GB, 4, 4),  # at least one per GPU
    (4.5 * GB, 40, 80 * GB, 3, 3),
    (20 * GB, 40, 80 * GB, 3, 9),  # 8 of 2.5 GB, rounded up to 3 a GPU
    (20 * GB, 5, 80 * GB, 1, 5),  # files are joined, never split
    (1000, 8, 80 * GB, 1, 1),
])
def test_partition_count(stored, pieces, memory, gpus, expected):
    assert sizing.partition_count(int(stored), pieces, memory, gpus) == expected


def test_partition_size_in_bytes_or_a_fraction():
    assert sizing.partition_bytes(80 * GB) == 80 * GB // 32
    assert sizing.partition_bytes(80 * GB, "1GB") == GB
    with dask.config.set({"gpu.partition-size": 0.0625}):
        assert sizing.partition_count(10 * GB, 40, 80 * GB, 1) == 2
    for bad, match in [(0, "more than 0"), (-1, "must not be negative"), ("x", "not a size"), (1.5, "a fraction")]:
        with pytest.raises(ValueError, match=match):
            sizing.partition_size(bad)


def test_stored_bytes_of_a_directory_a_glob_and_a_list(tmp_path):
    for i in range(3):
        pd.DataFrame({"a": range(1000 * (i + 1))}).to_parquet(tmp_path / f"part-{i}.parquet")
    sizes = [f.stat().st_size for f in sorted(tmp_path.iterdir())]
    assert sizing.stored_bytes(str(tmp_path)) == sum(sizes)
    assert sizing.stored_bytes(str(tmp_path / "part-*.parquet")) == sum(sizes)
    two = [str(tmp_path / "part-0.parquet"), str(tmp_path / "part-2.parquet")]
    assert sizing.stored_bytes(two) == sizes[0] + sizes[2]


def test_the_gpu_workers_and_their_memory(simulate):
    simulate(["16GB", "80GB"])
    with LocalCUDACluster(cpu_workers=1, dashboard_address=False) as cluster, Client(cluster) as client:
        assert sorted(sizing.gpu_workers(client)) == [16 * GB, 80 * GB]  # the CPU worker is no GPU
        assert sorted(sizing.gpu_workers()) == [16 * GB, 80 * GB]


def test_without_a_cluster_the_gpus_of_this_machine(simulate):
    simulate(["8GB"])
    assert sizing.gpu_workers() == [8 * GB]


def test_the_gpu_backend_is_known_and_says_what_it_needs(monkeypatch):
    import sys

    import dask.dataframe as dd
    from dask.dataframe.dask_expr._backends import dataframe_creation_dispatch

    from dask_gpu.dataframe.backend import GPUBackendEntrypoint

    assert isinstance(dataframe_creation_dispatch.dispatch("gpu"), GPUBackendEntrypoint)
    for name in ("dask_cudf", "dask_cudf.backends"):  # not installed (though a GPU machine may have imported it)
        monkeypatch.setitem(sys.modules, name, None)
    with dask.config.set({"dataframe.backend": "gpu"}):
        with pytest.raises(ImportError, match="the 'gpu' dataframe backend needs cuDF and dask-cudf"):
            dd.from_dict({"a": [1, 2]}, npartitions=1)


def test_the_gpu_backend_reads_fused_files_that_client_persist_can_hold(simulate, pandas_reader, tmp_path):
    """The backend's partitioning, with pandas' reader standing in for dask-cudf's: both read several
    files in one call once the graph is optimized. Persisted through ``Client.persist``, the collection
    must name the partitions that were made (a bare fused read names those of before the fusion)."""
    import dask.dataframe as dd
    import numpy as np
    from distributed import futures_of, wait

    for i in range(40):
        pd.DataFrame({"k": np.arange(1000) + 1000 * i, "x": np.ones(1000), "pad": np.zeros(1000)}).to_parquet(
            tmp_path / f"part-{i:02d}.parquet")
    stored = sizing.stored_bytes(str(tmp_path))
    simulate(["80GB", "80GB"])
    with dask.config.set({"gpu.partition-size": stored // 8}), \
            LocalCUDACluster(dashboard_address=False) as cluster, Client(cluster) as client:
        for columns in (None, ["x"]):  # a projection fuses more files into each read
            with dask.config.set({"dataframe.backend": "gpu"}):
                df = dd.read_parquet(str(tmp_path), columns=columns)
            held = client.persist(df)
            wait(futures_of(held))
            assert held.npartitions == len(futures_of(held)) == 8  # as many on each GPU
            rows = held.map_partitions(len).compute().tolist()
            assert sum(rows) == 40_000 and all(n % 1000 == 0 for n in rows)  # whole files, none split
            assert max(rows) <= 2 * min(rows)  # fused reads joined: about even
            assert held.x.sum().compute() == 40_000


def test_a_read_of_unchanged_files_takes_the_same_expression_again(simulate, pandas_reader, tmp_path):
    import dask.dataframe as dd

    made = pandas_reader
    simulate(["80GB"])
    for i in range(2):
        pd.DataFrame({"k": range(100)}).to_parquet(tmp_path / f"part-{i}.parquet")
    with dask.config.set({"dataframe.backend": "gpu"}):
        first, second = dd.read_parquet(str(tmp_path)), dd.read_parquet(str(tmp_path))
        assert first is not second and first.expr is second.expr and len(made) == 1
        second.columns = ["renamed"]  # a user's change to one collection is not the other's
        assert list(dd.read_parquet(str(tmp_path)).columns) == ["k"] and len(made) == 1
        dd.read_parquet(str(tmp_path), columns=["k"])  # other arguments: another read
        assert len(made) == 2
        pd.DataFrame({"k": range(100)}).to_parquet(tmp_path / "part-2.parquet")  # another file: read again
        assert dd.read_parquet(str(tmp_path)).k.sum().compute() == 3 * 4950 and len(made) == 3


def test_two_projections_of_one_read_stay_aligned(simulate, pandas_reader, tmp_path):
    """A column computed from some of a read's columns, assigned beside another of it (as TPC-H's query 21
    does): each projection reads its own columns, fused into reads of their own, and the rows must meet."""
    import dask.dataframe as dd
    import numpy as np

    rng = np.random.default_rng(5)
    for i in range(12):
        n = 1000 + 100 * i
        pd.DataFrame({"k": np.arange(n) + 10_000 * i, "a": rng.integers(0, 9, n), "b": rng.integers(0, 9, n),
                      "wide": rng.standard_normal(n), "wider": rng.standard_normal(n)}).to_parquet(
            tmp_path / f"part-{i:02d}.parquet")
    want = pd.read_parquet(tmp_path)
    simulate(["80GB", "80GB"])
    stored = sizing.stored_bytes(str(tmp_path))
    with dask.config.set({"gpu.partition-size": stored // 4}), \
            LocalCUDACluster(dashboard_address=False) as cluster, Client(cluster):
        with dask.config.set({"dataframe.backend": "gpu"}):
            df = dd.read_parquet(str(tmp_path))
        late = df.k.where((df.a > df.b) & (df.wide > df.wider))  # five columns read, against one
        got = df[["k"]].assign(late=late).compute().sort_values("k")
    assert len(got) == len(want)
    expected = want.k.where((want.a > want.b) & (want.wide > want.wider))
    np.testing.assert_array_equal(got.late.to_numpy(), expected.to_numpy())
