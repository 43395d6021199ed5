"""``dask gpu bench``: the seeds' workloads on each architecture, as a table, JSON and a plot."""

import dataclasses
import json
import re
from importlib.util import find_spec

import pytest
from click.testing import CliRunner

from dask_gpu import devices
from dask_gpu.benchmarks import common, seed
from dask_gpu.cli import gpu

SMALL = ["--shape", "1200", "--chunks", "400"]


def test_bench_prints_the_table_and_writes_json_and_a_plot(no_gpu, tmp_path):
    out, png = tmp_path / "bench.json", tmp_path / "bench.png"
    result = CliRunner().invoke(gpu, ["bench", *SMALL, "--json", str(out), "--plot", str(png)])
    assert result.exit_code == 0, result.output
    for name, text in seed.WORKLOADS.items():
        assert f"{name}: {text[0]}" in result.output
    assert "1 CPU core" in result.output and "no GPU columns" in result.output
    data = json.loads(out.read_text())
    assert {(r["workload"], r["architecture"]) for r in data["runs"]} == {
        (w, col) for w in seed.WORKLOADS for col in data["columns"]
    }
    assert all(r["correct"] and r["seconds"] > 0 for r in data["runs"])
    assert data["machine"]["gpus"]["state"] == "no-nvml"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cpu_columns_past_the_budget_are_estimates(no_gpu, monkeypatch, tmp_path):
    monkeypatch.setattr(seed.os, "cpu_count", lambda: 2)
    out = tmp_path / "bench.json"
    args = ["--shape", "2400", "--chunks", "200", "--cpu-budget", "3e5", "--json", str(out)]
    assert CliRunner().invoke(gpu, ["bench", *args]).exit_code == 0
    result = json.loads(out.read_text())
    assert result["cpu_budget"] == 3e5
    assert all(r["estimated"] and 0 < r["measured_fraction"] < 1 and r["correct"] for r in result["runs"])
    assert "(est.)" in seed.table(result)


def test_columns_for_each_gpu_count_and_dask_cuda(monkeypatch):
    four = dataclasses.replace(devices.simulated_system(4), state=devices.State.AVAILABLE)
    monkeypatch.setattr(seed.devices, "discover", lambda: four)
    monkeypatch.setattr(seed, "find_spec", lambda name: object())
    labels = [label for label, _, _ in seed.architectures("dask-cuda")]
    assert labels[2:] == ["1 GPU", "4 GPUs", "dask-cuda, 1 GPU", "dask-cuda, 4 GPUs"]
    labels = [label for label, _, _ in seed.architectures(None, gpus="4,2,1,2")]
    assert labels[2:] == ["1 GPU", "2 GPUs", "4 GPUs"]
    with pytest.raises(ValueError, match="each count must be 1 to the number of GPUs visible here \\(4\\)"):
        seed.architectures(None, gpus="1,8")


@pytest.mark.parametrize("visible, counts", [(None, [1, 4]), ("0", [1]), ("2,3", [1, 2]), ("3,1,0", [1, 3])])
def test_every_suite_s_gpu_columns_follow_the_visible_devices(monkeypatch, visible, counts):
    from dask_gpu.benchmarks import common, dataframe, ml
    from dask_gpu.benchmarks.tpch import suite as tpch

    four = dataclasses.replace(devices.simulated_system(4), state=devices.State.AVAILABLE)
    monkeypatch.setattr(devices, "discover", lambda: four)
    for module in (seed, dataframe, tpch, ml, common):
        monkeypatch.setattr(module, "find_spec", lambda name: object())
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    for columns in (seed.architectures(), dataframe.columns(), tpch.columns(), ml.columns()):
        assert sorted({count for _, kind, count in columns if kind == "gpu"}) == counts
    with pytest.raises(ValueError, match=f"GPUs visible here \\({counts[-1]}\\)"):
        seed.architectures(None, gpus=str(counts[-1] + 1))


