"""The device shuffle's logic on the CPU: pandas partitions through it, on simulated GPU workers."""

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from distributed import Client

from dask_gpu import LocalCUDACluster
from dask_gpu.dataframe.scheduler import DeviceShuffles, shuffle_mode
from dask_gpu.dataframe.tables import PandasFrames


def frame(n=4000, seed=0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({
        "k": rng.integers(0, n // 10, n),
        "x": rng.standard_normal(n),
        "s": rng.choice(["a", "bb", None, "dddd"], n),
        "c": pd.Categorical(rng.choice(["p", "q", "r"], n)),
        "t": pd.to_datetime(rng.integers(0, 10**9, n), unit="s"),
        "n": np.where(rng.random(n) < 0.2, np.nan, rng.standard_normal(n)),
    })
    df.index = pd.RangeIndex(10, 10 + n, name="row")
    return df


def device_shuffles(client) -> int:
    return client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.plugins[DeviceShuffles.name].shuffles)


@pytest.fixture(scope="module")
def client():
    with dask.config.set({"gpu.simulate": 2, "gpu.shuffle": "all", "dataframe.shuffle.method": "p2p"}):
        with LocalCUDACluster(dashboard_address=False, memory_limit="2GB") as cluster, Client(cluster) as client:
            yield client


def same(got: pd.DataFrame, expected: pd.DataFrame, by):
    got, expected = (d.sort_values(by).reset_index(drop=True) for d in (got, expected))
    pd.testing.assert_frame_equal(got, expected[got.columns], check_dtype=False, check_categorical=False)


def test_split_and_concat_put_every_row_back_in_its_partition():
    df = frame(1000)
    df["_partitions"] = (df.k % 7).astype("int8")
    frames = PandasFrames(df.iloc[:0], "_partitions", drop_column=True)
    pieces = frames.split(df, 7)
    assert sorted(pieces) == sorted(set(df.k % 7))
    for j, piece in pieces.items():
        assert "_partitions" not in piece.columns
        assert (piece.k % 7 == j).all()
        assert list(piece.index) == sorted(piece.index)  # stable: input order kept
    back = frames.concat(list(pieces.values()))
    pd.testing.assert_frame_equal(back.sort_index(), df.drop(columns="_partitions"))
    assert frames.concat([]).columns.tolist() == list(df.columns.drop("_partitions"))


def test_shuffle_keeps_every_row_and_puts_each_key_in_one_partition(client):
    base = dd.from_pandas(frame(), npartitions=6)
    df = base.compute()  # with dask's dtypes (its strings)
    before = device_shuffles(client)
    parts = client.compute(base.shuffle("k", npartitions=5).to_delayed(), sync=True)
    assert device_shuffles(client) == before + 1
    got = pd.concat(parts)
    assert len(parts) == 5
    assert sum(p.k.nunique() for p in parts) == df.k.nunique()  # no key in two partitions
    pd.testing.assert_frame_equal(got.sort_index(), df)


@pytest.mark.parametrize("how", ["inner", "left", "outer"])
def test_hash_merge_equals_pandas(client, how):
    left, right = frame(3000, 1), frame(800, 2)[["k", "x", "s"]].drop_duplicates("k")
    before = device_shuffles(client)
    got = dd.from_pandas(left, npartitions=5).merge(
        dd.from_pandas(right, npartitions=3), on="k", how=how, broadcast=False).compute()
    assert device_shuffles(client) == before + 2  # both sides
    same(got, left.merge(right, on="k", how=how), ["k", "x_x", "t"])


def test_broadcast_merge_equals_pandas(client):
    left, right = frame(3000, 3), frame(300, 4)[["k", "n"]].drop_duplicates("k")
    got = dd.from_pandas(left, npartitions=8).merge(dd.from_pandas(right, npartitions=1), on="k").compute()
    same(got, left.merge(right, on="k"), ["k", "x", "n_x"])


def test_sort_values_and_set_index_equal_pandas(client):
    base = dd.from_pandas(frame(3000, 5), npartitions=6).persist()  # a graph of its own, as read data is
    df = base.compute()
    before = device_shuffles(client)
    # persisted first: compute() alone would sort one concatenated partition, with no shuffle
    pd.testing.assert_frame_equal(base.sort_values("x").persist().compute(), df.sort_values("x"))
    pd.testing.assert_frame_equal(base.set_index("x").persist().compute(), df.set_index("x").sort_index())
    assert device_shuffles(client) >= before + 2


def test_split_out_groupby_drop_duplicates_and_value_counts_equal_pandas(client):
    ddf = dd.from_pandas(frame(4000, 6), npartitions=6).persist()
    df = ddf.compute()
    before = device_shuffles(client)
    got = ddf.groupby("k").agg({"x": "sum", "n": "mean"}, split_out=3).persist().compute()
    pd.testing.assert_frame_equal(got.sort_index(), df.groupby("k").agg({"x": "sum", "n": "mean"}))
    dedup = ddf[["k", "s"]].drop_duplicates(split_out=3).persist().compute()
    same(dedup, df[["k", "s"]].drop_duplicates(), ["k", "s"])
    counts = ddf.s.value_counts(split_out=2).persist().compute()
    pd.testing.assert_series_equal(counts.sort_index(), df.s.value_counts().sort_index())
    assert device_shuffles(client) >= before + 3


def test_pieces_spill_to_disk_and_come_back_right(simulate, tmp_path):
    simulate(1)
    base = dd.from_pandas(frame(20000, 7), npartitions=8)
    df = base.compute()
    with dask.config.set({"gpu.shuffle": "all", "dataframe.shuffle.method": "p2p",
                          "distributed.worker.memory.target": 0.0001}):
        with LocalCUDACluster(dashboard_address=False, memory_limit="1GB", local_directory=str(tmp_path)) as cluster, \
                Client(cluster) as client:
            got = base.shuffle("k").compute()
            spilled = client.run(lambda dask_worker: dask_worker.data.metrics()["disk-keys"] +
                                 dask_worker.data.metrics()["host-disk-write-count"])
    pd.testing.assert_frame_equal(got.sort_index(), df)
    assert sum(spilled.values()) > 0


def test_p2p_mode_leaves_shuffles_to_distributed(simulate):
    simulate(1)
    with dask.config.set({"gpu.shuffle": "p2p", "dataframe.shuffle.method": "p2p"}):
        with LocalCUDACluster(dashboard_address=False) as cluster, Client(cluster) as client:
            base = dd.from_pandas(frame(1000), npartitions=4)
            got = base.shuffle("k").compute()
            assert device_shuffles(client) == 0
    pd.testing.assert_frame_equal(got.sort_index(), base.compute())


def test_gpu_mode_leaves_pandas_to_distributed(simulate):
    simulate(1)
    with dask.config.set({"gpu.shuffle": "gpu", "dataframe.shuffle.method": "p2p"}):
        with LocalCUDACluster(dashboard_address=False) as cluster, Client(cluster) as client:
            dd.from_pandas(frame(1000), npartitions=4).shuffle("k").compute()
            assert device_shuffles(client) == 0


def test_a_bad_shuffle_mode_is_refused_before_anything_starts(simulate):
    simulate(1)
    with dask.config.set({"gpu.shuffle": "gpus"}):
        with pytest.raises(ValueError, match="gpu.shuffle must be one of gpu, all, p2p, not 'gpus'"):
            LocalCUDACluster()
    assert shuffle_mode("all") == "all"
