"""One partition for a group-by of few groups, told from a sample of its keys' reads (dask_gpu.dataframe.groups,
.footers), with pandas partitions on the CPU."""

import dask
import numpy as np
import pandas as pd
import pytest

from dask_gpu.dataframe import footers, groups, parquet

ROWS, GROUP_ROWS = 120_000, 5_000


@pytest.fixture
def table(tmp_path):
    """24 row groups: ``g`` of 7 values, ``k`` of about 60,000, ``s`` sorted in runs of 10 rows; and a small table
    of ``g``'s names."""
    rng = np.random.default_rng(3)
    # g's values are not the positions 0 to 6, which would hide an index misaligned
    df = pd.DataFrame({"g": rng.integers(0, 7, ROWS) * 10 + 3, "k": rng.integers(0, 60_000, ROWS),
                       "x": rng.random(ROWS), "s": np.arange(ROWS) // 10})
    df.to_parquet(tmp_path / "t.parquet", row_group_size=GROUP_ROWS)
    names = pd.DataFrame({"g": np.arange(7) * 10 + 3, "name": [f"n{i}" for i in range(7)]})
    names.to_parquet(tmp_path / "names.parquet")
    return df, str(tmp_path / "t.parquet"), names, str(tmp_path / "names.parquet")


def read(path):
    """24 partitions of two of the table's columns, a row group each."""
    return parquet.read_parquet(path, None, engine="pandas", partition_bytes=ROWS * 16 // 24, gpus=4)


def lowered(collection) -> set:
    return {type(e).__name__ for e in collection.optimize(fuse=False).expr.optimized.walk()}


def test_few_groups_are_reduced_into_one_partition_not_shuffled(planned_pandas, table):
    df, path, _, _ = table
    sums = read(path).groupby("g").x.sum()
    assert sums.expr.frame.npartitions == 24  # dask would shuffle into 2 (more than 15 partitions of one key)
    with dask.config.set({"dataframe.shuffle.method": "tasks"}):
        assert not lowered(sums) & {"TaskShuffle", "Shuffle"} and sums.optimize().npartitions == 1
        got = sums.compute()
    pd.testing.assert_series_equal(got.sort_index(), df.groupby("g").x.sum())


def test_many_groups_a_made_key_or_a_chosen_split_out_are_left_to_dask(planned_pandas, table, monkeypatch):
    df, path, _, _ = table
    frame = read(path)
    monkeypatch.setattr(groups, "FEW", 10_000)  # k's 60,000 values are many
    with dask.config.set({"dataframe.shuffle.method": "tasks"}):
        for collection in (frame.groupby("k").x.sum(), frame.assign(h=frame.g * 2).groupby("h").x.sum(),
                           frame.groupby("g").x.sum(split_out=2)):
            assert "TaskShuffle" in lowered(collection) and collection.optimize().npartitions == 2
        got = frame.groupby("k").x.sum().compute()
    pd.testing.assert_series_equal(got.sort_index(), df.groupby("k").x.sum())


def test_keys_from_both_sides_of_a_join_count_their_product(planned_pandas, table, monkeypatch):
    df, path, names, names_path = table
    monkeypatch.setattr(groups, "FEW", 10_000)
    frame = read(path)
    joined = frame.merge(parquet.read_parquet(names_path, None, engine="pandas", partition_bytes=10**9), on="g")
    by = joined.groupby(["name", "g"]).x.sum()
    assert groups.estimate(by.expr) == 7 * 7  # g of the large side (the join keeps its rows), name of all the names
    assert groups.estimate(joined.groupby(["name", "k"]).x.sum().expr) > 7 * 1000
    with dask.config.set({"dataframe.shuffle.method": "tasks"}):
        got = joined.groupby(["name", "s"]).x.count()
        assert by.optimize().npartitions == 1 and got.optimize().npartitions > 1  # 7 names of 12,000 s: many
        pd.testing.assert_series_equal(by.compute().sort_index(),
                                       df.merge(names, on="g").groupby(["name", "g"]).x.sum())


def test_distinct_rows_are_the_sample_s_where_few_or_all_else_scaled(table):
    _, path, _, names_path = table
    fs, files = parquet.files_of(path)
    row_groups = [g for f in files for g in footers.footer(fs, f).row_groups]
    assert len(row_groups) == 24
    assert footers.distinct(fs, row_groups, ["g"]) == 7  # 15,000 rows sampled: 7 values, all seen
    sampled_k = footers.distinct(fs, row_groups, ["k"])
    assert 60_000 * 0.8 < sampled_k <= ROWS  # the sample's share of distinct rows, scaled to the table
    assert footers.distinct(fs, row_groups, ["g", "k"]) >= sampled_k
    fs, files = parquet.files_of(names_path)
    assert footers.distinct(fs, list(footers.footer(fs, files[0]).row_groups), ["name"]) == 7


def test_a_filter_by_an_aggregate_of_few_groups_keeps_its_rows_aligned(planned_pandas, table):
    """TPC-H's query 15: the groups whose sum is the largest, joined to a table of their names."""
    df, path, names, names_path = table
    frame = read(path)
    frame = frame[(frame.s >= 1000) & (frame.s < 11000)]  # a column that the rest leaves out
    sums = frame.assign(y=frame.x * 2).groupby("g").y.sum().reset_index()
    top = sums[sums.y == sums.y.max()]
    named = parquet.read_parquet(names_path, None, engine="pandas", partition_bytes=10**9).rename(columns={"g": "id"})
    named = named.merge(top, left_on="id", right_on="g")[["id", "name", "y"]].sort_values("id")
    with dask.config.set({"dataframe.shuffle.method": "tasks"}):
        got = named.compute()
    kept = df[(df.s >= 1000) & (df.s < 11000)].assign(y=lambda d: d.x * 2).groupby("g").y.sum().reset_index()
    want = names.rename(columns={"g": "id"}).merge(kept[kept.y == kept.y.max()], left_on="id", right_on="g")
    pd.testing.assert_frame_equal(got.reset_index(drop=True), want[["id", "name", "y"]])
