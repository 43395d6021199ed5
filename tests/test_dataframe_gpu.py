"""cuDF-backed dataframes on a real GPU: results equal pandas, shuffles stay on the device, spilling works."""

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from distributed import Client, futures_of, wait

from dask_gpu import LocalCUDACluster
from dask_gpu.dataframe.scheduler import DeviceShuffles
from dask_gpu.memory.stats import memory_stats

pytestmark = [pytest.mark.gpu, pytest.mark.cudf]


def frame(n=20_000, seed=0) -> pd.DataFrame:
    """Strings, nulls, categoricals, datetimes, and a named index, with the dtypes cuDF gives back."""
    import cudf

    rng = np.random.default_rng(seed)
    df = pd.DataFrame({
        "k": rng.integers(0, n // 10, n),
        "x": rng.standard_normal(n),
        "s": pd.Series(rng.choice(["a", "bb", None, "dddd"], n), dtype="object"),
        "c": pd.Categorical(rng.choice(["p", "q", "r"], n)),
        "t": pd.to_datetime(rng.integers(0, 10**9, n), unit="s"),
        "n": np.where(rng.random(n) < 0.2, np.nan, rng.standard_normal(n)),
    })
    df.index = pd.RangeIndex(10, 10 + n, name="row")
    return cudf.from_pandas(df).to_pandas()


def on_gpu(df: pd.DataFrame, npartitions: int):
    return dd.from_pandas(df, npartitions=npartitions).to_backend("cudf").persist()


def to_pandas(ddf) -> pd.DataFrame:
    """A cuDF-backed collection's value in pandas: persisted first, so that shuffles run as shuffles."""
    return ddf.persist().compute().to_pandas()


def device_shuffles(client) -> int:
    return client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.plugins[DeviceShuffles.name].shuffles)


def plain(df: pd.DataFrame) -> pd.DataFrame:
    """Strings as objects with None for missing, whichever string dtype a library chose."""
    df = df.copy()
    for name, column in df.items():
        if column.dtype == object or pd.api.types.is_string_dtype(column.dtype):
            df[name] = column.astype(object).where(column.notna(), None)
    return df


def same(got: pd.DataFrame, expected: pd.DataFrame, by=None):
    """Equal values (rows in any order when ``by`` names the columns to sort by)."""
    if by is not None:
        got, expected = (d.sort_values(by).reset_index(drop=True) for d in (got, expected))
    pd.testing.assert_frame_equal(plain(got), plain(expected[got.columns]), check_dtype=False,
                                  check_categorical=False, check_index_type=False)


@pytest.fixture(scope="module")
def client():
    with LocalCUDACluster(n_workers=1, dashboard_address=False) as cluster, Client(cluster) as client:
        yield client


def test_pieces_pack_and_travel_exactly():
    import cudf

    from dask_gpu.dataframe.shuffle import Shipment, _deserialize, _serialize
    from dask_gpu.dataframe.tables import CudfFrames, Piece, _piece_from_host, _piece_to_host

    df = cudf.from_pandas(frame(5000))
    df["_partitions"] = (df.k % 5).astype("int8")
    frames = CudfFrames(df.iloc[:0], "_partitions", drop_column=True)
    pieces = frames.split(df, 5)
    assert sorted(pieces) == [0, 1, 2, 3, 4] and all(isinstance(p, Piece) for p in pieces.values())
    assert len({id(p.parent) for p in pieces.values()}) == 1  # views of one partitioned table
    expected = df.drop(columns="_partitions").to_pandas()
    for on_device in (True, False):
        header, frames_ = _serialize(Shipment([(0, j, p) for j, p in pieces.items()]), on_device)
        back = _deserialize(header, frames_)
        got = frames.concat([piece for _, _, piece in back.items]).to_pandas()
        pd.testing.assert_frame_equal(got.sort_index(), expected)
    spilled = {j: _piece_from_host(_piece_to_host(p).payload) for j, p in pieces.items()}
    for j, piece in spilled.items():
        pd.testing.assert_frame_equal(frames.concat([piece]).to_pandas(), frames.concat([pieces[j]]).to_pandas())
        assert (frames.concat([piece]).to_pandas().k % 5 == j).all()


