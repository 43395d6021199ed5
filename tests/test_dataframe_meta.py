"""Merge metas, the metas of reductions and group-bys, and cuDF frames' dtypes and columns kept by kind
(dask_gpu.dataframe.meta), and which workers warm cuDF as they start."""

import functools
import inspect
import operator
import types

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
import dask.dataframe.dask_expr._expr as dx
from dask.dataframe.dask_expr._groupby import GroupByApplyConcatApply
from dask.dataframe.dask_expr._merge import Merge
from dask.dataframe.dask_expr._reductions import ApplyConcatApply, DropDuplicates, Max, Mean, Sum
from dask.dataframe.dispatch import meta_nonempty
from dask.utils import M

from dask_gpu import internals
from dask_gpu.dataframe import meta, start


@pytest.fixture
def by_kind():
    originals = [(cls, name, cls.__dict__[name]) for cls, name, *_ in meta.kept_metas()]
    meta.install()
    meta._merged.clear()
    meta._computed.clear()
    yield meta._merged
    for cls, name, original in originals:
        setattr(cls, name, original)


def frames():
    left = dd.from_pandas(pd.DataFrame({"k": [1, 2, 3, 4], "a": [1.0, 2, 3, 4], "s": list("wxyz")}), npartitions=2)
    right = dd.from_pandas(pd.DataFrame({"k": [1, 2, 5], "b": [7, 8, 9], "a": [0.5, 0.5, 0.5]}), npartitions=1)
    return left, right


def test_a_merge_s_meta_is_what_dask_computes_and_is_computed_once_per_kind(by_kind):
    left, right = frames()
    kinds = [dict(on="k"), dict(on="k", how="left"), dict(left_on="a", right_on="a", suffixes=("_l", "_r"))]
    for kwargs in kinds:
        got = left.merge(right, **kwargs)._meta
        want = meta_nonempty(left._meta).merge(meta_nonempty(right._meta), **kwargs)  # as dask finds it
        assert list(got.columns) == list(want.columns) and (got.dtypes == want.dtypes).all() and got.empty
    assert len(by_kind) == len(kinds)
    filtered = left[left.a > 1].merge(right, on="k")  # another expression, the same kind
    assert filtered._meta.columns.tolist() == left.merge(right, on="k")._meta.columns.tolist()
    assert len(by_kind) == len(kinds)
    other = left.merge(right[["k", "b"]], on="k")._meta  # other columns: another kind
    assert list(other.columns) == ["k", "a", "s", "b"]
    assert len(by_kind) == len(kinds) + 1


def test_merges_of_one_kind_share_their_meta_as_dask_s_expressions_share_metas(by_kind):
    left, right = frames()
    first, second = left.merge(right, on="k"), left[left.a > 0].merge(right, on="k")
    assert first._meta is second._meta  # no copy to make: dask changes no meta it was given
    assert first.sort_values("a")._meta is first._meta  # as dask's own sort shares its input's


def test_answers_are_unchanged(by_kind):
    left, right = frames()
    got = left.merge(right, on="k", how="left").compute().sort_values("k").reset_index(drop=True)
    want = left.compute().merge(right.compute(), on="k", how="left")
    pd.testing.assert_frame_equal(got, want.sort_values("k").reset_index(drop=True), check_dtype=False)


def test_install_is_idempotent(by_kind):
    kept = meta.kept_metas()
    blockwise = {getattr(internals, name) for name in meta.BLOCKWISE}
    reductions = {Merge, ApplyConcatApply, GroupByApplyConcatApply, Mean, DropDuplicates}
    assert {cls for cls, *_ in kept} == reductions | blockwise
    assert {cls for cls, *_ in meta.kept_metas(blockwise=False)} == reductions
    current = [cls.__dict__[name] for cls, name, *_ in kept]
    meta.install()
    assert [cls.__dict__[name] for cls, name, *_ in kept] == current


def test_a_class_without_the_property_is_left_as_it_is():
    class Plain:
        _meta = property(lambda self: "dask's")

    meta.keep(Plain, "_meta", lambda self: "kind", {})
    meta.keep(Plain, "_meta_chunk", lambda self: "kind", {})
    assert Plain()._meta == "dask's" and "_meta_chunk" not in Plain.__dict__


def computed(expr, name="_meta"):
    """What dask itself computes for ``expr``'s ``name``, whether or not it is kept by kind."""
    owner = next(cls for cls in type(expr).__mro__ if name in cls.__dict__)
    return inspect.unwrap(owner.__dict__[name].func)(expr)


def assert_same_meta(got, want):
    if hasattr(want, "dtypes") and hasattr(want, "columns"):
        pd.testing.assert_frame_equal(got, want)
    elif isinstance(want, pd.Series):
        pd.testing.assert_series_equal(got, want)
    else:
        assert type(got) is type(want) and got == want


def typed():
    return pd.DataFrame({"k": [1, 2, 3, 4], "g": list("abab"), "x": [1.0, 2, 3, 4], "n": [1, 2, 3, 4],
                         "t": pd.to_datetime(["2000-01-01"] * 4)})


EXPRESSIONS = {  # reductions and group-bys, over blockwise expressions whose metas are dask's
    "sum": lambda df: df.x.sum(),
    "frame sum": lambda df: df[["x", "n"]].sum(),
    "max of arithmetic": lambda df: (df.x * (1 - df.n)).max(),
    "count of a filter": lambda df: df[(df.n > 1) & (df.t < pd.Timestamp("2001-01-01"))].k.count(),
    "group-by": lambda df: df.groupby("g").agg({"x": "sum", "n": "count"}),
    "group-by on two keys": lambda df: df.groupby(["g", "k"]).x.mean(),
    "group-by of an assign": lambda df: df.assign(y=df.x + 1, z=1).groupby("z").y.sum(),
    "nunique": lambda df: df.groupby("g").n.nunique(),
    "group-by after reset_index": lambda df: df.set_index("k").reset_index().groupby("k").n.max(),
    "mean": lambda df: df.x.mean(),
    "drop_duplicates": lambda df: df[["g", "n"]].drop_duplicates(),
    "count of a string accessor's call": lambda df: df[df.g.str.startswith("a")].k.count(),
    "group-by of many aggregations": lambda df: df.groupby("g").agg({"x": ["sum", "mean", "min", "max"],
                                                                     "n": ["count", "std"]}),
    "group-by size": lambda df: df.groupby("g").size(),
    "group-by of dates": lambda df: df.groupby("g").t.max(),
    "group-by variance": lambda df: df.groupby(["g", "k"]).x.var(),
    "group-by first": lambda df: df.groupby("g").x.first(),
}