def test_scaling_is_each_gpu_columns_speedup_over_one_gpu_of_the_same_cluster():
    columns = {"1 GPU": ("gpu", 1), "4 GPUs": ("gpu", 4), "dask-cuda, 1 GPU": ("dask-cuda", 1),
               "dask-cuda, 4 GPUs": ("dask-cuda", 4), "2 CPU cores": ("cpu", 2)}
    seconds = {"1 GPU": 8.0, "4 GPUs": 2.5, "dask-cuda, 1 GPU": 20.0, "dask-cuda, 4 GPUs": 5.0, "2 CPU cores": 1.0}
    runs = [{"workload": "sum", "architecture": a, "seconds": s, "correct": True} for a, s in seconds.items()]
    runs.append({"workload": "mean", "architecture": "4 GPUs", "error": "failed"})
    rows = {r["architecture"]: r for r in seed.scaling(runs, columns)}
    assert set(rows) == {"4 GPUs", "dask-cuda, 4 GPUs"}
    assert rows["4 GPUs"]["speedup"] == pytest.approx(3.2) and rows["4 GPUs"]["efficiency"] == pytest.approx(0.8)
    assert rows["dask-cuda, 4 GPUs"]["efficiency"] == pytest.approx(1.0)
    table = seed.table({"shape": 8, "chunks": 4, "columns": list(columns), "workloads": {"sum": "s"},
                        "runs": runs, "notes": [], "scaling": list(rows.values())})
    assert "sum on 4 GPUs: 3.20 x one GPU (80% efficiency)" in table


def test_compare_without_dask_cuda_says_so(no_gpu, monkeypatch):
    monkeypatch.setattr(seed, "find_spec", lambda name: None if name == "dask_cuda" else find_spec(name))
    result = CliRunner().invoke(gpu, ["bench", *SMALL, "--workloads", "sum", "--compare", "dask-cuda"])
    assert result.exit_code == 0 and "dask-cuda is not installed" in result.output


def test_a_column_whose_cluster_fails_to_start_is_a_result(no_gpu, monkeypatch):
    columns = [("1 CPU core", "cpu", 1), ("1 GPU", "gpu", 1)]
    monkeypatch.setattr(seed, "architectures", lambda compare, gpus=None: columns)
    real = seed._context

    def context(kind, count, protocol):
        if kind == "gpu":
            raise RuntimeError("no such device")
        return real(kind, count, protocol)

    monkeypatch.setattr(seed, "_context", context)
    seen = []  # what a run stopped after each column would have kept
    result = seed.run(seed.plan(shape=400, chunks=200, workloads=["sum", "mean"]),
                      checkpoint=lambda r: seen.append(len(r["runs"])))
    assert seen == [2, 4]
    gpu_runs = [r for r in result["runs"] if r["architecture"] == "1 GPU"]
    assert [r["workload"] for r in gpu_runs] == ["sum", "mean"]
    assert all(r["error"] == "RuntimeError: no such device" for r in gpu_runs)
    assert all(r["correct"] for r in result["runs"] if r["architecture"] == "1 CPU core")
    assert "failed" in seed.table(result)


def test_a_gpu_run_past_its_time_is_cancelled_and_reported():
    import time

    import dask
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=1, processes=False, dashboard_address=":0") as cluster, Client(cluster) as client:
        slow = dask.delayed(time.sleep)(3)
        start = time.perf_counter()
        with pytest.raises(TimeoutError, match="no result after 0.5 s"):
            seed._compute(slow, client, 0.5)
        assert time.perf_counter() - start < 2
        assert seed._compute(dask.delayed(sum)([1, 2]), client, 5) == 3


def test_the_protocol_is_ucx_for_several_gpus_where_distributed_ucxx_is_installed(monkeypatch):
    one, two = [("1 CPU core", "cpu", 1), ("1 GPU", "gpu", 1)], [("2 GPUs", "gpu", 2), ("8 CPU cores", "cpu", 8)]
    monkeypatch.setattr(common, "find_spec", lambda name: None)
    assert seed.default_protocol(two) == "tcp"
    monkeypatch.setattr(common, "find_spec", lambda name: object() if name == "distributed_ucxx" else None)
    assert seed.default_protocol(two) == "ucx"
    assert seed.default_protocol(one) == "tcp"  # nothing moves between GPUs
    engines = [("DuckDB, 16 cores", "duckdb", 16), ("dask-gpu, 1 GPU", "gpu", 1),
               ("cudf-polars, 1 GPU", "cudf-polars", 1)]
    assert seed.default_protocol(engines) == "tcp"  # the cores of an engine of one process are no workers


