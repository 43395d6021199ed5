"""The TPC-H suite's data in each layout users' files have (dask_gpu.benchmarks.tpch.data.LAYOUTS), and the reads
the gpu backend plans over them: partitions within a factor of 2 of their target, and the same answers, whatever
the files. At a small scale, each layout keeps its shape with row groups and files of thousands of rows where its
own hold a million."""

import glob
import os

import dask
import dask.dataframe as dd
import pyarrow.parquet as pq
import pytest

from dask_gpu.benchmarks.tpch import data
from dask_gpu.dataframe import footers, parquet

SCALE = 0.05  # lineitem: 300,000 rows
# DuckDB's row groups are multiples of 2,048 rows
SHAPES = {"DUCKDB_ROWS": 6_144, "PYARROW_ROWS": 25_000, "THREAD_ROWS": 24_576, "ROWS_PER_FILE": 100_000}
COLUMNS = (["l_shipdate", "l_discount", "l_quantity", "l_extendedprice"], None)  # query 6's, and every column


@pytest.fixture(scope="module")
def layouts(tmp_path_factory):
    patch = pytest.MonkeyPatch()
    for name, rows in SHAPES.items():
        patch.setattr(data, name, rows)
    root = tmp_path_factory.mktemp("layouts")
    paths = {"suite": str(root / "suite")}
    data.generate(paths["suite"], SCALE)
    for layout in data.LAYOUTS:
        if layout != "suite":
            paths[layout] = str(root / layout)
            data.relayout(paths["suite"], paths[layout], layout)
    yield paths
    patch.undo()


def shape(path, table="lineitem") -> tuple:
    """(files, row groups of each, rows of each row group) of a table."""
    found = sorted(glob.glob(data.files(path, table)))
    metas = [pq.ParquetFile(f).metadata for f in found]
    return len(found), [m.num_row_groups for m in metas], [m.row_group(i).num_rows for m in metas
                                                            for i in range(m.num_row_groups)]


def test_each_layout_holds_the_same_rows_as_it_says(layouts):
    rows = {layout: sum(shape(path)[2]) for layout, path in layouts.items()}
    assert len(set(rows.values())) == 1 and rows["suite"] > 0
    files, _, groups = shape(layouts["suite"])
    assert files == 3 and max(groups) == SHAPES["DUCKDB_ROWS"]
    files, _, groups = shape(layouts["pyarrow"])
    assert files == 1 and set(groups[:-1]) == {SHAPES["PYARROW_ROWS"]}
    files, _, groups = shape(layouts["duckdb-threads"])
    assert files >= 1 and SHAPES["THREAD_ROWS"] in groups and max(groups) < 2 * SHAPES["THREAD_ROWS"]
    files, _, groups = shape(layouts["small-files"])
    assert files >= len(groups) / 2 > 10  # about a row group a file (DuckDB's threads may put two in one)
    assert shape(layouts["one-file"])[0] == 1
    for layout, path in layouts.items():
        other = "suite" if layout != "suite" else "one-file"
        assert not data.stale(path, SCALE, layout) and data.stale(path, SCALE, other)


def test_a_layout_is_not_written_over_its_source_and_a_bad_one_is_named(layouts, tmp_path):
    with pytest.raises(ValueError, match="in their own place"):
        data.relayout(layouts["suite"], layouts["suite"], "one-file")
    with pytest.raises(ValueError, match="--layout parquet: choose from suite, pyarrow"):
        data.generate(str(tmp_path / "x"), SCALE, layout="parquet")
    with pytest.raises(ValueError, match="--layout parquet: choose from suite, pyarrow"):
        data.relayout(layouts["suite"], layouts["one-file"], "parquet")
    assert not data.stale(layouts["one-file"], SCALE, "one-file")  # a bad layout removes nothing


@pytest.mark.parametrize("layout", list(data.LAYOUTS))
@pytest.mark.parametrize("columns", COLUMNS)
def test_planned_partitions_stay_within_a_factor_of_two_of_their_target(layouts, layout, columns):
    pattern = data.files(layouts[layout], "lineitem")
    fs, files = parquet.files_of(pattern)
    groups = {(g.path, g.index): g for file in files for g in footers.footer(fs, file).row_groups}
    wanted = columns or list(footers.footer(fs, files[0]).schema.names)
    # partitions are whole row groups: a target of at least four of the largest, about a sixth of the table
    sizes = [g.nbytes(wanted) for g in groups.values()]
    target = max(sum(sizes) // 6, 4 * max(sizes))
    read = parquet.read_parquet(pattern, columns, engine="pandas", partition_bytes=target).expr
    sizes = [sum(groups[(path, i)].nbytes(wanted) for path, indices in pieces for i in indices)
             for pieces in read._plan]
    assert len(sizes) > 1
    assert all(target / 2 <= size <= 2 * target for size in sizes), (target, *sizes)


@pytest.mark.parametrize("layout", [layout for layout in data.LAYOUTS if layout != "suite"])
def test_the_queries_answer_alike_on_every_layout(layouts, layout, simulate, pandas_reader, planned_pandas):
    """The plain queries through the gpu backend's planned reads, several partitions a table, on the layout's files
    and on the suite's: the same answers, DuckDB's."""
    from dask_gpu.benchmarks.tpch import dask_queries
    from dask_gpu.benchmarks.tpch.suite import to_pandas

    simulate(["80GB"])
    numbers = (1, 6, 13, 21)  # a group-by, a filter, a string filter and an outer count, an exists pattern
    want = data.answers(layouts["suite"], SCALE, numbers)
    tables = type("Tables", (), {"scale": SCALE, "read": lambda self, t: dd.read_parquet(
        data.files(layouts[layout], t))})()
    with dask.config.set({"dataframe.backend": "gpu", "gpu.partition-size": 2_000_000, "scheduler": "sync"}):
        assert tables.read("lineitem").npartitions > 2
        wrong = {n: why for n in numbers if (why := data.same(to_pandas(dask_queries.QUERIES[n](tables).compute()),
                                                              want[n]))}
    assert not wrong, wrong
    assert os.path.isdir(layouts[layout])


def test_the_bench_s_help_names_every_layout_and_a_bad_one_is_refused_early():
    from click.testing import CliRunner

    from dask_gpu.cli import gpu

    shown = " ".join(CliRunner().invoke(gpu, ["bench", "--help"]).output.split()).replace("- ", "-")  # wrapped
    assert all(layout in shown for layout in data.LAYOUTS)
    refused = CliRunner().invoke(gpu, ["bench", "--suite", "tpch", "--layout", "orc"])
    assert refused.exit_code == 2 and "--layout orc: choose from suite" in refused.output


def test_duckdb_writes_a_column_chunk_as_one_page_and_pyarrow_as_many(layouts):
    """What makes the per-thread layout slow to decode on a GPU, as ``benchmarks/parquet_pages.py`` reads it from the
    page headers: DuckDB's column chunks are a page each, pyarrow's pages a mebibyte."""
    import subprocess
    import sys

    script = os.path.join(os.path.dirname(__file__), os.pardir, "benchmarks", "parquet_pages.py")

    def pages_a_chunk(layout) -> float:
        out = subprocess.run([sys.executable, script, os.path.join(layouts[layout], "lineitem"), "l_comment"],
                             capture_output=True, text=True, check=True).stdout
        return float(out.split("(median ")[1].split(" a chunk")[0])

    assert pages_a_chunk("duckdb-threads") == 1
    assert pages_a_chunk("pyarrow") > 1