@pytest.mark.parametrize("name", EXPRESSIONS)
def test_a_kept_meta_is_what_dask_computes_and_is_computed_once_per_kind(by_kind, name):
    make = EXPRESSIONS[name]
    first = make(dd.from_pandas(typed(), npartitions=2))
    got = first._meta
    assert_same_meta(got, computed(first.expr))
    kinds = len(meta._computed)
    assert kinds > 0
    other = make(dd.from_pandas(typed().iloc[::-1], npartitions=3))  # other data and partitions, the same kind
    assert other._name != first._name
    assert_same_meta(other._meta, got)
    assert len(meta._computed) == kinds


def test_operands_equal_as_values_but_of_other_types_are_other_kinds(by_kind):
    df = dd.from_pandas(typed(), npartitions=2)
    assert df.n.sum(min_count=1)._meta.dtype == typed().n.sum(min_count=1).dtype
    assert (df.n + 1).sum()._meta.dtype == np.dtype("int64")
    assert (df.n + 1.0).sum()._meta.dtype == np.dtype("float64")
    assert df.groupby("g").n.sum(numeric_only=True)._meta.dtype == np.dtype("int64")
    assert df.groupby("g").n.mean()._meta.dtype == np.dtype("float64")
    seconds, nanoseconds = pd.Timestamp("2000-01-01").as_unit("s"), pd.Timestamp("2000-01-01").as_unit("ns")
    assert seconds == nanoseconds
    for stamp in (seconds, nanoseconds):
        assert df.assign(s=stamp).s.max()._meta.unit == typed().assign(s=stamp).s.max().unit
        assert meta._operand_kind(stamp)[2] == stamp.unit


@pytest.mark.parametrize("reduce", [lambda s: s.sum(), lambda s: s.max(), lambda s: s.count(), lambda s: s.mean()])
def test_a_series_reduced_to_a_scalar_is_one_kind_whatever_its_name_and_index(by_kind, reduce):
    df = dd.from_pandas(typed(), npartitions=2)
    first = reduce(df.x)
    assert_same_meta(first._meta, computed(first.expr))
    reductions = lambda: {key for key in meta._computed if key[0] is type(first.expr)}  # noqa: E731
    kinds = reductions()
    assert kinds
    other = reduce((df.set_index("k").x * 2).rename("y"))  # another name and index, the same dtype
    assert_same_meta(other._meta, computed(other.expr))
    assert reductions() == kinds
    integers = reduce(df.n)  # another dtype: another kind
    assert_same_meta(integers._meta, computed(integers.expr))
    assert len(reductions()) > len(kinds)


@pytest.mark.parametrize("name", ["sum", "group-by", "group-by on two keys", "mean", "drop_duplicates"])
def test_a_twin_that_computes_fused_shares_its_dask_class_s_kept_metas(by_kind, name):
    """A collection's root is a twin of its dask class (it computes fused), and dask's optimizer makes more twins as
    it rewrites one: each has the metas of its dask class."""
    from dask_gpu.dataframe import collections

    theirs = EXPRESSIONS[name](dd.from_pandas(typed(), npartitions=2)).expr
    assert theirs._meta is not None  # computed, and kept
    kept = len(meta._computed)
    twin = collections.fusing(type(theirs))(*theirs.operands)
    assert type(twin) is not type(theirs) and "_meta" not in vars(twin)
    assert_same_meta(twin._meta, computed(theirs))
    assert len(meta._computed) == kept


def test_a_series_of_a_twin_reduced_to_a_scalar_is_one_kind_whatever_its_name():
    from dask_gpu.dataframe import collections

    df = dd.from_pandas(typed(), npartitions=2)
    twin = collections.fusing(Sum)
    assert meta._operands_kind("_meta", twin(df.x.expr)) == meta._operands_kind("_meta", twin(df.x.rename("y").expr))
    assert meta._operands_kind("_meta", twin(df.x.expr)) == meta._operands_kind("_meta", df.x.sum().expr)


def test_a_group_by_of_a_series_keeps_its_name_in_its_kind(by_kind):
    """dask's group-by reductions have classes named as the reductions of a series to a scalar (Sum, Max, ...), and
    their metas are series named as their input."""
    df = dd.from_pandas(typed(), npartitions=2)
    for name in ("x", "y"):
        grouped = df.x.rename(name).groupby(df.g)
        for reduced in (grouped.sum(), grouped.max(), grouped.count(), grouped.mean()):
            assert reduced._meta.name == name


def test_a_blockwise_meta_is_dask_s_and_is_computed_once_per_kind(by_kind):
    df = dd.from_pandas(typed(), npartitions=2)
    filtered = df[df.x > 1.5].assign(y=df.x * 2)[["k", "y"]]
    assert_same_meta(filtered._meta, computed(filtered.expr))
    kinds = len(meta._computed)
    other = dd.from_pandas(typed().assign(x=[4.0, 3, 2, 1]), npartitions=3)  # the same kind
    again = other[other.x > 1.5].assign(y=other.x * 2)[["k", "y"]]
    assert again._name != filtered._name and again._meta is filtered._meta and len(meta._computed) == kinds > 0


def test_an_isin_s_meta_is_kept_by_its_frame_whatever_the_values(by_kind):
    df = dd.from_pandas(typed(), npartitions=2)
    first = df.g.isin(["a"])
    assert_same_meta(first._meta, computed(first.expr))
    kinds = len(meta._computed)
    other_values = df.g.isin(["b", "c"])
    assert other_values._meta is first._meta and len(meta._computed) == kinds
    other_column = df.k.isin([1, 7])
    assert_same_meta(other_column._meta, computed(other_column.expr))
    assert len(meta._computed) > kinds