def test_cudf_frames_count_their_allocations_once_and_spill_exactly():
    import cudf

    from dask_gpu.memory import dispatch

    df = cudf.from_pandas(frame(5000))
    grouped = df.groupby("k").agg({"x": ["sum", "mean"]})  # MultiIndex columns
    assert dispatch.device_nbytes(grouped) > 0
    assert dispatch.device_nbytes([df, df[["x"]], df]) == dispatch.device_nbytes(df)  # shared columns, once
    for value in (df, grouped, df.x, df.index, grouped.index):
        back = dispatch.to_device(dispatch.to_host(value))
        assert type(back) is type(value)
        assert back.to_pandas().equals(value.to_pandas())


def test_shuffle_stays_on_the_device_and_keeps_every_row(client):
    base = on_gpu(frame(), 6)
    df = base.compute().to_pandas()
    before, stats = device_shuffles(client), memory_stats(client)
    parts = [p.to_pandas() for p in client.compute(base.shuffle("k", npartitions=5).persist().to_delayed(), sync=True)]
    assert device_shuffles(client) == before + 1
    assert sum(p.k.nunique() for p in parts) == df.k.nunique()
    same(pd.concat(parts).sort_index(), df)
    after = memory_stats(client)
    (name,) = after
    assert after[name]["device-to-host-count"] == stats[name]["device-to-host-count"]  # nothing left the device


@pytest.mark.parametrize("how", ["inner", "left", "outer"])
def test_hash_merge_equals_pandas(client, how):
    left, right = frame(30_000, 1), frame(8000, 2)[["k", "x", "s"]].drop_duplicates("k")
    before = device_shuffles(client)
    got = to_pandas(on_gpu(left, 5).merge(on_gpu(right, 3), on="k", how=how, broadcast=False))
    assert device_shuffles(client) == before + 2
    same(got, left.merge(right, on="k", how=how), ["k", "x_x", "t"])


def test_broadcast_merge_equals_pandas(client):
    left, right = frame(30_000, 3), frame(3000, 4)[["k", "n"]].drop_duplicates("k")
    got = to_pandas(on_gpu(left, 8).merge(on_gpu(right, 1), on="k"))
    same(got, left.merge(right, on="k"), ["k", "x", "n_x"])


def test_sort_values_and_set_index_equal_pandas(client):
    df = frame(30_000, 5)
    base = on_gpu(df, 6)
    before = device_shuffles(client)
    same(to_pandas(base.sort_values("x")), df.sort_values("x"))
    same(to_pandas(base.set_index("x")), df.set_index("x").sort_index())
    assert device_shuffles(client) >= before + 2


def test_split_out_groupby_drop_duplicates_and_value_counts_equal_pandas(client):
    df = frame(40_000, 6)
    ddf = on_gpu(df, 6)
    before = device_shuffles(client)
    got = to_pandas(ddf.groupby("k").agg({"x": "sum", "n": "mean"}, split_out=3))
    same(got.sort_index(), df.groupby("k").agg({"x": "sum", "n": "mean"}))
    same(to_pandas(ddf[["k", "s"]].drop_duplicates(split_out=3)), df[["k", "s"]].drop_duplicates(), ["k", "s"])
    counts = ddf.s.value_counts(split_out=2).persist().compute().to_pandas()
    pd.testing.assert_series_equal(counts.sort_index(), df.s.value_counts().sort_index(), check_dtype=False,
                                   check_names=False, check_index_type=False)
    assert device_shuffles(client) >= before + 3


def test_parquet_and_csv_round_trip_on_the_gpu_backend(client, tmp_path):
    df = frame(10_000, 7)[["k", "x", "s", "t", "n"]]
    with dask.config.set({"dataframe.backend": "cudf"}):
        dd.from_pandas(df, npartitions=4).to_backend("cudf").to_parquet(str(tmp_path / "pq"))
        back = dd.read_parquet(str(tmp_path / "pq"))
        assert type(back._meta).__module__.startswith("cudf")
        same(back.compute().to_pandas(), df)
        df.to_csv(tmp_path / "f.csv", index=False)
        csv = dd.read_csv(str(tmp_path / "f.csv"), parse_dates=["t"])
        assert type(csv._meta).__module__.startswith("cudf")
        same(csv.compute().to_pandas().reset_index(drop=True), df.reset_index(drop=True))


