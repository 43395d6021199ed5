"""The planner's rules where dask lowers joins and sorts, and optimize() kept by a later compute
(dask_gpu.dataframe.planner, .collections), with pandas partitions on the CPU."""

import collections as collections_module

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

from dask_gpu.dataframe import collections, planner


@pytest.fixture
def frames():
    rng = np.random.default_rng(0)
    big = pd.DataFrame({"k": rng.integers(0, 1000, 50_000), "x": rng.random(50_000)})
    small = pd.DataFrame({"k": np.arange(1000), "y": rng.random(1000)})
    return big, small


def kinds(collection) -> set:
    return {type(e).__name__ for e in collection.optimize(fuse=False).expr.optimized.walk()}


def test_a_broadcast_side_of_several_partitions_is_made_one(planned_pandas, frames):
    """dask broadcasts the 2 partitions against the 20 and takes the join's output as partitioned by the key:
    the group-by's shuffle is skipped, and each key comes out of several partitions."""
    big, small = frames
    joined = dd.merge(dd.from_pandas(big, npartitions=20), dd.from_pandas(small, npartitions=2), on="k")
    assert isinstance(joined.expr, planner.PlannedMerge)
    with dask.config.set({"dataframe.shuffle.method": "tasks"}):
        sums = joined.groupby("k").x.sum()
        assert "BroadcastJoin" not in kinds(sums) and "BlockwiseMerge" in kinds(sums)
        got = sums.compute()
    want = big.merge(small, on="k").groupby("k").x.sum()
    pd.testing.assert_series_equal(got.sort_index(), want.sort_index())


def test_a_join_of_two_large_sides_is_dask_s(planned_pandas, frames):
    big, _ = frames
    joined = dd.from_pandas(big, npartitions=8).merge(dd.from_pandas(big, npartitions=8), on="k")
    with dask.config.set({"dataframe.shuffle.method": "tasks"}):
        assert "BlockwiseMerge" in kinds(joined) and "RepartitionToFewer" not in kinds(joined)
        assert len(joined) == len(big.merge(big, on="k"))