def test_kinds_tell_apart_what_shapes_a_meta():
    frame = typed()
    kinds = {meta.meta_kind(m) for m in [
        frame, frame[["k"]], frame[["k"]].astype("int32"), frame.set_index("k"), frame.set_index(["g", "k"]),
        frame.set_index(["g", "n"]).rename_axis(["g", "m"]), frame.set_index(["g", "x"]), frame.k, frame.k.rename("j"),
        frame.set_index("g").k, frame.rename(columns={"k": 0}), pd.Index([1]), pd.Index([1], name="a")]}
    assert len(kinds) == 13
    with pytest.raises(TypeError):
        meta.meta_kind(np.float64(1.0))


def test_a_kind_is_hashed_once_and_equals_its_tuple(monkeypatch):
    hashed = []

    class Counted(str):
        def __hash__(self):
            hashed.append(self)
            return str.__hash__(self)

    frame = pd.DataFrame({"k": pd.Series([], dtype="int64")})
    frame.columns = pd.Index([Counted("k")], dtype=object)
    kind = meta.meta_kind(frame)
    assert hash(kind) == hash(kind) and len(hashed) == 1
    assert hash(kind) == hash(tuple(kind)) and kind == tuple(kind) and {kind: 1}[tuple(kind)] == 1


def test_forms_are_dask_s_and_asked_once_for_each_pandas_class(monkeypatch):
    frame = typed()
    values = [frame, frame.k, frame.index, frame.set_index(["g", "k"]).index, np.float64(1.0), [1]]
    assert [meta._form(v) for v in values] == ["frame", "series", "index", "index", None, None]
    asked = []
    monkeypatch.setattr(meta, "is_dataframe_like", lambda v: asked.append(v) or False)

    class Frame(pd.DataFrame):  # a class of another module
        pass

    assert [meta._form(v) for v in values[:4]] == ["frame", "series", "index", "index"] and not asked
    assert meta._form(Frame(frame)) is None and meta._form(Frame(frame)) is None and len(asked) == 2


def test_class_methods_partials_method_callers_empty_frames_and_scalar_metas_have_kinds(by_kind):
    assert meta._operand_kind(Sum.chunk) != meta._operand_kind(Max.chunk)  # classmethods, bound to classes
    by = meta._operand_kind(functools.partial(sorted, key=len))
    assert by != meta._operand_kind(functools.partial(sorted, key=abs))
    assert meta._operand_kind(M.drop_duplicates) != meta._operand_kind(M.unique)
    assert meta._operand_kind(typed().iloc[:0]) != meta._operand_kind(typed()[["k"]].iloc[:0])
    with pytest.raises(TypeError):
        meta._operand_kind(typed())  # values, not a meta
    with pytest.raises(TypeError):
        meta._operand_kind(typed().x.mean)  # a method bound to its frame
    df = dd.from_pandas(typed(), npartitions=2)
    assert meta.expression_kind(df.x.sum().expr) != meta.expression_kind(df.n.sum().expr)
    # each kept meta of these plans has a kind: a second plan of the same kind computes none
    kept = tuple((cls, attribute) for cls, attribute, *_ in meta.kept_metas())
    for make in (lambda d: d.groupby(["g", "k"]).x.sum(), lambda d: d.x.sum() * 100.0 > d.n.mean(),
                 lambda d: d.drop_duplicates(), lambda d: d.shuffle("k")):
        for node in make(df).expr.lower_completely().walk():
            for cls, attribute in kept:
                if type(node).__dict__.get(attribute) is None and isinstance(node, cls):
                    meta._operands_kind(attribute, node)


def test_operands_with_no_kind_leave_the_meta_computed_each_time(by_kind):
    scale = 2.0

    def closure(x):
        return x * scale

    with pytest.raises(TypeError):
        meta._operand_kind(closure)
    with pytest.raises(TypeError):
        meta._operand_kind(object())
    assert meta._operand_kind(operator.add) is operator.add and meta._operand_kind(str) is str
    df = dd.from_pandas(typed(), npartitions=2)
    factor = 2

    def chunk(s):
        return (s * factor).sum()

    for factor in (2, 2.5):  # the same function, closing over another factor: another result dtype
        custom = df.n.reduction(chunk, aggregate=sum)
        assert type(custom._meta) is type(computed(custom.expr)) is type(typed().n.mul(factor).sum())
    assert not [key for key in meta._computed if key[0] is not dx.Projection]  # chunk closes over factor: no kind


@pytest.mark.parametrize("backend, simulated, installed, want", [
    ("gpu", False, True, True), ("cudf", False, True, True), ("pandas", False, True, False),
    ("gpu", True, True, False), ("gpu", False, False, False)])
def test_workers_warm_cudf_where_their_partitions_will_be_cudf(monkeypatch, backend, simulated, installed, want):
    monkeypatch.setattr(start.importlib.util, "find_spec", lambda name: object() if installed else None)
    with dask.config.set({"dataframe.backend": backend}):
        assert start.wanted(simulated) is want


def test_a_client_s_warm_up_imports_dask_cudf_then_plans_the_usual_operations(monkeypatch):
    import sys
    import types

    made, planned = [], []

    class Plan:
        def optimize(self):
            planned.append(len(made))

    monkeypatch.setitem(sys.modules, "cudf", types.SimpleNamespace(DataFrame=pd.DataFrame))
    monkeypatch.setattr(start, "plan_usual", lambda frame_type: made.append(frame_type) or [Plan(), Plan()])
    run = start.client_warm_up(lambda: made.append("dask-cudf"))
    assert made == []  # nothing before the cluster runs it
    run()
    assert made == ["dask-cudf", pd.DataFrame] and planned == [2, 2]

    def missing():
        raise ImportError("no dask-cudf here")

    with pytest.raises(ImportError, match="no dask-cudf here"):  # the cluster's thread logs it
        start.client_warm_up(missing)()


