"""``dask gpu bench --suite dataframe``: its data, its checks, its table, JSON and plot (CPU only)."""

import dataclasses
import json
import logging
import os
import re
from contextlib import contextmanager

import pandas as pd
import pytest
from click.testing import CliRunner

from dask_gpu import devices
from dask_gpu.benchmarks import dataframe
from dask_gpu.benchmarks.dataframe import WORKLOADS, Data, Workload, check
from dask_gpu.cli import gpu

ROWS = 4000


def pandas_here(data):
    """The cuDF floor's engine with pandas, which makes the references: the whole data in this process."""
    return dataframe._Here(data, "pandas").load()


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    data = Data(str(tmp_path_factory.mktemp("data")), ROWS)
    assert dataframe.generate(data)
    return data


def test_the_cli_prints_the_table_and_writes_json_and_a_plot(no_gpu, data, tmp_path):
    out, png = tmp_path / "bench.json", tmp_path / "bench.png"
    args = ["bench", "--suite", "dataframe", "--rows", str(ROWS), "--data", data.dir, "--json", str(out),
            "--plot", str(png)]
    result = CliRunner().invoke(gpu, args)
    assert result.exit_code == 0, result.output
    assert "wrote" not in result.output  # the data was there already
    for name, workload in WORKLOADS.items():
        assert re.search(rf"{name}: {re.escape(workload.text)} +\d+\.\d\d s ✓", result.output), result.output
    assert f"{ROWS:,} rows in 8 parquet files" in result.output and "no GPU columns" in result.output
    report = json.loads(out.read_text())
    assert report["columns"] == [f"pandas, {os.cpu_count()} cores"] and report["rows"] == ROWS
    assert [r["workload"] for r in report["runs"]] == list(WORKLOADS)
    assert all(r["correct"] and 0 < r["seconds"] and 0 < r["first_seconds"] for r in report["runs"]), report["runs"]
    assert report["machine"]["gpus"]["state"] == "no-nvml"
    (column,) = report["columns"]
    assert report["startup"][column]["seconds"] > 0 and re.search(rf"start-up: {column} \d+\.\d\d s", result.output)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    logger = logging.getLogger("distributed.shuffle._scheduler_plugin")  # P2P's routine line stays off the console
    line = logger.makeRecord(logger.name, logging.WARNING, __file__, 0, "Shuffle %s initialized by task %r", ("a", "b"),
                             None)
    assert not logger.filter(line)


