"""The compatibility suite: every case runs on NumPy chunks here, and matches NumPy on CuPy chunks."""

import pathlib

import numpy as np
import pytest

from dask_gpu.array import compat


@pytest.mark.parametrize("name", sorted(compat.CASES))
def test_case_on_numpy_chunks(name):
    results = compat.run_case(name, np)
    assert results and all(isinstance(r, np.ndarray) for r in results)
    compat.check(name, results, results)


def test_check_catches_a_wrong_answer():
    expected = compat.run_case("arithmetic", np)
    with pytest.raises(AssertionError):
        compat.check("arithmetic", expected, [expected[0] + 1e-6])


@pytest.mark.gpu
@pytest.mark.parametrize(
    "name",
    [
        pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=compat.GAPS[name])) if name in compat.GAPS
        else name
        for name in sorted(compat.CASES)
    ],
)
def test_case_on_cupy_chunks(name):
    import cupy

    compat.check(name, compat.run_case(name, np), compat.run_case(name, cupy))  # run_case checks chunk types


def test_every_known_gap_is_a_case_and_in_the_table():
    table = (pathlib.Path(__file__).parents[1] / "docs" / "compatibility.md").read_text()
    assert set(compat.GAPS) <= set(compat.CASES)
    assert all(f"| {name} | fails" in table for name in compat.GAPS)
    assert all(f"| {name} | passes" in table for name in set(compat.CASES) - set(compat.GAPS))
