"""Tokens of classes by name and of empty frames by kind (dask_gpu.dataframe.tokens)."""

import dask.dataframe as dd
import dask.tokenize
import pandas as pd
import pytest
from dask.base import tokenize
from dask.dataframe.dask_expr._expr import Assign, Projection

from dask_gpu.dataframe import collections, tokens


def test_a_class_is_its_module_and_name_where_the_module_gives_it_back():
    assert tokens.class_token(Projection) == ("class", Projection.__module__, "Projection")
    twin = collections.fusing(Projection)  # made at run time, given back by its module's __getattr__
    assert tokens.class_token(twin) == ("class", collections.__name__, twin.__qualname__)

    def local():
        class Here:
            pass
        return Here

    first, second = local(), local()  # one name, two classes: each tokenized as dask does
    assert tokens.class_token(first)[0] != "class"
    assert tokens.class_token(first) != tokens.class_token(second)
    again = type("Again", (), {"__module__": "__main__", "__qualname__": "Again"})  # a class defined anew
    assert tokens.class_token(again)[0] != "class"


def test_registered_an_expression_is_named_without_pickling_its_class(monkeypatch):
    tokens.register()

    def refused(obj):
        raise AssertionError(f"pickled {obj!r} to tokenize it")

    monkeypatch.setattr(dask.tokenize, "_normalize_pickle", refused)
    df = dd.from_pandas(pd.DataFrame({"a": [1, 2], "b": [3, 4]}), npartitions=1)
    first, second = Assign(df.expr, "c", 1), Assign(df.expr, "c", 1)
    assert first._name == second._name
    assert Assign(df.expr, "c", 2)._name != first._name


def test_an_empty_frame_is_its_kind():
    frame = pd.DataFrame({"a": pd.Series([], dtype="int64"), "s": pd.Series([], dtype=object)})
    same = pd.DataFrame({"a": pd.Series([], dtype="int64"), "s": pd.Series([], dtype=object)})
    assert tokens.empty_frame_token(frame)[0] == "empty"
    assert tokenize(tokens.empty_frame_token(frame)) == tokenize(tokens.empty_frame_token(same))
    for other in (frame.astype({"a": "float64"}), frame.rename(columns={"a": "b"}), frame.set_index("a"),
                  frame["a"]):
        assert tokenize(tokens.empty_frame_token(other)) != tokenize(tokens.empty_frame_token(frame))


@pytest.mark.parametrize("frame", [pd.DataFrame({"a": [1]}),  # rows: the frame's own token
                                   pd.DataFrame({"c": pd.Categorical([], categories=["x"])})])  # categories
def test_a_frame_with_rows_or_categories_keeps_its_own_token(frame):
    assert tokens.empty_frame_token(frame)[0] != "empty"


@pytest.mark.gpu
def test_an_empty_cudf_frame_is_tokenized_by_kind_without_the_gpu():
    import cudf

    tokens.register()
    meta = cudf.DataFrame({"a": [1, 2], "b": [1.0, 2.0], "s": ["x", "y"]}).set_index(["a", "s"]).iloc[:0]
    same = cudf.DataFrame({"a": [3], "b": [4.0], "s": ["z"]}).set_index(["a", "s"]).iloc[:0]
    assert tokenize(meta) == tokenize(same)
    assert tokenize(meta) != tokenize(meta.reset_index())
    full = cudf.DataFrame({"a": [1, 2]})
    assert tokenize(full) != tokenize(cudf.DataFrame({"a": [1, 3]}))  # rows: cuDF's own token
