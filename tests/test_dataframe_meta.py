"""Merge metas kept by kind (dask_gpu.dataframe.meta), and which workers warm cuDF as they start."""

import dask
import dask.dataframe as dd
import pandas as pd
import pytest
from dask.dataframe.dask_expr._merge import Merge
from dask.dataframe.dispatch import meta_nonempty

from dask_gpu.dataframe import meta, start


@pytest.fixture
def by_kind():
    original = Merge.__dict__["_meta"]
    meta.install()
    meta._merged.clear()
    yield meta._merged
    Merge._meta = original


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


def test_each_merge_gets_a_meta_of_its_own(by_kind):
    left, right = frames()
    first, second = left.merge(right, on="k")._meta, left[left.a > 0].merge(right, on="k")._meta
    assert first is not second
    first["extra"] = 1
    assert "extra" not in second.columns and "extra" not in left.merge(right, on="k", how="inner")._meta.columns


def test_answers_are_unchanged(by_kind):
    left, right = frames()
    got = left.merge(right, on="k", how="left").compute().sort_values("k").reset_index(drop=True)
    want = left.compute().merge(right.compute(), on="k", how="left")
    pd.testing.assert_frame_equal(got, want.sort_values("k").reset_index(drop=True), check_dtype=False)


def test_install_is_idempotent(by_kind):
    current = Merge.__dict__["_meta"]
    meta.install()
    assert Merge.__dict__["_meta"] is current


@pytest.mark.parametrize("backend, simulated, installed, want", [
    ("gpu", False, True, True), ("cudf", False, True, True), ("pandas", False, True, False),
    ("gpu", True, True, False), ("gpu", False, False, False)])
def test_workers_warm_cudf_where_their_partitions_will_be_cudf(monkeypatch, backend, simulated, installed, want):
    monkeypatch.setattr(start.importlib.util, "find_spec", lambda name: object() if installed else None)
    with dask.config.set({"dataframe.backend": backend}):
        assert start.wanted(simulated) is want