def test_the_usual_operations_are_planned_and_right_on_pandas_partitions():
    """What a client plans as it warms: joins, group-bys, filters, distinct rows and reductions, each of which
    optimizes and computes."""
    collections = start.plan_usual(pd.DataFrame)
    kinds = {type(e).__name__ for c in collections for e in c.expr.walk()}
    assert {"Merge", "Filter", "Assign", "Isin", "DropDuplicates", "Sum", "Mean", "NUnique", "Min", "Max", "Count",
            "GroupbyAggregation", "SortValues", "EQ", "And", "Or", "Div", "Where", "IsNa", "AsType", "Invert"} <= kinds
    answers = [c.optimize().compute() for c in collections]
    assert [len(a) for a in answers[:6]] == [4, 2, 4, 8, 1, 4]
    below_half, ratio, mean, keys, top, least, count, latest, flags = answers[6:]
    assert below_half > 0 and 0 < ratio < 1 and 0 < mean < 1 and keys > 0 and top == 1 and least == 0
    assert count == 59 and flags > 16  # the 16 rows of "ab", flagged
    assert latest == pd.Timestamp("1970-03-05")  # the 64th day, kept as its string ends with "h"


def gpu_plugin(warm_cudf=False, simulated=False):
    """A GPU worker's plugin, whose warm-up so far took a second."""
    from dask_gpu.plugins import GPUWorker

    plugin = GPUWorker({"index": 0, "simulated": simulated}, 0, warm_cudf=warm_cudf)
    plugin.warmed_seconds = 1.0
    return plugin


def test_a_worker_that_started_cold_makes_cudf_s_first_calls_in_the_call_and_the_rest_in_a_thread(monkeypatch,
                                                                                                  tmp_path):
    import threading
    import types

    warmed, rest = [], threading.Event()

    def warm(directory, busy, ready):
        warmed.append((directory, threading.current_thread().name))
        ready()  # the first calls are made: the call returns
        rest.wait(10)
        return 0.5

    monkeypatch.setattr(start, "warm", warm)
    monkeypatch.setattr(start, "_dask_cudf_installed", lambda: True)
    cold, warm_plugin, simulated = gpu_plugin(), gpu_plugin(warm_cudf=True), gpu_plugin(simulated=True)

    def worker(plugin):
        return types.SimpleNamespace(plugins={"dask-gpu": plugin} if plugin else {}, local_directory=str(tmp_path),
                                     name="gpu-0", state=types.SimpleNamespace(executing_count=0))

    assert start.warm_if_cold(worker(cold)) is True
    assert warmed == [(str(tmp_path), start.WARMING)] and cold.warm_cudf and cold.warmed_seconds == 1.0
    rest.set()
    for thread in threading.enumerate():
        if thread.name == start.WARMING:
            thread.join(10)
    assert cold.warmed_seconds == 1.5
    assert not any(start.warm_if_cold(worker(p)) for p in (cold, warm_plugin, simulated, None))
    monkeypatch.setattr(start, "_dask_cudf_installed", lambda: False)
    assert start.warm_if_cold(worker(gpu_plugin())) is False and len(warmed) == 1


def test_a_cold_worker_that_cannot_import_cudf_says_so_and_the_call_returns(monkeypatch, tmp_path, caplog):
    import types

    def failing():
        raise ImportError("libcudf.so: cannot open shared object file")

    monkeypatch.setattr(start, "import_cudf", failing)
    monkeypatch.setattr(start, "_dask_cudf_installed", lambda: True)
    worker = types.SimpleNamespace(plugins={"dask-gpu": gpu_plugin()}, local_directory=str(tmp_path), name="gpu-0",
                                   state=types.SimpleNamespace(executing_count=0))
    with caplog.at_level("WARNING", logger="dask_gpu"):
        assert start.warm_if_cold(worker) is True  # it tried: not again
    assert "worker gpu-0 did not warm cuDF: libcudf.so: cannot open shared object file" in caplog.text


def test_a_worker_whose_warm_up_fails_starts_and_says_so(monkeypatch, tmp_path, caplog):
    import types

    def failing(directory, busy, ready):
        raise ValueError("Invalid row group index")

    monkeypatch.setattr(start, "warm", failing)
    worker = types.SimpleNamespace(local_directory=str(tmp_path), name="gpu-0")
    with caplog.at_level("WARNING", logger="dask_gpu"):
        assert start.warm_worker(worker) == 0.0
    assert "worker gpu-0 did not warm cuDF: Invalid row group index" in caplog.text


def steps_run(monkeypatch, busy_answers, give_way=30.0) -> list:
    """The steps a warm-up ran, with ``busy()`` answering ``busy_answers`` in turn (then not busy), and when it said
    it was ready."""
    ran, answers = [], iter(busy_answers)

    def later(frame):
        for step in ("filters", "joins", "sorts"):
            ran.append(step)
            yield

    monkeypatch.setattr(start, "_first_calls", lambda directory: ran.append("reader, group-bys") or "frame")
    monkeypatch.setattr(start, "_later_calls", later)
    monkeypatch.setattr(start, "GIVE_WAY", give_way)
    monkeypatch.setattr(start.time, "sleep", lambda seconds: None)
    start.warm("unused", busy=lambda: next(answers, False), ready=lambda: ran.append("ready"))
    return ran


def test_a_warm_up_makes_the_first_calls_then_says_it_is_ready_and_waits_for_tasks_between_the_others(
        monkeypatch):
    asked = []
    monkeypatch.setattr(start, "_give_way", lambda busy, limit: asked.append(limit) or 0.0)
    assert steps_run(monkeypatch, []) == ["reader, group-bys", "ready", "filters", "joins", "sorts"]
    assert asked == [30.0] * 3  # after each later step


def test_a_warm_up_goes_on_once_the_tasks_are_done_and_stops_after_waiting_its_limit(monkeypatch):
    assert steps_run(monkeypatch, [True] * 50) == ["reader, group-bys", "ready", "filters", "joins", "sorts"]
    clock = iter(range(1000))
    monkeypatch.setattr(start.time, "perf_counter", lambda: float(next(clock)))
    assert steps_run(monkeypatch, [True] * 1000, give_way=5.0) == ["reader, group-bys", "ready", "filters"]


def test_a_worker_s_warm_up_asks_whether_it_runs_tasks_and_passes_on_ready(monkeypatch, tmp_path):
    import types

    seen = []
    monkeypatch.setattr(start, "warm", lambda directory, busy, ready: seen.append((busy(), ready)) or 0.25)
    worker = types.SimpleNamespace(local_directory=str(tmp_path), name="gpu-0",
                                   state=types.SimpleNamespace(executing_count=2))
    assert start.warm_worker(worker, ready=print) == 0.25 and seen == [(True, print)]
    worker.state.executing_count = 0
    assert start.warm_worker(worker) == 0.25 and seen == [(True, print), (False, None)]


