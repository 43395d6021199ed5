"""Partitions that hold disjoint ranges of a sorted key (dask_gpu.dataframe.partitioning, .parquet), with pandas
partitions on the CPU: group-bys and joins of them without shuffles, and joins that must not trust them."""

import dask
import numpy as np
import pandas as pd
import pytest

from dask_gpu.dataframe import parquet, partitioning, planner

SHUFFLES = {"TaskShuffle", "DiskShuffle", "P2PShuffle", "HashJoinP2P", "AssignPartitioningIndex"}


def write(frame, path, row_group):
    frame.to_parquet(path, row_group_size=row_group)
    return str(path)


def read(path, target=72_000, gpus=4):
    return parquet.read_parquet(path, None, engine="pandas", partition_bytes=target, gpus=gpus)


@pytest.fixture
def sorted_files(tmp_path):
    """Lines of orders in order (3 lines an order: row groups of 1,000 split some orders), their orders, and the
    same lines in another order."""
    rng = np.random.default_rng(2)
    lines = pd.DataFrame({"k": np.arange(12_000) // 3, "s": rng.integers(0, 50, 12_000), "x": rng.random(12_000)})
    orders = pd.DataFrame({"k": np.arange(4_000), "o": rng.random(4_000)})
    shuffled = lines.sample(frac=1, random_state=0).reset_index(drop=True)
    return (lines, orders, write(lines, tmp_path / "lines.parquet", 1_000),
            write(orders, tmp_path / "orders.parquet", 300), write(shuffled, tmp_path / "shuffled.parquet", 1_000))


def kinds(collection) -> set:
    return {type(e).__name__ for e in planner.optimize(collection.expr, fuse=False).walk()}


def test_a_read_of_sorted_files_holds_disjoint_ranges_of_its_key(sorted_files):
    """Cut only between row groups that share no order: each order's lines in one partition, which the read
    claims as a shuffle on the key would."""
    lines, _, path, _, shuffled = sorted_files
    full = read(path)
    assert full.npartitions == 4
    key, ranges = full.expr.key_ranges
    assert key == "k" and all(high < low for (_, high), (low, _) in zip(ranges, ranges[1:]))
    keys = full.map_partitions(lambda p: frozenset(p.k)).compute().tolist()
    assert all(not a & b for i, a in enumerate(keys) for b in keys[i + 1:])
    assert full.expr.unique_partition_mapping_columns_from_shuffle == {"k"}
    other = read(shuffled).expr
    assert other.key_ranges is None and not other.unique_partition_mapping_columns_from_shuffle
    assert read(path, target=10**9).expr.key_ranges is None  # one partition


def test_a_cut_falls_between_row_groups_that_share_no_value_of_the_key():
    """Ten row groups, each sharing its last key with the next but after the fourth and the eighth: two partitions
    cut after the fourth, not in the middle; a cut further than a fifth of a partition from its goal stays."""
    def groups(clean):
        bounds = [(10 * i, 10 * i + (9 if i in clean else 10)) for i in range(10)]
        return [parquet.footers.RowGroup("f", i, 100, {"k": 800}, positions={"k": 0}, _nulls={"k": 0},
                                         _bounds={"k": bounds[i]}) for i in range(10)]

    assert parquet.sort_key(groups((3, 7)), ["k"]) == "k"
    (first, second) = parquet.plan(groups((3, 7)), ["k"], None, 4_000, 1, 1.0)
    assert first == (("f", (0, 1, 2, 3)),) and second[0][1][0] == 4
    (first, second) = parquet.plan(groups((1, 7)), ["k"], None, 4_000, 1, 1.0)
    assert first == (("f", (0, 1, 2, 3, 4)),)
    unsorted = groups((3, 7))[:3] + groups((3, 7))[4:5] + groups((3, 7))[3:4]
    assert parquet.sort_key(unsorted, ["k"]) is None
    constant = [parquet.footers.RowGroup("f", i, 100, {"c": 800}, _bounds={"c": (1, 1)}, _nulls={"c": 0})
                for i in range(3)]
    assert parquet.sort_key(constant, ["c"]) is None  # no run above another


def test_a_key_with_nulls_is_no_sort_key(tmp_path):
    """Each null would be in its partition: a group-by keeping nulls, or a join matching them, needs a shuffle."""
    frame = pd.DataFrame({"k": pd.array(np.arange(12_000) // 3, dtype="Float64"), "x": np.ones(12_000)})
    frame.loc[[5, 7_000], "k"] = None
    with_nulls = read(write(frame, tmp_path / "nulls.parquet", 1_000), target=48_000)
    assert with_nulls.npartitions == 4 and with_nulls.expr.key_ranges is None


def test_a_group_by_and_drop_duplicates_on_the_key_need_no_shuffle(planned_pandas, sorted_files):
    lines, _, path, _, shuffled = sorted_files
    with dask.config.set({"dataframe.shuffle.method": "tasks"}):
        for frame, shuffles in ((read(path), False), (read(shuffled), True)):
            counts = frame.groupby("k").s.nunique()
            unique = frame[["k"]].drop_duplicates()
            assert bool(kinds(counts) & SHUFFLES) == shuffles and bool(kinds(unique) & SHUFFLES) == shuffles
            pd.testing.assert_series_equal(counts.compute().sort_index(), lines.groupby("k").s.nunique())
            assert sorted(unique.compute().k) == sorted(lines.k.unique())


def test_parts_of_one_read_are_joined_partition_by_partition(planned_pandas, sorted_files):
    """TPC-H's query 21 in small: a group-by of the lines by order, joined back to some of the lines."""
    lines, _, path, _, _ = sorted_files
    full = read(path)
    counts = full.groupby("k").s.nunique().to_frame("suppliers").reset_index()
    some = full[full.x > 0.5]
    joined = some.merge(counts, on="k")
    with dask.config.set({"dataframe.shuffle.method": "tasks"}):
        assert not kinds(joined) & SHUFFLES and "BlockwiseMerge" in kinds(joined)
        got = joined.compute()
    want = lines[lines.x > 0.5].merge(lines.groupby("k").s.nunique().to_frame("suppliers").reset_index(), on="k")
    pd.testing.assert_frame_equal(got.sort_values(["k", "s", "x"]).reset_index(drop=True),
                                  want.sort_values(["k", "s", "x"]).reset_index(drop=True))


@pytest.mark.parametrize("other", ["another sorted read", "a hashed frame"])
def test_a_join_with_a_side_partitioned_otherwise_shuffles(planned_pandas, sorted_files, other):
    """Both sides claim the key, in ranges cut elsewhere, or hashed: dask would pair partition i with partition i,
    and lose the rows whose key is elsewhere on the other side."""
    lines, orders, path, orders_path, _ = sorted_files
    full = read(path)
    if other == "another sorted read":
        right = read(orders_path, target=16_000)
        assert right.npartitions == full.npartitions and right.expr.key_ranges[1] != full.expr.key_ranges[1]
    else:
        right = read(orders_path, target=10**9).shuffle("k", npartitions=full.npartitions)
    joined = full.merge(right, on="k", how="left")
    assert partitioning.misread(joined.simplify().expr)
    with dask.config.set({"dataframe.shuffle.method": "tasks"}):
        assert kinds(joined) & SHUFFLES
        got = joined.compute()
    assert len(got) == len(lines) and got.o.notna().all()
    want = lines.merge(orders, on="k", how="left")
    pd.testing.assert_frame_equal(got.sort_values(["k", "s", "x"]).reset_index(drop=True),
                                  want.sort_values(["k", "s", "x"]).reset_index(drop=True))


def test_a_join_hashed_with_a_side_of_one_partition_loses_the_ranges(planned_pandas, sorted_files):
    """A right join cannot send its right side of one partition to each partition of the left: dask hashes both,
    and what it makes holds no range of the key, whatever the left side held."""
    lines, orders, path, orders_path, _ = sorted_files
    full = read(path)
    hashed = full.merge(read(orders_path, target=10**9), on="k", how="right")
    counts = full.groupby("k").s.nunique().to_frame("suppliers").reset_index()
    joined = hashed.merge(counts, on="k")
    assert partitioning.ranges(hashed.simplify().expr, "k") is None
    assert not partitioning.co_partitioned(joined.simplify().expr)
    with dask.config.set({"dataframe.shuffle.method": "tasks"}):
        got = joined.compute()
    want = lines.merge(orders, on="k", how="right").merge(
        lines.groupby("k").s.nunique().to_frame("suppliers").reset_index(), on="k")
    assert len(got) == len(want)