def test_a_shuffle_larger_than_the_device_limit_spills_and_is_right(tmp_path):
    df = frame(2_000_000, 8).drop(columns="c")  # about 100 MB on the device (cuDF reads no dictionary columns)
    df.to_parquet(tmp_path / "data.parquet", row_group_size=200_000)
    with LocalCUDACluster(n_workers=1, device_memory_limit="40MB", dashboard_address=False) as cluster, \
            Client(cluster) as client, dask.config.set({"dataframe.backend": "cudf"}):
        base = dd.read_parquet(str(tmp_path / "data.parquet"), split_row_groups=1).persist()
        wait(base)
        got = to_pandas(base.shuffle("k"))
        (stats,) = memory_stats(client).values()
    same(got.reset_index(drop=True), df.reset_index(drop=True), by=["k", "x"])
    assert stats["device-to-host-count"] > 0 and stats["host-to-device-count"] > 0


def test_cudf_spilling_leaves_cudf_frames_to_cudf(tmp_path):
    df = frame(50_000, 9)
    with LocalCUDACluster(n_workers=1, enable_cudf_spill=True, dashboard_address=False) as cluster, \
            Client(cluster) as client:
        base = on_gpu(df, 4)
        got = to_pandas(base.merge(on_gpu(df[["k", "n"]].drop_duplicates("k"), 2), on="k", broadcast=False))
        (stats,) = memory_stats(client).values()
        spilling = client.run(lambda: __import__("cudf").get_option("spill"))
    assert all(spilling.values())
    assert stats["self-spilling-keys"] > 0  # the persisted frames, left to cuDF
    same(got, df.merge(df[["k", "n"]].drop_duplicates("k"), on="k"), ["k", "x", "t"])


def test_the_gpu_backend_reads_partitions_sized_for_the_gpu(client, tmp_path):
    """Planned reads on cuDF: a partition of about the target in one cuDF call, metas of the partitions' types,
    filters that skip row groups, and files with an index or categories left to dask-cudf's reader."""
    df = frame(60_000, 10)[["k", "x", "s", "t", "n"]].reset_index(drop=True)
    for i in range(6):
        df.iloc[i * 10_000:(i + 1) * 10_000].to_parquet(tmp_path / f"part-{i}.parquet", index=False,
                                                        row_group_size=5_000)
    target = 1_000_000
    with dask.config.set({"dataframe.backend": "gpu", "gpu.partition-size": target}):
        ddf = dd.read_parquet(str(tmp_path))
        assert type(ddf._meta).__module__.startswith("cudf") and 1 < ddf.npartitions < 6  # 2.3 MB in 6 files
        got = ddf.persist()
        sizes = got.map_partitions(lambda p: p.memory_usage().sum(), meta=("size", "i8")).compute()
        assert all(0.5 * target <= size <= 2 * target for size in sizes), sizes.tolist()
        assert dict(got.dtypes) == dict(got.partitions[0].compute().dtypes)
        same(got.compute().to_pandas().reset_index(drop=True), df)
        late = ddf[ddf.t >= df.t.quantile(0.9)]
        assert len(late) == (df.t >= df.t.quantile(0.9)).sum()
        ordered = ddf.assign(row=1).row.cumsum()  # rows of every partition, in order
        assert ordered.compute().to_pandas().tolist() == list(range(1, 60_001))
        held = client.persist(dd.read_parquet(str(tmp_path), columns=["x"]))
        assert held.npartitions == len(futures_of(held)) and held.x.sum().compute() == pytest.approx(df.x.sum())
        written = frame(1000, 3)[["k", "x", "s", "t", "n"]]  # a named index: dask-cudf's reader
        written.to_parquet(tmp_path / "indexed.parquet")
        indexed = dd.read_parquet(str(tmp_path / "indexed.parquet"))
        assert any(c.__module__.startswith("dask_cudf") for c in type(indexed.expr).__mro__)  # read by dask-cudf
        same(indexed.compute().to_pandas().reset_index(drop=True), written.reset_index(drop=True))
        assert dd.from_pandas(df, npartitions=2).to_backend("gpu").npartitions == 2