@pytest.mark.parametrize(
    "args, match",
    [
        (["--shape", "100", "--chunks", "200"], "larger"),
        (["--shape", "-5"], "-5 is not in the range x>=1"),
        (["--shape", "0"], "Invalid value for '--shape': 0 is not in the range x>=1"),
        (["--chunks", "0"], "Invalid value for '--chunks': 0 is not in the range x>=1"),
        (["--workloads", "summ"], "did you mean 'sum'"),
        (["--workloads", "sum,fft"], "unknown workloads \\['fft'\\]"),
        (["--compare", "ray"], "'ray' is not 'dask-cuda'"),
        (["--repeat", "0"], "0 is not in the range x>=1"),
        (["--protocol", "sctp"], "'sctp' is not one of 'tcp', 'ucx'"),
        (["--cpu-budget", "0"], "0.0 is not in the range x>0"),
        (["--timeout", "-1"], "-1.0 is not in the range x>0"),
        (["--timeout", "nan"], "--timeout \\(nan\\)"),
        (["--gpus", "1,two"], "--gpus takes GPU counts separated by commas"),
        (["--gpus", "0,1"], "--gpus 0,1: each count must be 1"),
    ],
)
def test_bad_input_is_a_usage_error(args, match):
    result = CliRunner().invoke(gpu, ["bench", *args])
    assert result.exit_code == 2 and re.search(match, result.output), result.output
    assert "running" not in result.output  # refused before the progress bar


@pytest.mark.parametrize("shape, chunks", [(0, None), (None, 0), (0, 0), (-1, 10)])
def test_a_zero_size_is_refused_not_the_default(shape, chunks):
    with pytest.raises(ValueError, match="--shape and --chunks must be whole numbers >= 1"):
        seed.resolve_size("small", shape, chunks)


def test_the_table_marks_right_and_wrong_answers():
    runs = [{"workload": "sum", "architecture": "1 CPU core", "seconds": 1.0, "correct": True},
            {"workload": "sum", "architecture": "1 GPU", "seconds": 2.0, "correct": False}]
    table = seed.table({"shape": 8, "chunks": 4, "columns": ["1 CPU core", "1 GPU"], "workloads": {"sum": "s"},
                        "runs": runs, "notes": []})
    assert "1.00 s ✓" in table and "2.00 s WRONG" in table


@pytest.mark.gpu
@pytest.mark.parametrize("protocol", ["tcp", pytest.param("ucx", marks=pytest.mark.skipif(
    find_spec("distributed_ucxx") is None, reason="needs distributed-ucxx"))])
def test_the_gpu_columns_are_right(protocol):
    result = seed.run(seed.plan(shape=4000, chunks=1000, workloads=["sum", "transpose"], protocol=protocol, repeat=2))
    gpu_runs = [r for r in result["runs"] if "GPU" in r["architecture"]]
    assert gpu_runs and all(r.get("correct") for r in gpu_runs), gpu_runs
    assert all(len(r["all_seconds"]) == 2 and r["seconds"] == min(r["all_seconds"]) for r in gpu_runs)
    assert result["protocol"] == protocol and f"over {protocol}, best of 2" in seed.table(result)


def test_a_gpu_columns_start_up_says_how_long_its_workers_took_to_get_ready(simulate):
    import types

    from distributed import Client

    from dask_gpu import LocalCUDACluster

    simulate(2)
    with LocalCUDACluster(dashboard_address=False) as cluster, Client(cluster) as client:
        context = types.SimpleNamespace(client=client)
        assert 0 < common.worker_startup(context)["worker_ready_seconds"] < 60  # simulated: dask.array imported
        for name, seconds in (("gpu-0", 1.5), ("gpu-1", 2.25)):
            client.run(lambda dask_worker, s=seconds: setattr(dask_worker.plugins["dask-gpu"], "warmed_seconds", s),
                       workers=[cluster.workers[name].worker_address])
        assert common.worker_startup(context) == {"worker_ready_seconds": 2.25}  # side by side: the slowest
    assert common.worker_startup(types.SimpleNamespace()) == {}  # cuDF in this process, DuckDB, Polars


def test_every_suite_fills_in_one_interface_and_plans_from_the_command_s_options(tmp_path):
    from dask_gpu import benchmarks
    from dask_gpu.benchmarks.common import Options, Plan

    for name in benchmarks.SUITES:
        module = benchmarks.suite(name)
        assert all(callable(getattr(module, member)) for member in ("planned", "run", "table", "plot")), name
        assert module.WORKLOADS and issubclass(module.Plan, Plan)
    array = benchmarks.suite("array").planned(Options(shape=400, chunks=200, workloads=("sum",)))
    assert (array.shape, array.chunks, array.workloads) == (400, 200, ("sum",)) and array.steps == len(array.columns)
    frames = benchmarks.suite("dataframe").planned(Options(rows=1000, data=str(tmp_path), workloads=("read",)))
    assert frames.data.rows == 1000 and frames.steps == 1 + len(frames.columns)  # the references first
    assert benchmarks.suite("dataframe").data_lines(frames) == frames.data.files + frames.data.right_files