@pytest.mark.gpu
@pytest.mark.cudf
def test_cudf_s_warm_up_makes_each_of_its_calls_on_a_gpu_and_leaves_no_file(tmp_path):
    frame = start._first_calls(str(tmp_path))
    assert len(frame) == 8192 and len(list(start._later_calls(frame))) == 3 and not list(tmp_path.iterdir())


def test_the_client_s_workers_are_asked_to_warm_once_at_the_backend_s_first_use(monkeypatch):
    import distributed

    from dask_gpu.dataframe import backend

    class Client:
        def __init__(self, asynchronous=False):
            self.asynchronous, self.ran = asynchronous, []

        def run(self, function):
            self.ran.append(function)

    client = Client()
    monkeypatch.setattr(distributed, "default_client", lambda: client)
    monkeypatch.setattr(backend, "cudf_backend", lambda: types.SimpleNamespace(from_dict=lambda *a, **k: "frame"))
    assert backend.GPUBackendEntrypoint.from_dict({"a": [1]}, 1) == "frame"
    backend.GPUBackendEntrypoint.from_dict({"a": [1]}, 1)
    assert client.ran == [start.warm_if_cold]  # once for this client
    other = Client(asynchronous=True)  # cannot wait here: not asked
    monkeypatch.setattr(distributed, "default_client", lambda: other)
    start.warm_workers()
    assert other.ran == []

    def none():
        raise ValueError("No clients found")

    monkeypatch.setattr(distributed, "default_client", none)
    start.warm_workers()  # no client: nothing to ask


def test_a_cluster_s_workers_are_asked_and_simulated_ones_stay_as_they_are(simulate):
    from distributed import Client

    from dask_gpu import LocalCUDACluster

    simulate(1)
    with LocalCUDACluster(dashboard_address=False, n_workers=1) as cluster, Client(cluster) as client:
        start.warm_workers()
        assert client in start._asked
        assert list(client.run(start.warm_if_cold).values()) == [False]


class Labels:
    """A cuDF frame's column labels, as :func:`dask_gpu.internals.cudf_column_labels` reads them."""
    multiindex, level_names, rangeindex, label_dtype = False, (None,), False, None


class StandIn:
    """A frame with cuDF's inner shape whose ``dtypes`` and ``columns`` count the objects they make."""
    made = 0

    def __init__(self, **dtypes):
        self._column_names = tuple(dtypes)
        self._columns = tuple(types.SimpleNamespace(dtype=pd.api.types.pandas_dtype(d)) for d in dtypes.values())
        self._data = Labels()

    @property
    def dtypes(self):
        StandIn.made += 1
        return pd.Series([c.dtype for c in self._columns], index=list(self._column_names), dtype=object)

    @property
    def columns(self):
        StandIn.made += 1
        return pd.Index(self._column_names)

    @columns.setter
    def columns(self, names):
        self._column_names = tuple(names)


@pytest.fixture
def kept(monkeypatch):
    for attribute in ("dtypes", "columns"):
        monkeypatch.setattr(StandIn, attribute, StandIn.__dict__[attribute])
    monkeypatch.setattr(StandIn, "made", 0)
    meta._labels.clear()
    meta.keep_labels(StandIn)
    return StandIn


def test_a_frame_s_dtypes_and_columns_are_made_once_per_kind_and_equal_the_library_s(kept):
    a, same, other = kept(k="int64", s="object"), kept(k="int64", s="object"), kept(k="float64")
    # dtypes are made of the kept columns: one pandas object made for each kind
    assert a.dtypes.to_dict() == {"k": np.dtype("int64"), "s": np.dtype("object")} and list(a.columns) == ["k", "s"]
    assert same.dtypes.to_dict() == a.dtypes.to_dict() and list(same.columns) == ["k", "s"] and kept.made == 1
    assert other.dtypes.to_dict() == {"k": np.dtype("float64")} and kept.made == 2
    renamed = kept(key="int64", s="object")  # other labels, the same dtypes: another kind
    assert list(renamed.dtypes.index) == ["key", "s"] and list(renamed.columns) == ["key", "s"] and kept.made == 3


def test_each_call_gets_labels_of_its_own(kept):
    frame = kept(k="int64")
    first = frame.dtypes
    first["k"] = np.dtype("float64")
    first["extra"] = np.dtype("int8")
    frame.columns.name = "renamed"
    assert frame.dtypes.to_dict() == {"k": np.dtype("int64")} and frame.columns.name is None


def test_setting_columns_works_and_is_seen(kept):
    frame = kept(k="int64", v="float64")
    assert list(frame.columns) == ["k", "v"]
    frame.columns = ["a", "b"]
    assert list(frame.columns) == ["a", "b"] and list(frame.dtypes.index) == ["a", "b"]


def test_labels_that_cannot_be_a_key_are_computed_each_time(kept):
    frame = kept(k="int64")
    frame._data = types.SimpleNamespace(multiindex=False, level_names=[[]], rangeindex=False, label_dtype=None)
    assert frame.dtypes.to_dict() == frame.dtypes.to_dict() == {"k": np.dtype("int64")}
    assert kept.made == 2 and not meta._labels


def test_keeping_labels_is_idempotent(kept):
    current = kept.__dict__["dtypes"], kept.__dict__["columns"]
    meta.keep_labels(kept)
    assert (kept.__dict__["dtypes"], kept.__dict__["columns"]) == current


