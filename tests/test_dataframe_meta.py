"""Merge metas and cuDF dtypes kept by kind (dask_gpu.dataframe.meta), and which workers warm cuDF as they start."""

import inspect
import types

import dask
import dask.dataframe as dd
import numpy as np
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


class Columns:
    """A cuDF frame's column labels, as :func:`dask_gpu.internals.cudf_column_labels` reads them."""
    multiindex, level_names, rangeindex, label_dtype = False, (None,), False, None


class StandIn:
    """A frame with cuDF's inner shape whose ``dtypes`` counts its calls."""
    made = 0

    def __init__(self, **dtypes):
        self._column_names = tuple(dtypes)
        self._columns = tuple(types.SimpleNamespace(dtype=pd.api.types.pandas_dtype(d)) for d in dtypes.values())
        self._data = Columns()

    @property
    def dtypes(self):
        StandIn.made += 1
        return pd.Series([c.dtype for c in self._columns], index=list(self._column_names), dtype=object)


@pytest.fixture
def kept_dtypes(monkeypatch):
    monkeypatch.setattr(StandIn, "dtypes", StandIn.__dict__["dtypes"])
    monkeypatch.setattr(StandIn, "made", 0)
    meta._dtypes.clear()
    meta.keep_dtypes(StandIn)
    return StandIn


def test_a_frame_s_dtypes_are_made_once_per_kind_and_equal_the_library_s(kept_dtypes):
    a, same, other = kept_dtypes(k="int64", s="object"), kept_dtypes(k="int64", s="object"), kept_dtypes(k="float64")
    assert a.dtypes.to_dict() == {"k": np.dtype("int64"), "s": np.dtype("object")}
    assert same.dtypes.to_dict() == a.dtypes.to_dict() and kept_dtypes.made == 1
    assert other.dtypes.to_dict() == {"k": np.dtype("float64")} and kept_dtypes.made == 2
    renamed = kept_dtypes(key="int64", s="object")  # other labels, the same dtypes: another kind
    assert list(renamed.dtypes.index) == ["key", "s"] and kept_dtypes.made == 3


def test_each_call_gets_dtypes_of_its_own(kept_dtypes):
    frame = kept_dtypes(k="int64")
    first = frame.dtypes
    first["k"] = np.dtype("float64")
    first["extra"] = np.dtype("int8")
    assert frame.dtypes.to_dict() == {"k": np.dtype("int64")}


def test_labels_that_cannot_be_a_key_are_computed_each_time(kept_dtypes):
    frame = kept_dtypes(k="int64")
    frame._data = types.SimpleNamespace(multiindex=False, level_names=[[]], rangeindex=False, label_dtype=None)
    assert frame.dtypes.to_dict() == frame.dtypes.to_dict() == {"k": np.dtype("int64")}
    assert kept_dtypes.made == 2 and not meta._dtypes


def test_keeping_dtypes_is_idempotent(kept_dtypes):
    current = kept_dtypes.__dict__["dtypes"]
    meta.keep_dtypes(kept_dtypes)
    assert kept_dtypes.__dict__["dtypes"] is current


@pytest.mark.gpu
@pytest.mark.cudf
def test_cudf_dtypes_kept_by_kind_equal_cudf_s():
    import cudf

    made = inspect.unwrap(cudf.DataFrame.dtypes.fget)  # cuDF's own, whether or not it is kept already
    frames = [cudf.DataFrame({"a": [1, 2], "b": ["x", "y"]}), cudf.DataFrame({0: [1.5], 1: [2]}),
              cudf.DataFrame({"c": cudf.Series(["u", "v"], dtype="category")}),
              cudf.DataFrame({("x", "a"): [1], ("x", "b"): [2.0]})]
    meta.install()
    assert cudf.DataFrame.dtypes.fget.by_kind
    for frame in frames * 2:
        pd.testing.assert_series_equal(frame.dtypes, made(frame))
    frames[0]["d"] = frames[0]["a"] * 0.5  # a frame that changes gets its new dtypes
    pd.testing.assert_series_equal(frames[0].dtypes, made(frames[0]))
    assert frames[0].dtypes["d"] == np.dtype("float64")
