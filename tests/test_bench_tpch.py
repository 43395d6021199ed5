"""``dask gpu bench --suite tpch``: DuckDB's data and answers, the 22 queries on pandas partitions and Polars, the
table, JSON and plot (CPU only)."""

import dataclasses
import json
import os
import re

import dask
import pandas as pd
import pytest
from click.testing import CliRunner

from dask_gpu.benchmarks.tpch import dask_queries, data, suite
from dask_gpu.cli import gpu

pytest.importorskip("duckdb")
SCALE = 0.01


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("tpch"))
    assert data.generate(path, SCALE)
    return path


@pytest.fixture(scope="module")
def answers(tables):
    return data.answers(tables, SCALE, data.QUERIES)


class Tables:
    """What the queries read: each table in ``parts`` partitions, so that merges and group-bys cross them."""

    scale = SCALE

    def __init__(self, path, parts=None):
        self.path, self.parts = path, parts

    def read(self, table):
        import dask.dataframe as dd

        df = dd.read_parquet(data.files(self.path, table))
        return df.repartition(npartitions=self.parts) if self.parts else df


def test_the_data_is_dbgen_s_with_doubles_and_timestamps_and_reused(tables):
    assert not data.generate(tables, SCALE) and not data.stale(tables, SCALE) and data.stale(tables, 0.02)
    lineitem = pd.read_parquet(os.path.join(tables, "lineitem"))
    con = data.connect()
    assert len(lineitem) == con.execute(f"CALL dbgen(sf={SCALE}); SELECT count(*) FROM lineitem").fetchone()[0]
    assert lineitem.l_extendedprice.dtype == "float64" and str(lineitem.l_shipdate.dtype).startswith("datetime64")


def test_answers_are_kept_beside_the_tables_and_read_back_the_same(tables, answers, monkeypatch):
    kept = os.listdir(os.path.join(tables, data.ANSWERS))
    assert len(kept) == len(data.QUERIES) and all(name.endswith(".parquet") for name in kept)
    monkeypatch.setattr(data, "reference", lambda *args: pytest.fail("answered again, not read back"))
    again = data.answers(tables, SCALE, data.QUERIES)
    assert all(data.same(again[n], answers[n]) is None for n in data.QUERIES)


def test_steps_made_side_by_side_hold_the_rows_of_one_step(tables, tmp_path, monkeypatch):
    monkeypatch.setattr(data, "STEP_SCALE", SCALE / 2)  # two steps
    monkeypatch.setattr(data, "STEP_MEMORY", 1)  # memory for both at once
    monkeypatch.setattr(data.os, "cpu_count", lambda: 2)
    lines = []
    assert data.parallel_steps(data.steps(SCALE), SCALE) == 2 and data.log_lines(SCALE) == 2
    assert data.generate(str(tmp_path), SCALE, lines.append)
    assert lines == ["wrote every table (step 1 of 2, 2 at once)", "wrote every table (step 2 of 2, 2 at once)"]
    for table in data.TABLES:
        assert sorted(os.listdir(tmp_path / table))[0].startswith("000-")
        stepped = pd.read_parquet(tmp_path / table)
        whole = pd.read_parquet(os.path.join(tables, table))
        key = list(whole.columns)
        pd.testing.assert_frame_equal(stepped.sort_values(key).reset_index(drop=True),
                                      whole.sort_values(key).reset_index(drop=True))


@pytest.mark.parametrize("cores, memory, count, at_once", [
    (16, 120, 32, 16),  # the memory of half the steps at once: two rounds, a core each
    (64, 500, 64, 64),  # one round
    (2, 22, 16, 2),  # few cores: steps of at most STEP_SCALE, two at a time
    (16, 8, 100, 4),  # little memory: steps of scale factor 1, as many at once as it holds
])
def test_steps_fill_the_cores_in_as_few_rounds_as_the_memory_holds(monkeypatch, cores, memory, count, at_once):
    monkeypatch.setattr(data.os, "cpu_count", lambda: cores)
    monkeypatch.setattr(data, "_available_memory", lambda: memory * 2**30)
    assert data.steps(100) == count and data.parallel_steps(count, 100) == at_once
    assert data.steps(10) == 1 and data.steps(10.5) >= 2


def test_a_full_disk_while_writing_the_data_is_one_line_that_says_where(tmp_path, monkeypatch):
    import duckdb

    def full(*args):
        raise duckdb.IOException("IO Error: Could not write file: No space left on device")

    monkeypatch.setattr(data, "_write", full)
    result = CliRunner().invoke(gpu, ["bench", "--suite", "tpch", "--data", str(tmp_path), "--engines", "duckdb"])
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert result.exit_code == 1 and len(errors) == 1 and "Traceback" not in result.output, result.output
    assert f"writing the TPC-H data under {tmp_path} failed (IO Error: Could not write file: No space left on " \
           "device); free space there or give --data another directory" in errors[0]
    assert data.stale(str(tmp_path), SCALE)  # nothing half-written is taken for the data