@pytest.mark.gpu
@pytest.mark.cudf
def test_cudf_labels_kept_by_kind_equal_cudf_s():
    import cudf

    # cuDF's own, whether or not they are kept already
    dtypes, columns = (inspect.unwrap(getattr(cudf.DataFrame, name).fget) for name in ("dtypes", "columns"))
    frames = [cudf.DataFrame({"a": [1, 2], "b": ["x", "y"]}), cudf.DataFrame({0: [1.5], 1: [2]}),
              cudf.DataFrame({"c": cudf.Series(["u", "v"], dtype="category")}),
              cudf.DataFrame({("x", "a"): [1], ("x", "b"): [2.0]}), cudf.DataFrame(),
              cudf.DataFrame({"a": [1], "b": ["x"], "t": cudf.Series([0], dtype="datetime64[us]")}).iloc[:0]]
    meta.install()
    assert cudf.DataFrame.dtypes.fget.by_kind and cudf.DataFrame.columns.fget.by_kind
    for frame in frames * 2:
        pd.testing.assert_series_equal(frame.dtypes, dtypes(frame))
        pd.testing.assert_index_equal(frame.columns, columns(frame))
    frames[0]["d"] = frames[0]["a"] * 0.5  # a frame that changes gets its new labels
    pd.testing.assert_series_equal(frames[0].dtypes, dtypes(frames[0]))
    assert frames[0].dtypes["d"] == np.dtype("float64") and list(frames[0].columns) == ["a", "b", "d"]
    frames[0].columns = ["p", "q", "r"]
    assert list(frames[0].columns) == ["p", "q", "r"] and list(frames[0].to_pandas().columns) == ["p", "q", "r"]


@pytest.mark.gpu
@pytest.mark.cudf
@pytest.mark.parametrize("name", EXPRESSIONS)
def test_a_kept_cudf_meta_is_what_dask_computes(by_kind, name):
    import cudf

    make = EXPRESSIONS[name]
    first = make(dd.from_pandas(cudf.from_pandas(typed()), npartitions=2))
    got, want = first._meta, computed(first.expr)
    kinds = len(meta._computed)
    # other values and partitions, the same kind (reversed rows would have cuDF's Index, not its RangeIndex)
    other = make(dd.from_pandas(cudf.from_pandas(typed().assign(x=[4.0, 3, 2, 1], n=[0, 1, 0, 1])), npartitions=3))
    for value in (got, other._meta):
        if hasattr(want, "to_pandas"):
            assert type(value) is type(want)
            assert_same_meta(value.to_pandas(), want.to_pandas())
        else:
            assert_same_meta(value, want)
    assert len(meta._computed) == kinds
    assert kinds > 0 or any(c.__module__.startswith("dask_cudf") for c in type(first.expr).__mro__)  # dask-cudf's class


def test_an_expression_s_column_list_is_made_once_per_meta_and_each_caller_gets_its_own():
    made = []

    def columns(expr):
        made.append(expr)
        return list(expr._meta.columns)

    kept = meta._column_list(columns)
    one, other = pd.DataFrame({"a": [1], "b": [2.0]}), pd.DataFrame({"c": ["x"]})
    first, same, different = (types.SimpleNamespace(_meta=m) for m in (one, one, other))
    got = kept(first)
    got.append("changed")
    assert kept(first) == kept(same) == ["a", "b"] and kept(different) == ["c"] and len(made) == 2


def test_expressions_column_lists_kept_equal_dask_s(by_kind):
    left, _ = frames()
    assert dx.Expr.columns.fget.by_kind
    dasks = inspect.unwrap(dx.Expr.columns.fget)
    for collection in (left, left.a, left.index, left[["s", "k"]], left.a.sum(), left.assign(z=left.a * 2)):
        assert collection.expr.columns == dasks(collection.expr)
    meta.install()
    assert dx.Expr.columns.fget.__wrapped__ is dasks  # kept once


MERGES = [dict(on="k"), dict(on="k", how="left"), dict(on="k", how="right"), dict(on="k", how="outer"),
          dict(on="k", how="leftsemi"), dict(on=["k", "s"], how="left"), dict(left_on="k", right_on="k32"),
          dict(left_on="k", right_on="k32", how="left", suffixes=("_l", "_r")), dict(left_on="s", right_on="s"),
          dict(left_index=True, right_index=True), dict(left_on="k", right_index=True, how="left")]


def test_merge_metas_of_pandas_frames_are_dask_s(by_kind):
    left, right = frames()
    merge = left.merge(right, on="k", how="left").expr
    assert meta._merged_empties(merge) is None and not meta._on_empties(left._meta)


@pytest.mark.gpu
@pytest.mark.cudf
@pytest.mark.filterwarnings("ignore:Merging dataframes with merge column data type mismatches")
@pytest.mark.parametrize("kwargs", MERGES, ids=[repr(k) for k in MERGES])
def test_cudf_metas_on_empty_inputs_are_those_of_the_partitions(by_kind, kwargs):
    """A merge's and an isin's meta on empty cuDF inputs: dask's on its stand-ins, but for strings, which keep the
    inputs' dtype as the partitions' merge does (dask's stand-ins have the default string dtype)."""
    import cudf
    from dask.dataframe.dask_expr import new_collection

    left = cudf.DataFrame({"k": [1, 2, 3], "s": ["a", "b", "c"], "x": [1.0, 2, 3], "t": pd.to_datetime(["2000"] * 3),
                           "f": [True, False, True]})
    right = cudf.DataFrame({"k": [1, 2, 5], "k32": np.array([1, 2, 5], dtype="int32"), "s": ["a", "b", "z"],
                            "x": [0.5, 0.5, 0.5], "n": np.array([7, 8, 9], dtype="int16")})
    if kwargs.get("right_index"):
        right = right.set_index("k32")
    joined = dd.from_pandas(left, npartitions=2).merge(dd.from_pandas(right, npartitions=1), **kwargs).expr
    merge = next(node for node in joined.walk() if isinstance(node, Merge))
    got = meta._merged_empties(merge)
    keywords = dict(merge.kwargs, how="left" if merge.kwargs["how"] == "leftsemi" else merge.kwargs["how"])
    partitions = new_collection(merge.left).compute().merge(new_collection(merge.right).compute(), **keywords)
    want = computed(merge)
    assert type(got) is type(partitions) is type(want) and len(got) == 0
    assert list(got.columns) == list(partitions.columns) == list(want.columns)
    for name, dtype in got.dtypes.items():  # dask's, but strings: the partitions' (dask's stand-ins have the default)
        expected = partitions[name].dtype if pd.api.types.is_string_dtype(dtype) else want[name].dtype
        assert dtype == expected, name
    made = meta._merged_columns(merge.left._meta, merge.right._meta, keywords)  # of the inputs' columns, where
    on_empties = merge.left._meta.merge(merge.right._meta, **keywords)  # keys are columns of one dtype: cuDF's
    indexes = kwargs.get("left_index") or kwargs.get("right_index")
    assert (made is not None) == (not indexes and kwargs.get("right_on") != "k32")  # merge on
    if made is not None:  # the empty metas
        assert type(made) is type(on_empties) and type(made.index) is type(on_empties.index)
        pd.testing.assert_index_equal(made.columns, on_empties.columns)
        assert list(made.dtypes) == list(on_empties.dtypes)
    for frame in (left, right):
        series = dd.from_pandas(frame, npartitions=1).x.isin([0.5, 2.0]).expr
        got, want = meta._isin_empties(series), computed(series)
        assert type(got) is type(want)
        pd.testing.assert_series_equal(got.to_pandas(), want.to_pandas())
    categories = dd.from_pandas(left.astype({"s": "category"}), npartitions=1)
    assert meta._merged_empties(categories.merge(categories, on="k").expr) is None  # dask's stand-ins