def test_the_data_is_deterministic_and_reused_while_its_manifest_matches(data, tmp_path):
    assert not dataframe.generate(data)  # the module's data, made once
    lines = []
    again = Data(str(tmp_path / "again"), ROWS)
    assert dataframe.generate(again, log=lines.append) and len(lines) == 8 + 4
    for table in ("left", "right"):
        pd.testing.assert_frame_equal(pd.read_parquet(data.path(table)), pd.read_parquet(again.path(table)))
    left, right = pd.read_parquet(data.path("left")), pd.read_parquet(data.path("right"))
    assert dict(left.dtypes.astype(str)) == {"k": "int64", "x": "float64", "y": "float64", "s": "int32"}
    assert left.k.between(0, ROWS // 20 - 1).all() and left.s.between(0, 999).all() and len(left) == ROWS
    assert right.k.tolist() == list(range(ROWS // 20)) and right.w.dtype == "float64"
    stamp = os.path.getmtime(again.path("left") + "/part-0000.parquet")
    assert not dataframe.generate(again) and os.path.getmtime(again.path("left") + "/part-0000.parquet") == stamp
    other = dataclasses.replace(again, seed=7)  # another manifest: written anew
    assert dataframe.generate(other)
    assert not pd.read_parquet(other.path("left")).equals(left)
    assert json.loads((tmp_path / "again" / "manifest.json").read_text())["seed"] == 7


def test_the_sizes():
    full, small = Data("d", dataframe.SIZES["full"]), Data("d", dataframe.SIZES["small"])
    assert (full.rows, full.files, full.right_rows, full.right_files) == (200_000_000, 40, 10_000_000, 4)
    assert (small.rows, small.files, small.right_rows, small.right_files) == (200_000, 8, 10_000, 4)
    assert (Data("d", 3).files, Data("d", 3).right_rows, Data("d", 3).right_files) == (3, 1, 1)
    assert Data("d", 10**9).files == 200
    assert dataframe.plan(rows=5000).data.dir.endswith("dask-gpu-bench-5000")


def test_the_references_are_pandas_answers(data):
    answers = dataframe.references(dataframe.plan(rows=ROWS, data=data.dir))
    left, right = pd.read_parquet(data.path("left")), pd.read_parquet(data.path("right"))
    assert answers["read"] == {"rows": ROWS, "x": pytest.approx(left.x.sum()), "y": pytest.approx(left.y.sum())}
    assert answers["groupby-high"]["rows"] == left.k.nunique() == answers["shuffle"]["k"]
    assert answers["sort"]["ordered"] is True and len(answers["groupby-low"]) == left.s.nunique()
    assert answers["merge"]["w"] == pytest.approx(left.merge(right, on="k").w.sum())
    assert len(answers["q1"]) == 12 and len(answers["q3"]) == 10




class Broken(dataframe._Here):
    """Wrong in the ways the checks are there for."""

    def shuffle(self, df):
        return [df.iloc[: len(df) // 2], df.iloc[len(df) // 2:]]  # by position: a k in two parts

    def parts(self, df, summary):
        parts = super().parts(df, summary)
        return parts if len(parts) > 1 else [summary(df.iloc[1::2]), summary(df.iloc[::2])]  # two interleaved halves


@pytest.mark.parametrize("name", ["sort", "shuffle"])
def test_the_checks_see_what_is_wrong(data, name):
    engine, answers = Broken(data, "pandas").load(), dataframe.references(dataframe.plan(rows=ROWS, data=data.dir))
    workload = WORKLOADS[name]
    assert not check(workload.answer(engine, workload.run(engine)), answers[name], ROWS)


def test_groups_in_two_partitions_are_wrong(data):
    engine, answers = pandas_here(data), dataframe.references(dataframe.plan(rows=ROWS, data=data.dir))
    halves = [half.groupby("k").agg({"x": "sum", "y": "mean"}) for half in (engine.left[::2], engine.left[1::2])]
    assert not check(WORKLOADS["groupby-high"].answer(engine, halves), answers["groupby-high"], ROWS)


def test_check():
    want = {"rows": 1000, "x": 12.5, "ordered": True, "top": [[1.0, 2.0], [3.0, 4.0]]}
    assert check(dict(want), want, 1000)
    assert check({**want, "x": 12.5 + 1e-11}, want, 1000)  # another order of additions
    assert not check({**want, "rows": 999}, want, 1000)
    assert not check({**want, "x": 12.5001}, want, 1000)
    assert not check({**want, "ordered": False}, want, 1000)
    assert not check({**want, "ordered": 1}, want, 1000)
    assert not check({**want, "top": [[1.0, 2.0]]}, want, 1000)
    assert not check({**want, "top": [[3.0, 4.0], [1.0, 2.0]]}, want, 1000)  # order counts
    assert not check({"rows": 1000}, want, 1000)


def test_references_are_computed_once(data, monkeypatch):
    plan = dataframe.plan(rows=ROWS, data=data.dir, workloads=["read", "q3"])
    first = dataframe.references(plan)
    monkeypatch.setattr(pd, "read_parquet", lambda *a, **k: pytest.fail("read again"))
    assert dataframe.references(plan) == first and os.path.exists(os.path.join(data.dir, dataframe.REFERENCES))


def test_a_failing_workload_is_a_result(data, monkeypatch):
    boom = Workload("1 / 0", lambda e: 1 / 0 if isinstance(e, Here) else 0, lambda e, result: result)  # columns only
    monkeypatch.setitem(WORKLOADS, "boom", boom)

    @contextmanager
    def here(kind, count, plan):
        yield Here(plan.data, "pandas").load()

    class Here(dataframe._Here):
        """A column as the cuDF floor would be, with pandas."""

    monkeypatch.setattr(dataframe, "_column", here)
    seen = []
    plan = dataframe.plan(rows=ROWS, data=data.dir, workloads=["read", "boom", "q1"], repeat=2)
    result = dataframe.run(plan, progress=seen.append, checkpoint=lambda r: seen.append(len(r["runs"])))
    assert seen[0] == "reference answers (pandas)" and seen[-1] == 3 and plan.steps == 4
    read, boom, q1 = result["runs"]
    assert read["correct"] and q1["correct"] and len(q1["all_seconds"]) == 2 and q1["seconds"] == min(q1["all_seconds"])
    assert boom["error"] == "ZeroDivisionError: division by zero"
    assert re.search(r"boom: 1 / 0 +failed", dataframe.table(result))


def test_gpu_columns_and_their_ratios(monkeypatch):
    four = dataclasses.replace(devices.simulated_system(4), state=devices.State.AVAILABLE)
    monkeypatch.setattr(devices, "discover", lambda: four)
    monkeypatch.setattr(dataframe, "find_spec", lambda name: object())
    columns = dataframe.columns("dask-cuda")
    cpu = f"pandas, {os.cpu_count()} cores"
    assert [label for label, _, _ in columns] == [cpu, "dask-gpu, 1 GPU", "dask-gpu, 4 GPUs", "dask-cuda, 1 GPU",
                                                  "dask-cuda, 4 GPUs", "cuDF, one process"]
    seconds = {cpu: 8.0, "dask-gpu, 1 GPU": 2.0, "dask-gpu, 4 GPUs": 1.0, "dask-cuda, 1 GPU": 3.0,
               "dask-cuda, 4 GPUs": 1.5, "cuDF, one process": 1.0}
    runs = [{"workload": "sort", "architecture": a, "seconds": s, "correct": True} for a, s in seconds.items()]
    runs.append({"workload": "q1", "architecture": "dask-gpu, 1 GPU", "seconds": 1.0, "correct": False})
    ratios = {(r["architecture"], r["against"]): r["speedup"] for r in dataframe.ratios(runs, columns)}
    assert ratios == {("dask-gpu, 1 GPU", cpu): 4.0, ("dask-gpu, 1 GPU", "dask-cuda, 1 GPU"): 1.5,
                      ("dask-gpu, 1 GPU", "cuDF, one process"): 0.5, ("dask-gpu, 4 GPUs", cpu): 8.0,
                      ("dask-gpu, 4 GPUs", "dask-cuda, 4 GPUs"): 1.5, ("dask-gpu, 4 GPUs", "cuDF, one process"): 1.0}
    result = {"rows": 10, "files": 1, "right_rows": 1, "data": "d", "repeat": 1, "notes": [],
              "workloads": {"sort": "s", "q1": "q"}, "columns": list(seconds), "runs": runs,
              "ratios": dataframe.ratios(runs, columns), "scaling": []}
    result["startup"] = {"dask-gpu, 1 GPU": {"seconds": 6.25, "worker_ready_seconds": 2.5}, cpu: {"seconds": 1.5}}
    text = dataframe.table(result)
    assert f"start-up: dask-gpu, 1 GPU 6.25 s, each worker ready in 2.50 s; {cpu} 1.50 s" in text, text
    assert re.search(r"dask-gpu, 1 GPU: speed-up over pandas, \d+ cores +4\.00x +-", text), text
    assert re.search(r"dask-gpu, 1 GPU: x the time of cuDF, one process +2\.00x", text)
    assert re.search(r"dask-gpu, 4 GPUs: speed-up over dask-cuda, 4 GPUs +1\.50x", text)
    assert "1.00 s WRONG" in text
    monkeypatch.setattr(dataframe, "find_spec", lambda name: None if name == "cudf" else object())
    assert dataframe.columns() == [(cpu, "cpu", os.cpu_count())]
    assert dataframe.plan(rows=10).notes == ("no GPU columns: cuDF is not installed.",)


@pytest.mark.parametrize(
    "args, match",
    [
        (["--suite", "dataframe", "--shape", "100"], "--shape: options of --suite array, not of --suite dataframe"),
        (["--suite", "dataframe", "--chunks", "10", "--cpu-budget", "5"], "--chunks, --cpu-budget: options of"),
        (["--rows", "100"], "--rows: options of --suite dataframe, not of --suite array"),
        (["--data", "somewhere"], "--data: options of --suite dataframe"),
        (["--suite", "dataframe", "--rows", "0"], "Invalid value for '--rows': 0 is not in the range x>=1"),
        (["--suite", "dataframe", "--rows", "-5"], "-5 is not in the range x>=1"),
        (["--suite", "dataframe", "--size", "medium"], "--size medium: the dataframe suite has small and full"),
        (["--suite", "dataframe", "--workloads", "read,join"], "unknown workloads \\['join'\\]"),
        (["--suite", "dataframe", "--gpus", "1,two"], "--gpus takes GPU counts separated by commas"),
        (["--suite", "dataframe", "--repeat", "0"], "0 is not in the range x>=1"),
        (["--suite", "parquet"], "'parquet' is not one of 'array', 'dataframe'"),
    ],
)
def test_bad_input_is_a_usage_error(args, match):
    result = CliRunner().invoke(gpu, ["bench", *args])
    assert result.exit_code == 2 and re.search(match, result.output), result.output


def test_a_data_path_that_is_a_file_is_a_usage_error(tmp_path):
    path = tmp_path / "data.parquet"
    path.write_text("")
    result = CliRunner().invoke(gpu, ["bench", "--suite", "dataframe", "--data", str(path)])
    assert result.exit_code == 2 and f"--data {path} is a file" in result.output, result.output


@pytest.mark.parametrize("reference", ["cpu", "cudf"])
def test_above_the_in_process_size_the_pandas_or_the_cudf_columns_answers_are_the_reference(data, monkeypatch,
                                                                                              reference):
    monkeypatch.setattr(dataframe, "IN_PROCESS_ROWS", 0)
    monkeypatch.setattr(dataframe, "references", lambda plan: pytest.fail("pandas in this process"))

    @contextmanager
    def here(kind, count, plan):
        engine = (dataframe._Here if kind == reference else Shifted)(plan.data, "pandas")
        engine.kind = kind
        yield engine.load()

    class Shifted(dataframe._Here):
        """A column whose merge is wrong."""

        def load(self):
            super().load()
            self.right = self.right.assign(w=self.right.w + 1)
            return self

    monkeypatch.setattr(dataframe, "_column", here)
    monkeypatch.setattr(dataframe, "columns", lambda compare=None, gpus=None: [
        ("pandas, 2 cores", "cpu", 2), ("other", "gpu", 1), ("cuDF, one process", "cudf", 1)])
    engines = "pandas,dask-gpu" if reference == "cpu" else "dask-gpu,cudf"
    plan = dataframe.plan(rows=ROWS, data=data.dir, workloads=["read", "merge"], engines=engines)
    first = "pandas, 2 cores" if reference == "cpu" else "cuDF, one process"
    assert plan.reference == reference and [c[0] for c in plan.columns] == [first, "other"]
    result = dataframe.run(plan)
    runs = {(r["workload"], r["architecture"]): r["correct"] for r in result["runs"]}
    assert runs == {("read", first): True, ("merge", first): True, ("read", "other"): True,
                    ("merge", "other"): False}
    whose = "pandas" if reference == "cpu" else "cuDF"
    assert any(f"checked against the {whose} column" in note for note in result["notes"])


def test_engines_pick_the_columns_and_large_tables_need_a_reference(monkeypatch, tmp_path):
    monkeypatch.setattr(dataframe, "columns", lambda compare=None, gpus=None: [
        ("pandas, 2 cores", "cpu", 2), ("dask-gpu, 1 GPU", "gpu", 1), ("cuDF, one process", "cudf", 1)])
    plan = dataframe.plan(rows=10, data=str(tmp_path), engines="dask-gpu")
    assert [c[0] for c in plan.columns] == ["dask-gpu, 1 GPU"] and plan.reference == "cpu"
    with pytest.raises(ValueError, match="answers are checked against the pandas or the cudf column"):
        dataframe.plan(rows=dataframe.IN_PROCESS_ROWS + 1, data=str(tmp_path), engines="dask-gpu")
    result = CliRunner().invoke(gpu, ["bench", "--suite", "dataframe", "--engines", "dask-gpu,spark"])
    assert result.exit_code == 2 and "--engines dask-gpu,spark: choose from pandas, dask-gpu" in result.output