def test_reads_on_threads_own_streams_equal_cudf_s_reader(tmp_path):
    """Partitions read at once by two threads, each on its own stream, are what ``cudf.read_parquet`` reads."""
    from concurrent.futures import ThreadPoolExecutor

    import cudf

    from dask_gpu.dataframe import parquet

    df = frame(40_000, 11)[["k", "x", "s", "t", "n"]].reset_index(drop=True)
    for i in range(2):
        df.iloc[i * 20_000:(i + 1) * 20_000].to_parquet(tmp_path / f"p{i}.parquet", index=False, row_group_size=4_000)
    jobs = [(((str(tmp_path / "p0.parquet"), (1, 3)), (str(tmp_path / "p1.parquet"), (0,))), ["x", "s", "t"]),
            (((str(tmp_path / "p1.parquet"), (2, 3, 4)),), None)] * 4
    with ThreadPoolExecutor(2) as pool:
        got = list(pool.map(lambda job: parquet.read_pieces(*job, "cudf"), jobs))
    for frame_read, (pieces, columns) in zip(got, jobs):
        want = cudf.read_parquet([p for p, _ in pieces], columns=columns, row_groups=[list(g) for _, g in pieces],
                                 use_pandas_metadata=False)
        assert frame_read.to_pandas().equals(want.to_pandas())


def test_sorted_files_and_small_sides_on_cudf(client, tmp_path):
    """On cuDF partitions: a group-by on the files' order key with no shuffle, joined back partition by partition,
    and a small side read once for the join's tasks; every answer pandas'."""
    from dask_gpu.dataframe import planner

    rng = np.random.default_rng(4)
    lines = pd.DataFrame({"k": np.arange(60_000) // 3, "s": rng.integers(0, 2_000, 60_000), "x": rng.random(60_000)})
    lines.to_parquet(tmp_path / "lines.parquet", row_group_size=3_000, index=False)
    small = pd.DataFrame({"s": np.arange(2_000), "y": rng.random(2_000)})  # 32 KB: more than 1/16 of a partition
    small.to_parquet(tmp_path / "small.parquet", index=False)
    with dask.config.set({"dataframe.backend": "gpu", "gpu.partition-size": 300_000}):
        full = dd.read_parquet(str(tmp_path / "lines.parquet"))
        assert full.npartitions > 2 and full.expr.key_ranges[0] == "k"
        counts = full.groupby("k").s.nunique().to_frame("kinds").reset_index()
        joined = full[full.x > 0.5].merge(counts, on="k").merge(dd.read_parquet(str(tmp_path / "small.parquet")),
                                                                 on="s")
        lowered = {type(e).__name__ for e in planner.optimize(joined.expr, fuse=False).walk()}
        assert not lowered & {"TaskShuffle", "P2PShuffle", "DiskShuffle", "HashJoinP2P"} and "Stage" in lowered
        got = joined.compute().to_pandas()
    want = lines[lines.x > 0.5].merge(lines.groupby("k").s.nunique().to_frame("kinds").reset_index(), on="k")
    same(got, want.merge(small, on="s"), by=["k", "s", "x"])


def test_workers_of_a_gpu_dataframe_cluster_start_with_cudf_ready(tmp_path):
    """A cluster started under ``dataframe.backend: gpu`` warms cuDF in each worker before it registers: the
    first query finds cuDF imported and its operations run once."""
    import sys

    frame(10_000, 3)[["k", "x", "s"]].to_parquet(tmp_path / "part-0.parquet")
    with dask.config.set({"dataframe.backend": "gpu"}):
        with LocalCUDACluster(n_workers=1, dashboard_address=False) as cluster, Client(cluster) as client:
            assert all(client.run(lambda: "dask_cudf" in sys.modules and "cudf" in sys.modules).values())
            got = dd.read_parquet(str(tmp_path)).groupby("k").x.mean().compute().to_pandas()
            assert len(got) == frame(10_000, 3).k.nunique()
    with LocalCUDACluster(n_workers=1, dashboard_address=False) as cluster, Client(cluster) as client:
        assert not any(client.run(lambda: "cudf" in sys.modules).values())  # pandas dataframes: no cuDF