def test_query_11_keeps_the_specification_s_fraction():
    con = data.connect()
    assert "0.001" in data.sql(con, 11, 0.1) and "0.0001000000" in con.execute(
        "SELECT query FROM tpch_queries() WHERE query_nr = 11").fetchone()[0]


@pytest.mark.parametrize("parts", [None, 3])
def test_the_dask_queries_answer_as_duckdb_does(tables, answers, parts):
    wrong = {}
    for n, query in dask_queries.QUERIES.items():
        got = suite.to_pandas(dask.compute(query(Tables(tables, parts)), scheduler="sync")[0])
        why = data.same(got, answers[n])
        if why:
            wrong[n] = why
    assert not wrong and len(dask_queries.QUERIES) == 22


def test_the_polars_queries_answer_as_duckdb_does(tables, answers):
    pl = pytest.importorskip("polars")
    from dask_gpu.benchmarks.tpch import polars_queries

    class Scans:
        scale = SCALE

        def scan(self, table):
            return pl.scan_parquet(data.files(tables, table))

    wrong = {n: data.same(q(Scans()).collect().to_pandas(), answers[n]) for n, q in polars_queries.QUERIES.items()}
    assert not any(wrong.values()) and len(wrong) == 22, wrong


def test_same_sees_what_differs(answers):
    want = answers[1]
    assert data.same(want.copy(), want) is None
    shifted = want.copy()
    shifted.iloc[0, 2] *= 1.001
    assert "column 2" in data.same(shifted, want)
    assert "shape" in data.same(want.iloc[:-1], want)
    assert "differs" in data.same(want.iloc[::-1], want)  # rows in another order


def test_a_sum_over_no_rows_is_null_or_0_on_either_side():
    null, zero = pd.DataFrame({"revenue": [None]}, dtype=float), pd.DataFrame({"revenue": [0.0]})
    assert data.same(null, null) is None and data.same(zero, null) is None and data.same(null, zero) is None
    assert "column 0" in data.same(pd.DataFrame({"revenue": [1.0]}), null)


def test_rows_whose_floats_tie_may_come_in_any_order_among_themselves():
    want = pd.DataFrame({"key": [1, 2, 3, 4], "value": [10.0, 5.0, 5.0 + 1e-12, 1.0]})
    assert data.same(pd.DataFrame({"key": [1, 3, 2, 4], "value": [10.0, 5.0 + 1e-12, 5.0, 1.0]}), want) is None
    assert "column 0" in data.same(pd.DataFrame({"key": [1, 4, 2, 3], "value": [10.0, 5.0, 5.0, 1.0]}), want)
    names = pd.DataFrame({"s_name": ["a", "b"], "numwait": [2, 2]})  # no float: the order is exact
    assert "column 0" in data.same(names.iloc[::-1], names)


def test_the_cli_prints_the_table_and_writes_json_and_a_plot(no_gpu, tables, tmp_path):
    out, png = tmp_path / "tpch.json", tmp_path / "tpch.png"
    args = ["bench", "--suite", "tpch", "--scale", str(SCALE), "--data", tables, "--workloads", "q1,q3,q13,q21",
            "--engines", "duckdb,pandas", "--json", str(out), "--plot", str(png)]
    result = CliRunner().invoke(gpu, args)
    assert result.exit_code == 0, result.output
    for n in (1, 3, 13, 21):
        assert re.search(rf"q{n}: TPC-H query {n} +\d+\.\d\d s ✓ +\d+\.\d\d s ✓", result.output), result.output
    report = json.loads(out.read_text())
    cores = os.cpu_count()
    assert report["columns"] == [f"DuckDB, {cores} cores", f"pandas, {cores} cores"] and report["scale"] == SCALE
    runs = {(r["workload"], r["architecture"]): r for r in report["runs"]}
    assert all(r["correct"] and 0 < r["seconds"] <= r["first_seconds"] * 10 for r in runs.values()), runs
    assert not any("phases" in r for r in runs.values())  # dask-gpu's columns alone split their time
    assert report["totals"][f"pandas, {cores} cores"]["correct"] == 4
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    "args, match",
    [
        (["--suite", "tpch", "--scale", "0"], "0 is not in the range x>0"),
        (["--suite", "tpch", "--engines", "spark"], "--engines spark: choose from duckdb, polars"),
        (["--suite", "tpch", "--workloads", "q23"], "unknown workloads \\['q23'\\]"),
        (["--suite", "tpch", "--rows", "5"], "--rows: options of --suite dataframe, not of --suite tpch"),
        (["--suite", "dataframe", "--scale", "5"], "--scale: options of --suite tpch, not of --suite dataframe"),
        (["--suite", "tpch", "--size", "medium"], "--size medium: the tpch suite has small and full"),
    ],
)
def test_bad_input_is_a_usage_error(args, match):
    result = CliRunner().invoke(gpu, ["bench", *args])
    assert result.exit_code == 2 and re.search(match, result.output), result.output