def test_a_computed_answer_is_released_at_once_so_that_a_run_again_computes_anew(tmp_path):
    """A future held in a reference cycle lives until the collector runs; a run of the same collection meanwhile
    would find its answer on the cluster, not compute it."""
    import gc

    import dask
    from distributed import Client, LocalCluster

    from dask_gpu.benchmarks.common import compute, settle

    runs = tmp_path / "runs"

    @dask.delayed(pure=True)
    def counted(path):
        with open(path, "a") as f:
            f.write("run\n")
        with open(path) as f:
            return len(f.readlines())

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        submit = client.compute

        def in_a_cycle(*args, **kwargs):
            future = submit(*args, **kwargs)
            future.cycle = [future]
            return future

        client.compute = in_a_cycle
        gc.disable()
        try:
            assert [compute(counted(str(runs)), client, 30) for _ in range(3)] == [1, 2, 3]
        finally:
            gc.enable()
        held = compute(counted(str(runs)), client, 30, persist=True)
        assert held.compute() == 4
        held = None  # as the dataframe suite lets a persisted run go before the next
        gc.collect()
        settle(client)
        assert compute(counted(str(runs)), client, 30, persist=True).compute() == 5


def test_the_bytes_a_shuffle_sends_between_workers_and_its_seconds_are_measured():
    import pandas as pd
    import dask.dataframe as dd
    from distributed import Client, LocalCluster, get_task_stream

    from dask_gpu.benchmarks.common import compute, sent, shuffle_seconds

    frame = dd.from_pandas(pd.DataFrame({"k": range(20_000), "x": 1.0}), npartitions=4)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        before = sent(client)
        with get_task_stream(client=client) as stream:
            assert compute(frame.x.sum(), client, 30) == 20_000
        assert sent(client)["shuffle_bytes"] == before["shuffle_bytes"] and shuffle_seconds(stream.data) == 0.0
        with get_task_stream(client=client) as stream:
            assert compute(frame.shuffle("k", shuffle_method="p2p").x.sum(), client, 30) == 20_000
        after = sent(client)
        assert after["shuffle_bytes"] - before["shuffle_bytes"] > 20_000 * 16 / 2  # half the rows at least
        assert 0 < shuffle_seconds(stream.data) < 30


def test_the_spread_of_a_task_stream_over_its_workers():
    from dask_gpu.benchmarks.common import spread

    def task(worker, *spans):
        return {"worker": worker, "startstops": [{"action": action, "start": a, "stop": b} for action, a, b in spans]}

    stream = [task("a", ("compute", 0.0, 1.0)), task("a", ("transfer", 1.0, 1.5), ("compute", 1.5, 2.5)),
              task("b", ("compute", 0.5, 3.0))]
    assert spread(stream) == {"workers": 2, "busy_seconds": 4.5, "span_seconds": 3.0}
    assert spread([]) == {"workers": 0, "busy_seconds": 0.0, "span_seconds": 0.0}


def test_the_tpch_table_names_each_column_s_largest_shuffle():
    from dask_gpu.benchmarks.tpch import suite as tpch

    def run(workload, architecture, moved, seconds):
        return {"workload": workload, "architecture": architecture,
                "phases": {"shuffle_bytes": moved, "shuffle_seconds": seconds}}

    result = {"runs": [run("q3", "dask-gpu, 4 GPUs", 2e9, 0.5), run("q9", "dask-gpu, 4 GPUs", 6e9, 0.3),
                       run("q9", "dask-gpu, 1 GPU", 0, 0.0), {"workload": "q1", "architecture": "DuckDB"}]}
    assert tpch.shuffle_lines(result) == ["dask-gpu, 4 GPUs: largest shuffle q9, 6.00 GB between workers in 0.30 s "
                                          "(20.0 GB/s)"]


def test_timed_runs_a_warm_up_then_the_timed_calls_each_after_its_preparation():
    events, texts = [], []
    value, times = common.timed(lambda: events.append("run") or len(events), 2, texts.append,
                                lambda: events.append("prepare"))
    assert events == ["prepare", "run"] * 3 and value == 6 and len(times) == 3
    assert texts == ["warm-up run", "timed run 1 of 2", "timed run 2 of 2"]
    assert common.timing([5.0, 2.0, 1.0]) == {"first_seconds": 5.0, "seconds": 1.0, "all_seconds": [2.0, 1.0]}
    assert common.timing([5.0, 2.0]) == {"first_seconds": 5.0, "seconds": 2.0}  # one timed call: no list
