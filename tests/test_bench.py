import json

import pytest
from click.testing import CliRunner

from dask_gpu.benchmarks import seed
from dask_gpu.cli import gpu


def test_bench_cli_prints_table_and_writes_json(no_gpu, tmp_path):
    out = tmp_path / "bench.json"
    result = CliRunner().invoke(gpu, ["bench", "--shape", "600", "--chunks", "200", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "600 x 600" in result.output and "1 CPU core" in result.output and "all CPU cores" in result.output
    assert "skipped" in result.output  # no GPU here
    data = json.loads(out.read_text())
    cpu = [r for r in data["runs"] if "CPU" in r["architecture"]]
    assert len(cpu) == 2 and all(r["correct"] and r["seconds"] > 0 for r in cpu)
    assert data["machine"]["cores"] >= 1 and data["machine"]["gpus"]["state"] == "no-nvml"


def test_cpu_columns_past_the_budget_are_estimates(no_gpu, monkeypatch):
    monkeypatch.setattr(seed, "CPU_BUDGET", 5e4)
    result = seed.run(shape=600, chunks=100, echo=lambda *_: None)
    cpu = [r for r in result["runs"] if "CPU" in r["architecture"]]
    assert all(r["estimated"] and 0 < r["measured_fraction"] < 1 for r in cpu)
    assert all(r["correct"] for r in cpu)
    assert "(estimate)" in seed.table(result)


@pytest.mark.parametrize("shape, chunks, match", [(100, 200, "larger"), (-5, None, "positive")])
def test_bad_sizes(shape, chunks, match):
    with pytest.raises(ValueError, match=match):
        seed.resolve_size("small", shape, chunks)
    result = CliRunner().invoke(gpu, ["bench", "--shape", str(shape)] + (["--chunks", str(chunks)] if chunks else []))
    assert result.exit_code == 2 and match in result.output