def test_a_failing_query_is_a_result(tables, monkeypatch):
    broken = dict(dask_queries.QUERIES)
    broken[6] = lambda t: t.read("lineitem").no_such_column.sum()
    monkeypatch.setattr(dask_queries, "QUERIES", broken)
    plan = suite.plan("small", SCALE, tables, ["q6", "q14"], engines="duckdb,pandas")
    result = suite.run(dataclasses.replace(plan, isolated=False))  # the broken query is this process's
    rows = {(r["workload"], r["architecture"].split(",")[0]): r for r in result["runs"]}
    assert "no_such_column" in rows["q6", "pandas"]["error"] and rows["q14", "pandas"]["correct"]
    assert rows["q6", "DuckDB"]["correct"]


def test_a_column_runs_in_a_process_of_its_own_and_an_engine_that_fails_there_is_an_error_here(tables, answers,
                                                                                              tmp_path):
    plan = suite.plan("small", SCALE, tables, ["q6"], engines="duckdb")
    statuses = []
    with suite._own_process("duckdb", 1, plan) as column:
        process = column.process
        assert process.pid != os.getpid() and process.is_alive()
        row = column.measure("q6", statuses.append)
    assert not process.is_alive() and process.exitcode == 0
    assert data.same(row["answer"], answers[6]) is None and 0 < row["seconds"] <= row["first_seconds"] * 10
    assert statuses == ["first run", "run 1 of 1"]
    empty = dataclasses.replace(plan, path=str(tmp_path))  # no tables there: DuckDB's views fail as it starts
    with pytest.raises(RuntimeError, match="lineitem"), suite._own_process("duckdb", 1, empty):
        pass


def test_the_split_of_a_query_s_time_and_its_answer_optimized_first(tables, answers):
    from distributed import Client, LocalCluster

    plan = suite.plan("small", SCALE, tables, engines="pandas")
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        engine = suite.Dask(plan, client, split=True)
        for n in (5, 18, 21):  # merges, a group-by merged back, a top-n over a group-by
            phases = engine.phases(n)
            assert data.same(phases.pop("answer"), answers[n]) is None
            assert phases["tasks"] > 1 and phases["partitions"] >= 1
            assert 1 <= phases["workers"] <= 2 and 0 < phases["busy_seconds"] <= 2 * phases["span_seconds"] + 1e-3
            assert all(phases[step] > 0 for step in ("build", "optimize", "compute")), phases


def test_the_queries_on_two_simulated_gpu_workers_through_the_gpu_backend(simulate, pandas_reader, planned_pandas,
                                                                         monkeypatch, tmp_path):
    """The path between GPU workers, on the CPU: the ``gpu`` backend's planned reads and dask-gpu's collections
    (with pandas partitions), tables in several partitions on two simulated GPUs, and every shuffle through
    dask-gpu's own run (``gpu.shuffle: all``). Each answer must be DuckDB's, computed directly and optimized
    first."""
    from distributed import Client

    from dask_gpu import LocalCUDACluster

    monkeypatch.setattr(data, "ROWS_PER_FILE", 12_000)  # lineitem in 5 files, orders in 2
    path = str(tmp_path / "tpch")
    data.generate(path, SCALE)
    want = data.answers(path, SCALE, data.QUERIES)
    simulate(["80GB", "80GB"])
    plan = suite.plan("small", SCALE, path, engines="pandas")
    with dask.config.set({"gpu.partition-size": 1_000_000, "gpu.shuffle": "all"}), \
            LocalCUDACluster(dashboard_address=False) as cluster, Client(cluster) as client:
        with dask.config.set({"dataframe.backend": "gpu"}):
            engine = suite.Dask(plan, client, split=True)
            assert engine.read("lineitem").npartitions >= 6 and engine.read("orders").npartitions == 2
            wrong = {n: why for n in data.QUERIES
                     if (why := data.same(engine.run(n), want[n]) or data.same(engine.phases(n)["answer"], want[n]))}
        shuffles = client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.plugins["dask-gpu-shuffle"].shuffles)
    assert not wrong, wrong
    assert shuffles > 0  # joins and group-bys crossed the two workers through the device shuffle's run