@pytest.fixture
def files(tmp_path):
    """A large table and a small one as parquet files, of 8 and 4 row groups."""
    rng = np.random.default_rng(1)
    big = pd.DataFrame({"k": rng.integers(0, 4000, 80_000), "x": rng.random(80_000), "g": rng.integers(0, 7, 80_000)})
    small = pd.DataFrame({"k": np.arange(4000), "y": rng.random(4000), "z": rng.random(4000)})
    for name, frame in (("big", big), ("small", small)):
        frame.to_parquet(tmp_path / f"{name}.parquet", row_group_size=len(frame) // (8 if name == "big" else 4))
    return big, small, str(tmp_path / "big.parquet"), str(tmp_path / "small.parquet")


def read(path, target, gpus=4, columns=None):
    from dask_gpu.dataframe import parquet

    return parquet.read_parquet(path, columns, engine="pandas", partition_bytes=target, gpus=gpus)


@pytest.mark.parametrize("how", ["inner", "left"])
def test_a_small_side_is_read_whole_where_each_partition_of_the_other_is(planned_pandas, files, how):
    """Both sides in several partitions, one keeping at most a partition's target: each task of the other side reads
    it whole, which no shuffle or transfer precedes; its output is partitioned as the large side was."""
    big, small, big_path, small_path = files
    large = read(big_path, 400_000)
    few = read(small_path, 60_000)
    few = few[few.y < 0.5]  # reads 96 KB, keeps half of it
    assert large.npartitions == 8 and few.npartitions == 4
    joined = large.merge(few, on="k", how=how).simplify()  # the filter in the read
    assert isinstance(joined.expr, planner.PlannedMerge) and joined.expr._read_whole == "right"
    assert joined.npartitions == 8 and not joined.expr.unique_partition_mapping_columns_from_shuffle
    with dask.config.set({"dataframe.shuffle.method": "tasks"}):
        assert "BlockwiseMerge" in kinds(joined) and not kinds(joined) & {"HashJoinP2P", "TaskShuffle", "Shuffle"}
        sums = joined.groupby("k").x.sum()
        assert kinds(sums) & {"TaskShuffle", "TreeReduce"}  # the join's output is not partitioned by its key
        got = sums.compute()
    want = big.merge(small[small.y < 0.5], on="k", how=how).groupby("k").x.sum()
    pd.testing.assert_series_equal(got.sort_index(), want.sort_index())


def test_a_side_read_whole_passes_on_no_partitioning_of_its_own(planned_pandas, files):
    """A side that dask would shuffle by ``y`` (a hash join, as the user asked), read whole: the output's
    partitions are the other side's, not partitioned by ``y``."""
    big, small, big_path, small_path = files
    few = read(small_path, 60_000)
    few = few[few.y < 0.5]
    side = few[["k", "y"]].merge(few[["y", "z"]], on="y", broadcast=False).simplify()
    assert side.expr.unique_partition_mapping_columns_from_shuffle == {"y"}
    joined = read(big_path, 400_000).merge(side, on="k").simplify()
    assert joined.expr._read_whole == "right" and not joined.expr.unique_partition_mapping_columns_from_shuffle
    with dask.config.set({"dataframe.shuffle.method": "tasks"}):
        got = joined.groupby("y").x.sum().compute()
    few_pd = small[small.y < 0.5]
    want = big.merge(few_pd[["k", "y"]].merge(few_pd[["y", "z"]], on="y"), on="k").groupby("y").x.sum()
    pd.testing.assert_series_equal(got.sort_index(), want.sort_index())


def test_a_side_that_is_large_or_not_of_reads_keeps_dask_s_join(planned_pandas, files):
    big, small, big_path, small_path = files
    large = read(big_path, 400_000)
    for other in (read(small_path, 24_000),  # keeps 4 times its target
                  dd.from_pandas(small, npartitions=4)):  # not of reads
        joined = large.merge(other, on="k").simplify()
        assert joined.expr._read_whole is None
        with dask.config.set({"dataframe.shuffle.method": "tasks"}):
            assert "TaskShuffle" in kinds(joined)
            assert len(joined) == len(big.merge(small, on="k"))
    few = read(small_path, 60_000)
    few = few[few.y < 0.5]
    for left, right, how, whole in ((large, few, "outer", None), (large, few, "right", None),
                                    (few, large, "right", "left")):
        assert left.merge(right, on="k", how=how).simplify().expr._read_whole == whole


def side_reads(graph, path) -> list:
    """For each task of ``graph``, how many reads of ``path`` it makes, fused ones included."""
    from dask_gpu.dataframe import parquet

    def count(node):
        if isinstance(node, dict):
            return sum(count(value) for value in node.values())
        found = getattr(node, "func", None) is parquet.read_pieces and node.args[0][0][0] == path
        return found + sum(count(a) for a in getattr(node, "args", ()) if isinstance(a, dict) or hasattr(a, "func"))

    return [count(task) for task in graph.values()]


@pytest.mark.parametrize("gpus", [1, 2])
def test_a_side_of_one_partition_is_read_once_on_each_gpu(planned_pandas, files, gpus):
    """dask fuses a side of one partition into each task of the other side, which reads it again; read enough to
    matter, it is a task of its own on each GPU, and each task of the join takes the copy of its run."""
    from dask_gpu.dataframe import parquet

    big, small, big_path, small_path = files
    large = read(big_path, 240_000, gpus=gpus)
    side = read(small_path, 1_000_000, gpus=gpus)
    assert large.npartitions == 8 and side.npartitions == 1
    joined = large.merge(side, on="k")
    optimized = planner.optimize(joined.expr)
    graph = dict(optimized.__dask_graph__())
    reads = side_reads(graph, small_path)
    assert sum(reads) == gpus and max(reads) == 1  # one read of the side for each GPU
    stages = [key for key in graph if key[0].startswith("stage-")]
    assert len(stages) == gpus
    joins = {key: {dep for dep in graph[key].dependencies if dep in stages} for key in graph
             if reads[list(graph).index(key)] == 0 and key[0].startswith("readparquet")}
    assert len(joins) == 8 and all(len(deps) == 1 for deps in joins.values())
    assert [next(iter(joins[key]))[1] for key in sorted(joins, key=lambda k: k[1])] == [i * gpus // 8 for i in range(8)]
    pd.testing.assert_frame_equal(in_order(joined.compute()), in_order(big.merge(small, on="k")))
    assert parquet.copies(read(small_path, 64_000_000, gpus=gpus).expr, 8) == 0  # reads under 1/16 of its target
    assert parquet.copies(side.expr, gpus) == 0  # no more tasks than GPUs: each task reads it once anyway


def test_the_copies_of_a_side_are_read_once_each_on_a_cluster(planned_pandas, files):
    """On two workers, the plan's graph as the scheduler makes it: each copy read once, and the answer dask's."""
    from distributed import Client, LocalCluster, get_task_stream

    big, small, big_path, small_path = files
    joined = read(big_path, 240_000, gpus=2).merge(read(small_path, 1_000_000, gpus=2), on="k")
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster, \
            Client(cluster) as client, get_task_stream(client) as stream:
        got = client.compute(joined).result()
    pd.testing.assert_frame_equal(in_order(got), in_order(big.merge(small, on="k")))
    ran = [(task["key"][0].split("-")[0], task["worker"]) for task in stream.data]
    assert sorted(name for name, _ in ran).count("stage") == 2


def test_a_small_sort_is_made_in_one_partition_without_a_pass_for_its_divisions(planned_pandas, frames):
    big, _ = frames
    df = dd.from_pandas(big, npartitions=planner.SORT_PARTITIONS)
    ordered = df.sort_values("x")
    assert ordered.npartitions == 1 and not kinds(ordered) & {"Shuffle", "TaskShuffle", "P2PShuffle"}
    pd.testing.assert_frame_equal(ordered.compute(), big.sort_values("x"))
    larger = dd.from_pandas(big, npartitions=planner.SORT_PARTITIONS + 1).sort_values("x")
    assert larger.npartitions > 1 and larger.compute().x.is_monotonic_increasing  # dask's sort


@pytest.mark.parametrize("method", ["tasks", "disk"])
def test_no_shuffle_of_one_partition_into_one(planned_pandas, frames, method):
    """``nunique``'s group-by shuffles its chunks into as many partitions as its input has: from one into one, the
    chunks stay where they are; from several, dask's shuffle."""
    big, _ = frames
    shuffles = {"TaskShuffle", "DiskShuffle", "P2PShuffle", "SimpleShuffle", "AssignPartitioningIndex"}
    want = big.groupby("k").x.nunique()
    with dask.config.set({"dataframe.shuffle.method": method}):
        one = dd.from_pandas(big, npartitions=1).groupby("k").x.nunique()
        assert {type(e).__name__ for e in one.expr.optimize(fuse=False).walk()} & shuffles  # dask's plan
        assert not kinds(one) & shuffles  # ours
        pd.testing.assert_series_equal(one.compute().sort_index(), want)
        several = dd.from_pandas(big, npartitions=3).groupby("k").x.nunique()
        assert kinds(several) & shuffles
        pd.testing.assert_series_equal(several.compute().sort_index(), want)


REDUCTIONS = {
    "sum of a filter": lambda df: df[df.x > 0.5].x.sum(),
    "mean": lambda df: df.x.mean(),
    "frame sum": lambda df: df[["k", "x"]].sum(),
    "group-by": lambda df: df.groupby("k").x.sum().reset_index(),
    "group-by of two aggregates": lambda df: df.groupby("k").agg({"x": ["sum", "count"]}),
    "nlargest": lambda df: df.nlargest(5, "x"),
}


@pytest.mark.parametrize("name", REDUCTIONS)
def test_no_tree_of_one_partition(planned_pandas, frames, name):
    """A reduction of one partition is one task with its input and what follows it: no tree, no stage of its own.
    Of several partitions, dask's tree."""
    big, _ = frames
    make = REDUCTIONS[name]
    one = make(dd.from_pandas(big, npartitions=1))
    assert "TreeReduce" in {type(e).__name__ for e in one.expr.optimize(fuse=False).walk()}  # dask's plan
    assert "TreeReduce" not in {type(e).__name__ for e in planned(one).walk()}  # ours
    assert len(dict(planned(one, fuse=True).__dask_graph__())) == 2  # the partition made from pandas, and the rest
    several = make(dd.from_pandas(big, npartitions=3))
    assert "TreeReduce" in {type(e).__name__ for e in planned(several).walk()}
    want = make(big)
    for got in (one.compute(), several.compute()):
        if isinstance(want, pd.DataFrame):
            pd.testing.assert_frame_equal(in_order(got), in_order(want))
        elif isinstance(want, pd.Series):
            pd.testing.assert_series_equal(got.sort_index(), want.sort_index())
        else:
            assert got == pytest.approx(want)


def planned(collection, fuse=False):
    """The planner's optimization of ``collection``'s expression."""
    return planner.optimize(collection.expr, fuse)


def in_order(frame):
    """Rows in the order of their index, or of their values where the index is unnamed (dask's partitions each
    count theirs)."""
    if frame.index.name is None:
        return frame.sort_values(list(frame.columns)).reset_index(drop=True)
    return frame.sort_index()


def test_an_optimized_collection_computes_as_it_was_optimized(planned_pandas, frames):
    """dask optimizes again what it computes: an optimized expression, fused, loses tasks that its fused tasks
    name. Here a group-by's output joined back with its input, the pattern of TPC-H's query 21."""
    big, _ = frames
    df = dd.from_pandas(big, npartitions=6)
    counts = df.groupby("k").x.count().to_frame("n").reset_index()
    joined = df[df.x > 0.5].merge(counts, on="k")
    result = joined.groupby("n").x.sum().to_frame().reset_index().sort_values("x").head(5, compute=False)
    optimized = result.optimize()
    assert isinstance(optimized.expr, collections.Optimized) and optimized.optimize() is optimized
    with dask.config.set({"dataframe.shuffle.method": "tasks"}):
        pd.testing.assert_frame_equal(optimized.compute(), result.compute())
        pd.testing.assert_frame_equal(optimized.persist().compute(), result.compute())
    assert "Fused" in optimized.expr.tree_repr() or optimized.npartitions == 1


class Recording:
    """A scheduler that counts the tasks of each graph it is given, and computes them as dask's own does."""

    def __init__(self):
        self.tasks = []

    def __call__(self, graph, keys, **kwargs):
        self.tasks.append(len(dict(graph.__dask_graph__())))
        return dask.get(graph, keys, **kwargs)


def test_computing_fuses_the_tasks_as_optimize_does(planned_pandas, frames):
    """dask computes an expression optimized without fusion: each selection, filter and arithmetic of a partition
    is a task of its own. Through compute(), dask.compute and a scalar's compute, the graph is the fused one."""
    big, _ = frames
    df = dd.from_pandas(big, npartitions=3)
    rows = ((df.x + 1) * 2)[df.k > 10]
    total = rows.sum()
    fused, unfused = (len(dict(rows.optimize(fuse=fuse).__dask_graph__())) for fuse in (True, False))
    assert fused < unfused
    scheduler = Recording()
    got = rows.compute(scheduler=scheduler)
    (got_too, got_total), = [dask.compute(rows, total, scheduler=scheduler)]
    assert scheduler.tasks[0] <= fused + 1  # and a task that concatenates the partitions
    want = ((big.x + 1) * 2)[big.k > 10]
    pd.testing.assert_series_equal(got, want)
    pd.testing.assert_series_equal(got_too, want)
    assert got_total == pytest.approx(want.sum())
    assert scheduler.tasks[1] < len(dict(total.optimize(fuse=False).__dask_graph__())) + unfused


def test_a_collection_s_expression_pickles_as_dask_s_own_under_its_name(planned_pandas, frames):
    import pickle
    import subprocess
    import sys

    big, _ = frames
    expr = (dd.from_pandas(big, npartitions=2).x + 1).expr
    assert isinstance(expr, collections.Fusing)
    again = pickle.loads(pickle.dumps(expr))
    assert type(again) is expr._dask_class and again._name == expr._name
    kind = type(expr)
    assert pickle.loads(pickle.dumps(kind)) is kind and getattr(collections, kind.__qualname__) is kind
    other = subprocess.run([sys.executable, "-c", "import pickle, sys; kind = pickle.loads(sys.stdin.buffer.read()); "
                            "print(kind.__name__, kind._dask_class.__module__)"],
                           input=pickle.dumps(kind), capture_output=True, check=True)
    assert other.stdout.decode().split() == [kind.__name__, kind._dask_class.__module__]
    with pytest.raises(AttributeError):
        collections.Fusing_nothing  # noqa: B018


def test_an_optimized_expression_pickles_as_its_graph_when_small(planned_pandas, frames, monkeypatch):
    """What a client sends the scheduler: an optimized expression of few tasks as its graph, which unpickles
    without making and tokenizing each expression anew; one of more tasks as its expressions. Either computes the
    same answer under the same keys."""
    import gc
    import pickle

    big, small = frames
    df = dd.from_pandas(big, npartitions=3).merge(dd.from_pandas(small, npartitions=1), on="k")
    optimized = df[df.y > 0.5].groupby("k").x.sum().optimize().expr
    name, keys = optimized._name, optimized.__dask_keys__()
    want = dask.get(optimized.__dask_graph__(), keys)
    small_graph = pickle.dumps(optimized)
    monkeypatch.setattr(collections, "GRAPH_TASKS", 2)
    expressions = pickle.dumps(optimized)
    del df, optimized
    gc.collect()  # unpickled, an expression of a name that is alive here is that one (dask keeps one of each)
    for pickled, held in ((small_graph, collections._Graph), (expressions, planner.internals.FrameExpr)):
        again = pickle.loads(pickled)
        assert isinstance(again.operand("held").inner, held)
        assert again._name == name and again.__dask_keys__() == keys
        pd.testing.assert_series_equal(dask.get(again.__dask_graph__(), keys)[0], want[0])
        del again
        gc.collect()


def test_a_query_of_files_is_optimized_once_until_its_files_or_settings_change(tmp_path, monkeypatch):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from dask_gpu.dataframe import parquet

    def write(rows):
        frame = pd.DataFrame({"k": np.arange(rows) % 7, "x": np.linspace(0, 1, rows), "s": ["a", "b"] * (rows // 2)})
        pq.write_table(pa.Table.from_pandas(frame), tmp_path / "t.parquet")
        return frame

    def query(table):
        return table[table.s.isin(["a"]) & (table.x > 0.25)].groupby("k").x.sum()

    lowered = []
    dasks = planner.without_needless_stages
    monkeypatch.setattr(planner, "without_needless_stages", lambda expr: lowered.append(expr) or dasks(expr))
    monkeypatch.setattr(planner, "_plans", collections_module.OrderedDict())
    monkeypatch.setattr(planner, "PLANS", 2)

    def read():
        return parquet.read_parquet(str(tmp_path), None, engine="pandas", partition_bytes=2**20)

    frame = write(1000)
    first = planner.optimize(query(read()).expr)
    (oldest,) = planner._plans
    assert planner.optimize(query(read()).expr) is first and len(lowered) == 1  # the same files, the same plan
    with dask.config.set({"dataframe.shuffle.method": "tasks"}):
        planner.optimize(query(read()).expr)
        assert len(lowered) == 2
    frame = write(1002)  # new contents: a new plan, and their answer
    again = query(read())
    assert planner.optimize(again.expr)._name != first._name and len(lowered) == 3
    pd.testing.assert_series_equal(again.compute().sort_index(), query(frame), check_names=False)
    assert len(planner._plans) == 2 and oldest not in planner._plans  # the least recently used went
    in_memory = query(dd.from_pandas(frame, npartitions=2))
    assert planner.plan_key(in_memory.expr, True) is None  # never kept: it would hold the data
    planner.optimize(in_memory.expr)
    assert len(planner._plans) == 2