def test_a_filter_of_cudf_frames_by_a_boolean_series_has_its_frame_s_meta_and_other_filters_dask_s():
    """Stand-in cuDF types (pandas' under cuDF's module), for the rule alone."""
    frame_type = type("DataFrame", (pd.DataFrame,), {"__module__": "cudf.core.dataframe"})
    series_type = type("Series", (pd.Series,), {"__module__": "cudf.core.series"})
    frame = frame_type({"a": pd.Series([], dtype="int64"), "s": pd.Series([], dtype="str")})
    mask, numbers = series_type([], dtype=bool), series_type([], dtype="int64")

    def filtered(on, by):
        return meta._filtered(types.SimpleNamespace(frame=types.SimpleNamespace(_meta=on),
                                                    predicate=types.SimpleNamespace(_meta=by)))

    assert filtered(frame, mask) is frame and filtered(numbers, mask) is numbers
    assert filtered(frame, numbers) is None  # not a mask: dask's
    assert filtered(frame, frame_type({"a": mask})) is None  # a frame of booleans masks values, not rows
    assert filtered(pd.DataFrame(frame), pd.Series(mask)) is None  # pandas: dask's


def test_a_cudf_selection_of_columns_takes_them_from_its_frame_and_other_selections_are_dask_s(monkeypatch):
    """Stand-in cuDF types (pandas' under cuDF's module), for the rule alone, through the adapter."""
    frame_type = type("DataFrame", (pd.DataFrame,), {"__module__": "cudf.core.dataframe"})
    monkeypatch.setattr(internals, "cudf_column_names", lambda frame: tuple(frame.columns))
    taken = []
    monkeypatch.setattr(internals, "cudf_columns_by_label", lambda frame, labels: taken.append(labels) or frame[labels])
    frame = frame_type({"a": pd.Series([], dtype="int64"), "s": pd.Series([], dtype="str"), "x": [], "y": []})

    def projected(on, labels):
        return meta._projected(types.SimpleNamespace(frame=types.SimpleNamespace(_meta=on),
                                                     operand=lambda name: labels))

    got = projected(frame, ["x", "a"])
    assert list(got.columns) == ["x", "a"] and taken == [["x", "a"]]
    for labels in ("a", [], ["a", "a"], ["a", "missing"], [0], slice(None)):  # a series, repeats, or errors: dask's
        assert projected(frame, labels) is None, labels
    assert projected(pd.DataFrame(frame), ["a"]) is None  # pandas: dask's
    assert projected(frame_type(frame.set_axis(["a", "a", "x", "y"], axis=1)), ["x"]) is None  # repeated names
    assert taken == [["x", "a"]]


@pytest.mark.gpu
@pytest.mark.cudf
@pytest.mark.parametrize("labels", [["x"], ["t", "k", "g"], ["n", "x", "t", "g", "k"]])
def test_a_cudf_selection_of_columns_has_the_meta_cudf_computes(by_kind, labels):
    import cudf

    frame = dd.from_pandas(cudf.from_pandas(typed()), npartitions=2)
    for source in (frame, frame.set_index("k", sort=False)):
        labels = [label for label in labels if label in source.columns]
        node = source[labels].expr
        got, want = meta._projected(node), computed(node)
        assert type(got) is type(want) and list(got.columns) == labels
        pd.testing.assert_frame_equal(got.to_pandas(), want.to_pandas())


FILTERS = {
    "frame": lambda df: df[df.n > 1],
    "series": lambda df: df.x[df.g == "a"],
    "projection by a date": lambda df: df[["k", "t"]][df.t < pd.Timestamp("2001-01-01")],
    "named index": lambda df: (lambda f: f[f.x > 1.5])(df.set_index("k")),
    "categories": lambda df: df.astype({"g": "category"})[df.n > 1],
}


@pytest.mark.gpu
@pytest.mark.cudf
@pytest.mark.parametrize("name", FILTERS)
def test_a_cudf_filter_s_meta_is_the_one_cudf_computes_on_the_empty_metas(by_kind, name):
    import cudf

    filtered = FILTERS[name](dd.from_pandas(cudf.from_pandas(typed()), npartitions=2))
    node = next(n for n in filtered.expr.walk() if type(n).__name__ == "Filter")
    got, want = meta._filtered(node), computed(node)
    assert got is node.frame._meta and type(got) is type(want) and filtered._meta is got
    got, want = got.to_pandas(), want.to_pandas()  # the same columns, dtypes and index but for its type:
    assert got.index.dtype == want.index.dtype and got.index.name == want.index.name  # cuDF's mask makes a
    if isinstance(want, pd.Series):  # RangeIndex an Index of int64
        pd.testing.assert_series_equal(got, want, check_index_type=False)
    else:
        pd.testing.assert_frame_equal(got, want, check_index_type=False)


NAMED_MERGES = [dict(left_on="k", right_on="k"), dict(left_on="k", right_on="k", how="left"),
                dict(left_on="k", right_on="k", how="right"), dict(left_on="k", right_on="k", how="outer"),
                dict(left_on=["k", "s"], right_on=["k", "s"]), dict(left_on="k", right_on="r"),
                dict(left_on="y", right_on="k", suffixes=("_l", "_r")), dict(left_on=["k", "y"], right_on=["r", "k"]),
                dict(left_on="k", right_on="k", suffixes=(None, "_right")), dict(left_on="x", right_on="x"),
                dict(left_on="s", right_on="k")]


