"""``dask gpu bench``: the seeds' workloads on each architecture, as a table, JSON and a plot."""

import dataclasses
import json
import re
from importlib.util import find_spec

import pytest
from click.testing import CliRunner

from dask_gpu import devices
from dask_gpu.benchmarks import seed
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


def test_cpu_columns_past_the_budget_are_estimates(no_gpu, monkeypatch):
    monkeypatch.setattr(seed, "CPU_BUDGET", 3e5)
    monkeypatch.setattr(seed.os, "cpu_count", lambda: 2)
    result = seed.run(shape=2400, chunks=200, workloads=["sum", "mean", "transpose", "svd"])
    assert all(r["estimated"] and 0 < r["measured_fraction"] < 1 and r["correct"] for r in result["runs"])
    assert "(est.)" in seed.table(result)


def test_columns_for_each_gpu_count_and_dask_cuda(monkeypatch):
    four = dataclasses.replace(devices.simulated_system(4), state=devices.State.AVAILABLE)
    monkeypatch.setattr(seed.devices, "discover", lambda: four)
    monkeypatch.setattr(seed, "find_spec", lambda name: object())
    labels = [label for label, _, _ in seed.architectures("dask-cuda")]
    assert labels[2:] == ["1 GPU", "4 GPUs", "dask-cuda, 1 GPU", "dask-cuda, 4 GPUs"]


def test_compare_without_dask_cuda_says_so(no_gpu, monkeypatch):
    monkeypatch.setattr(seed, "find_spec", lambda name: None if name == "dask_cuda" else find_spec(name))
    result = CliRunner().invoke(gpu, ["bench", *SMALL, "--workloads", "sum", "--compare", "dask-cuda"])
    assert result.exit_code == 0 and "dask-cuda is not installed" in result.output


@pytest.mark.parametrize(
    "args, match",
    [
        (["--shape", "100", "--chunks", "200"], "larger"),
        (["--shape", "-5"], "positive"),
        (["--workloads", "sum,fft"], "unknown workloads \\['fft'\\]"),
        (["--compare", "ray"], "'ray' is not 'dask-cuda'"),
    ],
)
def test_bad_input_is_a_usage_error(args, match):
    result = CliRunner().invoke(gpu, ["bench", *args])
    assert result.exit_code == 2 and re.search(match, result.output), result.output


@pytest.mark.gpu
def test_the_gpu_columns_are_right():
    result = seed.run(shape=4000, chunks=1000, workloads=["sum", "transpose"])
    gpu_runs = [r for r in result["runs"] if "GPU" in r["architecture"]]
    assert gpu_runs and all(r.get("correct") for r in gpu_runs), gpu_runs
