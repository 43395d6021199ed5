"""Parquet read in partitions planned from footers (dask_gpu.dataframe.parquet, .footers), with pandas partitions
on the CPU: the plan's sizes, row groups skipped by statistics, what filters keep, and the answers."""

import os

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dask_gpu.dataframe import footers, parquet

ROWS = 120_000  # 8 columns of 8 bytes a value: 7.7 MB in memory


def table(rows=ROWS, seed=0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    frame = {"k": np.arange(rows), "day": pd.Timestamp("2000-01-01") + pd.to_timedelta(np.arange(rows) // 100, "D"),
             "g": rng.integers(0, 5, rows), "s": rng.choice(["red", "green", "blue"], rows)}
    frame.update({f"x{i}": rng.random(rows) for i in range(4)})
    return pd.DataFrame(frame)


def write(df: pd.DataFrame, folder, files=1, row_group=10_000):
    os.makedirs(folder, exist_ok=True)
    for i, part in enumerate(np.array_split(np.arange(len(df)), files)):
        pq.write_table(pa.Table.from_pandas(df.iloc[part], preserve_index=False), os.path.join(folder, f"{i}.parquet"),
                       row_group_size=row_group)
    return str(folder)


def read(path, target=2_000_000, gpus=1, columns=None):
    return parquet.read_parquet(path, columns, engine="pandas", partition_bytes=target, gpus=gpus)


def reads(collection) -> list:
    """The reads in ``collection``'s optimized expression, fused ones included."""
    found, stack = {}, [collection.optimize(fuse=False).expr]
    while stack:
        expr = stack.pop()
        if isinstance(expr, parquet.ReadParquet):
            found[expr._name] = expr
        stack.extend(expr.dependencies())
    return list(found.values())


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    df = table()
    return df, write(df, tmp_path_factory.mktemp("one"))


def test_a_table_is_read_in_partitions_of_about_the_target(data):
    df, path = data
    full = read(path, target=2_000_000)
    assert full.npartitions == 4  # 7.7 MB: 8 bytes a value, the strings included
    rows = full.map_partitions(len).compute().tolist()
    assert sum(rows) == ROWS and all(n % 10_000 == 0 for n in rows) and max(rows) - min(rows) <= 10_000
    pd.testing.assert_frame_equal(full.compute().reset_index(drop=True), df, check_dtype=False)
    assert read(path, target=2_000_000, columns=["x0"]).npartitions == 1  # one column of eight: one partition
    assert read(path, target=1).npartitions == 12  # as many as the row groups, none split


def test_partitions_are_as_many_as_the_target_fits_nearest_and_cut_evenly():
    """Twelve row groups of equal size, a target a hair under two of them: six partitions of two (not seven, some of
    one); row groups of unequal size: each cut where its share of the whole falls nearest."""
    groups = [footers.RowGroup("f", i, 100, {"x": 1_000}) for i in range(12)]
    planned = parquet.plan(groups, ["x"], None, 1_999, 1, 1.0)
    assert [len(indices) for ((_, indices),) in planned] == [2] * 6
    uneven = [footers.RowGroup("f", i, 100, {"x": size}) for i, size in enumerate([900, 100, 100, 900, 1000])]
    planned = parquet.plan(uneven, ["x"], None, 1_000, 1, 1.0)
    assert [sum(uneven[i].sizes["x"] for i in indices) for ((_, indices),) in planned] == [1000, 1000, 1000]


def test_more_than_one_partition_is_a_multiple_of_the_gpus(data):
    _, path = data
    assert read(path, target=2_000_000, gpus=3).npartitions == 6
    assert read(path, target=50_000_000, gpus=3).npartitions == 1  # a small table stays whole: broadcast


def test_a_read_of_more_than_the_target_is_spread_over_the_gpus(data):
    """What one partition would keep, read from more than the target, is read by each GPU in part: one GPU reading
    it all would leave the others waiting. A read of less stays one partition."""
    df, path = data
    for gpus, partitions in ((1, 1), (3, 3)):
        full = read(path, target=2_000_000, gpus=gpus)
        few = full[full.x0 < 0.05]  # 5% of 7.7 MB read
        (one,) = reads(few)
        assert one.npartitions == partitions
        assert few.x1.sum().compute() == pytest.approx(df[df.x0 < 0.05].x1.sum())
    assert read(path, target=2_000_000, gpus=3, columns=["x0"]).npartitions == 1  # 1 MB read
    groups = [footers.RowGroup("f", i, 100, {"x": 1_000}) for i in range(12)]
    assert len(parquet.plan(groups, ["x"], None, 5_000, 4, 0.01)) == 4
    assert len(parquet.plan(groups, ["x"], None, 5_000, 1, 0.01)) == 1


def test_a_whole_read_is_all_of_the_read_in_each_of_its_partitions(data):
    from dask.dataframe.dask_expr import new_collection

    df, path = data
    full = read(path, target=2_000_000, gpus=3)
    few = full[full.x0 < 0.05]
    for copies in (1, 3):
        whole = new_collection(parquet.whole(few.expr, copies))
        assert whole.npartitions == copies
        assert whole.map_partitions(len).compute().tolist() == [int((df.x0 < 0.05).sum())] * copies


def test_the_plan_is_the_same_for_every_layout_of_the_same_data(data, tmp_path):
    df, _ = data
    layouts = {"small files": write(df, tmp_path / "small", files=24, row_group=5_000),
               "one file, large row groups": write(df, tmp_path / "large", files=1, row_group=30_000),
               "one file, small row groups": write(df, tmp_path / "many", files=1, row_group=1_000)}
    target = 3_000_000  # a row group is never split: the largest are 2.3 MB
    for name, path in layouts.items():
        full = read(path, target=target)
        sizes = full.map_partitions(lambda p: int(p.memory_usage(deep=False).sum())).compute().tolist()
        assert all(target / 2 <= size <= target * 2 for size in sizes), (name, sizes)
        assert full.x0.sum().compute() == pytest.approx(df.x0.sum())


def test_filters_are_pushed_into_the_read_and_stay_above_it(data):
    df, path = data
    full = read(path)
    got = full[(full.day >= pd.Timestamp("2000-03-01")) & (full.s == "red")]
    (one,) = reads(got)
    assert (("day", ">=", pd.Timestamp("2000-03-01")), ("s", "==", "red")) in one.filters
    want = df[(df.day >= pd.Timestamp("2000-03-01")) & (df.s == "red")]
    pd.testing.assert_frame_equal(got.compute().reset_index(drop=True), want.reset_index(drop=True),
                                  check_dtype=False)
    assert full[full.s.isin(["red"])].x0.sum().compute() == pytest.approx(df[df.s == "red"].x0.sum())


def test_row_groups_that_statistics_rule_out_are_not_read(data):
    df, path = data
    full = read(path, target=1)  # a partition a row group
    late = full[full.k >= 100_000]  # k is sorted: the last two row groups of twelve
    (one,) = reads(late)
    assert one.npartitions == 2 and late.k.count().compute() == 20_000
    days = full[full.day < pd.Timestamp("2000-01-05")]  # 400 rows, in the first row group
    assert reads(days)[0].npartitions == 1 and len(days.compute()) == 400


def test_what_a_filter_keeps_sizes_the_partitions(data):
    """A large table filtered to a little is one partition: dask joins it by broadcasting it, and reduces and
    sorts it where it is."""
    df, path = data
    full = read(path, target=2_000_000)
    few = full[full.x0 < 0.05]  # 5% of the rows, everywhere in the file: no row group is skipped
    (one,) = reads(few)
    assert full.npartitions == 4 and one.npartitions == 1
    big = read(path, target=2_000_000)
    joined = big.merge(few[["k", "x1"]].rename(columns={"x1": "y"}), on="k")
    lowered = joined.optimize(fuse=False).expr
    kinds = {type(e).__name__ for e in lowered.walk()}
    assert "BlockwiseMerge" in kinds and not kinds & {"HashJoinP2P", "Shuffle", "RearrangeByColumn"}
    want = df.merge(df[df.x0 < 0.05][["k", "x1"]].rename(columns={"x1": "y"}), on="k")
    assert joined.y.sum().compute() == pytest.approx(want.y.sum())


def test_a_filter_the_read_cannot_use_keeps_the_partitions_and_the_answer(data):
    df, path = data
    full = read(path, target=2_000_000)
    odd = full[(full.k % 2 == 1) & (full.x0 < 0.5)]  # the first term is no comparison of a column
    (one,) = reads(odd)
    assert one.filters == ((("x0", "<", 0.5),),)
    assert odd.x1.sum().compute() == pytest.approx(df[(df.k % 2 == 1) & (df.x0 < 0.5)].x1.sum())
    either = full[(full.x0 < 0.1) | (full.s == "red")]
    assert reads(either)[0].filters == ((("s", "==", "red"),), (("x0", "<", 0.1),))
    assert len(either.compute()) == ((df.x0 < 0.1) | (df.s == "red")).sum()


def test_a_length_comes_from_the_footers(data):
    _, path = data
    from dask_gpu import internals

    full = read(path)
    assert len(full) == ROWS
    assert type(internals.Len(full.expr).simplify()).__name__ == "Literal"  # nothing read
    assert type(internals.Len(full[full.k < 5].expr).simplify()).__name__ != "Literal"


def test_footers_are_read_once_per_version_of_a_file(tmp_path):
    path = write(table(1000), tmp_path / "t")
    assert len(read(path)) == 1000
    pq.write_table(pa.Table.from_pandas(table(3000), preserve_index=False), os.path.join(path, "0.parquet"))
    os.utime(os.path.join(path, "0.parquet"), (1, 1))  # another time, whatever the clock's resolution
    assert len(read(path)) == 3000


@pytest.mark.parametrize("case", ["named index", "categories", "hive folders", "other schemas"])
def test_files_this_reader_does_not_take_go_to_dask_cudf(tmp_path, case):
    df = table(1000)
    if case == "named index":
        df.set_index("k").to_parquet(tmp_path / "0.parquet")
    elif case == "categories":
        df.astype({"s": "category"}).to_parquet(tmp_path / "0.parquet")
    elif case == "hive folders":
        df.to_parquet(tmp_path, partition_cols=["g"])
    else:
        df.to_parquet(tmp_path / "0.parquet", index=False)
        df[["k"]].to_parquet(tmp_path / "1.parquet", index=False)
    assert read(str(tmp_path)) is None


def test_the_sample_tells_what_filters_keep(data):
    import fsspec

    _, path = data
    fs = fsspec.filesystem("file")
    _, files = parquet.files_of(path)
    groups = footers.footer(fs, files[0]).row_groups
    share = footers.selectivity(fs, groups, ((("x0", "<", 0.25),),))
    assert 0.2 < share < 0.3
    assert footers.selectivity(fs, groups, ((("nothing", "<", 0.25),),)) == 1.0  # not a column: no estimate
    assert footers.selectivity(fs, groups, None) == 1.0


def test_filters_on_the_same_columns_are_tried_on_rows_read_once(data, monkeypatch):
    import fsspec

    _, path = data
    fs = fsspec.filesystem("file")
    _, files = parquet.files_of(path)
    groups = [g for file in files for g in footers.footer(fs, file).row_groups]
    reads = []
    first_rows = footers._first_rows
    monkeypatch.setattr(footers, "_first_rows", lambda *args: reads.append(args[1]) or first_rows(*args))
    monkeypatch.setattr(footers, "_samples", {})
    low, high = (footers.selectivity(fs, groups, ((("x0", op, 0.25),),)) for op in ("<", ">="))
    assert 0.2 < low < 0.3 and 0.7 < high < 0.8
    assert len(reads) == min(footers.SAMPLES, len(groups)) == len({(g.path, g.index) for g in reads})  # spread, once


def test_the_gpu_backend_reads_with_this_reader(simulate, pandas_reader, data):
    from distributed import Client

    from dask_gpu import LocalCUDACluster

    df, path = data
    simulate(["80GB", "80GB"])
    with dask.config.set({"gpu.partition-size": 1_000_000}), \
            LocalCUDACluster(dashboard_address=False) as cluster, Client(cluster):
        with dask.config.set({"dataframe.backend": "gpu"}):
            full = dd.read_parquet(path)
            assert full.npartitions == 8 and not pandas_reader  # 7.7 MB, in a multiple of the 2 GPUs
            assert full.x0.sum().compute() == pytest.approx(df.x0.sum())
            series = dd.read_parquet(path, columns="x0")
            assert isinstance(series, dd.Series) and series.sum().compute() == pytest.approx(df.x0.sum())
            assert dd.read_parquet(path, filters=[("k", "<", 10)]).k.count().compute() == 10
            assert len(pandas_reader) == 1  # a read with filters= goes to dask-cudf's reader


def test_projections_of_one_read_keep_its_partitions(data):
    """The partitions depend on the columns read; what a query uses of one read must be read together, or
    blockwise work would meet partitions that do not match: a column computed from some columns beside another
    (as TPC-H's query 21 does), and the length of a filtered read."""
    df, path = data
    full = read(path, target=1_000_000)
    late = full.k.where((full.g > 2) & (full.x0 > full.x1))  # four columns, against one
    got = full[["k"]].assign(late=late).compute()
    expected = df.k.where((df.g > 2) & (df.x0 > df.x1))
    np.testing.assert_array_equal(got.late.to_numpy(), expected.to_numpy())
    day = df.day.quantile(0.9)
    assert len(full[full.day >= day]) == (df.day >= day).sum()
    assert full[full.day >= day].index.size.compute() == (df.day >= day).sum()


def test_a_query_of_no_column_keeps_the_rows(data):
    """A new column of constants reads none of the files' columns; the partitions still hold every row."""
    df, path = data
    full = read(path, target=2_000_000)
    ones = full.assign(one=1).one
    (one,) = reads(ones)
    assert one.operand("columns") == []
    assert ones.cumsum().compute().tolist() == list(range(1, ROWS + 1))


def test_a_read_travels_with_its_plan_and_without_its_footers(data):
    import pickle

    _, path = data
    full = read(path, target=2_000_000)
    expr = full.expr
    assert expr.npartitions == 4 and len(expr._footers[0].row_groups) == 12
    cached = expr.__reduce__()[1][-1]  # what dask's pickling of an expression keeps of its cached properties
    assert "_plan" in cached and "_footers" not in cached and "_fs" not in cached
    copy = pickle.loads(pickle.dumps(expr))
    assert copy._name == expr._name and copy.npartitions == 4


def test_the_rows_a_filter_keeps_are_found_once_for_each_files_and_filters(data, monkeypatch):
    """Reads of other columns under the same filters share the row groups picked and the rows' share."""
    _, path = data
    asked = []
    monkeypatch.setattr(parquet, "candidates", lambda groups, filters: asked.append(filters) or list(groups))
    monkeypatch.setattr(parquet, "_plans", {})
    monkeypatch.setattr(parquet, "_kept_rows", {})
    full = read(path)
    red = full[full.s == "red"]
    for columns in (["x0"], ["x0", "x1"], ["k"]):
        assert reads(red[columns])[0].npartitions >= 1
    blue = full[full.s == "blue"]
    assert reads(blue[["x0"]])[0].npartitions >= 1
    assert sorted(set(asked), key=asked.index) == asked and len(asked) == 2


def test_a_plan_is_made_once_for_each_files_columns_filters_and_sizing(data, monkeypatch):
    """The optimizer makes a read anew for each projection and filter it pushes in: reads of the same files,
    columns, filters and sizing share one plan; another of these gets a plan of its own."""
    _, path = data
    made = []
    monkeypatch.setattr(parquet, "plan", lambda *args: made.append(args[1:]) or ((("f", (0,)),),))
    monkeypatch.setattr(parquet, "_plans", {})
    assert read(path, columns=["k", "g"]).npartitions == 1 and len(made) == 1
    again = read(path, columns=["k", "g"]).expr.substitute_parameters({"_partitions": [0]})  # another read
    assert again._plan == ((("f", (0,)),),) and len(made) == 1
    for other in (read(path, columns=["k"]), read(path, columns=["k", "g"], target=1_000_000),
                  read(path, columns=["k", "g"], gpus=2)):
        assert other.npartitions == 1
    assert [args[0] for args in made] == [["k", "g"], ["k"], ["k", "g"], ["k", "g"]]
    assert [args[2:4] for args in made][2:] == [(1_000_000, 1), (2_000_000, 2)]


def test_a_kept_value_is_made_once_and_a_full_cache_starts_again(monkeypatch):
    monkeypatch.setattr(footers, "LIMIT", 3)
    cache, made = {}, []
    assert footers.kept(cache, "a", lambda: made.append("a") or 1) == 1
    assert footers.kept(cache, "a", lambda: made.append("again") or 2) == 1 and made == ["a"]
    # a value whose making keeps another of its own (a projection's meta keeps the whole frame's first)
    assert footers.kept(cache, "b", lambda: footers.kept(cache, "c", lambda: 3) + 1) == 4 and len(cache) == 3
    assert footers.kept(cache, "d", lambda: 5) == 5 and cache == {"d": 5}
    assert footers.kept(cache, "e", lambda: footers.kept(cache, "f", lambda: 6)) == 6 and len(cache) <= 3