@pytest.mark.parametrize("keywords", NAMED_MERGES, ids=[repr(k) for k in NAMED_MERGES])
def test_a_merge_s_meta_from_its_inputs_columns_has_pandas_names_and_dtypes(monkeypatch, keywords):
    """The rule on pandas' frames, through the adapter's cuDF accessors made pandas'."""
    monkeypatch.setattr(internals, "cudf_column_names", lambda frame: tuple(frame.columns))
    monkeypatch.setattr(internals, "cudf_column", lambda frame, name: frame[name])
    monkeypatch.setattr(internals, "cudf_frame", lambda like, columns: pd.DataFrame(columns))
    left = pd.DataFrame({"k": [1], "s": ["a"], "x": [1.0], "y": [2]}).iloc[:0]
    right = pd.DataFrame({"k": [1], "r": [1], "s": ["b"], "x": [1], "y": [0.5], "z": [True]}).iloc[:0]
    keywords = {"how": "inner", "left_index": False, "right_index": False, "suffixes": ("_x", "_y"),
                "indicator": False, **keywords}
    got = meta._merged_columns(left, right, keywords)
    if keywords["left_on"] in ("x", "s"):  # keys of other dtypes: cuDF casts them, and dask's way is kept
        assert got is None
    else:
        want = left.merge(right, **keywords)
        assert list(got.columns) == list(want.columns) and list(got.dtypes) == list(want.dtypes)
    for other in (dict(keywords, indicator=True), dict(keywords, left_index=True, right_index=True),
                  dict(keywords, how="cross"), dict(keywords, left_on="missing")):
        assert meta._merged_columns(left, right, other) is None


def test_stand_ins_of_cudf_frames_are_the_empty_metas_only_while_a_group_by_s_meta_is_computed(monkeypatch):
    """Stand-in frame types, cuDF's for the rule (which :func:`meta._on_empties` tells on the GPU)."""
    frame_type, series_type = type("DataFrame", (pd.DataFrame,), {}), type("Series", (pd.Series,), {})
    monkeypatch.setattr(meta, "_on_empties", lambda m: not any(str(d) == "category" for d in m.dtypes))
    empty = frame_type({"a": pd.Series([], dtype="int64")})
    categories = frame_type({"a": pd.Series([], dtype="category")})
    meta.stand_ins_may_be_empty(types.SimpleNamespace(DataFrame=frame_type, Series=series_type))
    try:
        assert len(meta_nonempty(empty)) > 0  # dask's stand-in
        token = meta._EMPTY_STAND_INS.set(True)
        try:
            assert meta_nonempty(empty) is empty and len(meta_nonempty(categories)) > 0
        finally:
            meta._EMPTY_STAND_INS.reset(token)
    finally:
        meta.uninstall()
    assert meta_nonempty.dispatch(frame_type) is meta_nonempty.dispatch(pd.DataFrame)


ROWS_KEPT = {  # reductions to a frame's first or largest rows, whose metas are their inputs' shapes
    "nlargest": lambda df: df.nlargest(2, "x"),
    "nsmallest of a series": lambda df: df.x.nsmallest(2),
    "a sort's first rows": lambda df: df.sort_values(["x", "g"], ascending=[False, True]).head(2, compute=False),
}
ON_PARTITIONS = {  # the same on a partition, as cuDF computes it
    "nlargest": lambda frame: frame.nlargest(2, "x"),
    "nsmallest of a series": lambda frame: frame.x.nsmallest(2),
    "a sort's first rows": lambda frame: frame.sort_values(["x", "g"], ascending=[False, True]).head(2),
}


@pytest.mark.parametrize("name, empties", [("group-by", True), ("a sort's first rows", False), ("sum", False)])
def test_group_bys_alone_are_computed_on_empty_stand_ins(monkeypatch, name, empties):
    monkeypatch.setattr(meta, "_on_empties", lambda m: True)  # as with cuDF's metas
    seen = []

    def compute(expr):
        seen.append(meta._EMPTY_STAND_INS.get())
        return expr.frame._meta

    make = {"group-by": lambda df: df.groupby("g").x.sum(), "sum": lambda df: df.x.sum()}.get(name) or ROWS_KEPT[name]
    nodes = [e for e in make(dd.from_pandas(typed(), npartitions=2)).expr.simplify().walk()
             if isinstance(e, ApplyConcatApply)]
    assert nodes
    for node in nodes:
        meta._on_empty_stand_ins(compute)(node)
    assert seen == [empties] * len(nodes)


@pytest.mark.gpu
@pytest.mark.cudf
@pytest.mark.parametrize("name", ROWS_KEPT)
def test_cudf_metas_of_reductions_to_first_rows_are_the_partitions_shapes(by_kind, name):
    """Those of the partitions: on cuDF's empty metas, a sort's strings would come out of another dtype."""
    import cudf

    frame = cudf.from_pandas(typed())
    want = ON_PARTITIONS[name](frame).iloc[:0].to_pandas()
    expr = ROWS_KEPT[name](dd.from_pandas(frame, npartitions=2)).expr.simplify()
    found = [e for e in expr.walk() if isinstance(e, ApplyConcatApply)]
    assert found
    for node in found:
        for value in (node._meta_chunk, node._meta):  # the chunk's is dask's stand-ins' rows: the shapes compare
            assert_same_meta(value.iloc[:0].to_pandas(), want)


def test_threads_that_install_at_once_install_one_after_another(monkeypatch, by_kind):
    """A client's warming thread and its first dataframe call may both install: one at a time, each finding what
    the other kept."""
    import threading
    import time

    inside, most, keep_lists = [0], [0], meta.keep_column_lists

    def slow(cls):
        inside[0] += 1
        most[0] = max(most[0], inside[0])
        time.sleep(0.05)
        inside[0] -= 1
        keep_lists(cls)

    monkeypatch.setattr(meta, "keep_column_lists", slow)
    threads = [threading.Thread(target=meta.install) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert most[0] == 1 and dx.Expr.columns.fget.by_kind
