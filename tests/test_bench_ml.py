"""``dask gpu bench --suite ml``: its columns, data, checks, ratios, table and JSON (CPU, simulated GPUs)."""

import json
import os
import re

import numpy as np
import pytest
from click.testing import CliRunner

pytest.importorskip("sklearn")
pytest.importorskip("dask_ml")

from dask_gpu.benchmarks import ml, models  # noqa: E402
from dask_gpu.cli import gpu  # noqa: E402

CPU = f"scikit-learn, {os.cpu_count()} cores"


def test_the_small_size_runs_scikit_learn_and_writes_json(no_gpu, tmp_path):
    out = tmp_path / "ml.json"
    result = CliRunner().invoke(gpu, ["bench", "--suite", "ml", "--size", "small", "--json", str(out)])
    assert result.exit_code == 0, result.output
    for name, workload in {**ml.WORKLOADS, **ml.MODELS}.items():
        assert re.search(rf"{name}: {re.escape(workload.text)} +\d+\.\d\d s ✓", result.output), result.output
    assert "2,000 rows, 4 folds, 8 candidates: 32 fits a search" in result.output and "no GPU columns" in result.output
    assert "models: 20,000 rows x 16 float32 features in 8 chunks, scored on the first 20,000" in result.output
    report = json.loads(out.read_text())
    assert report["suite"] == "ml" and report["columns"] == [CPU] and report["rows"] == 2000
    assert [r["workload"] for r in report["runs"]] == [*ml.WORKLOADS, *ml.MODELS]
    searches = [r for r in report["runs"] if r["workload"] in ml.WORKLOADS]
    assert all(r["correct"] and r["fits"] == 32 and len(r["scores"]) == 8 and r["seconds"] > 0 for r in searches)
    trained = {r["workload"]: r for r in report["runs"] if r["workload"] in ml.MODELS}
    assert trained["linear"]["score"] > 0.99 and all(r["correct"] and r["seconds"] > 0 for r in trained.values())
    assert trained["kmeans"]["score"] == pytest.approx(20_000 * models.FEATURES, rel=0.05)  # the blobs' noise
    assert report["features"] == {"pca": 16, "ridge": 16, "logistic": 16} and report["model_rows"] == 20_000
    assert {"scikit-learn", "dask-ml"} <= set(report["libraries"]) and report["machine"]["gpus"]["state"] == "no-nvml"


def test_gpu_columns_on_simulated_gpus_match_scikit_learn_and_have_ratios(simulate, monkeypatch):
    simulate(2)
    monkeypatch.setattr(ml, "available_gpus", lambda *args: 2)  # the GPU columns, on the NumPy fallback
    shared = f"dask-gpu, 1 GPU, {ml.AT_ONCE} fits at once"
    assert [label for label, _, _ in ml.columns()] == [CPU, "dask-gpu, 1 GPU", "dask-gpu, 2 GPUs", shared]
    plan = ml.plan("small", rows=400, workloads=["pca", "logistic"], gpus="1")
    assert [label for label, _, _ in plan.columns] == [CPU, "dask-gpu, 1 GPU", shared] and plan.steps == 6
    result = ml.run(plan)
    gpu_runs = [r for r in result["runs"] if r["architecture"] != CPU]
    assert len(gpu_runs) == 4 and all(r["correct"] for r in gpu_runs), gpu_runs
    cpu = {r["workload"]: r for r in result["runs"] if r["architecture"] == CPU}
    assert all(r["best_params"] == cpu[r["workload"]]["best_params"] for r in gpu_runs)
    assert {(r["workload"], r["architecture"]) for r in result["ratios"]} == {
        (w, a) for w in ("pca", "logistic") for a in ("dask-gpu, 1 GPU", shared)}
    assert all(r["against"] == CPU and r["speedup"] > 0 for r in result["ratios"])
    text = ml.table(result)
    assert re.search(rf"dask-gpu, 1 GPU: speed-up over {CPU} +\d+\.\d\dx +\d+\.\d\dx", text), text
    assert "dask-gpu on 1 simulated GPU worker: scikit-learn on NumPy arrays (simulated GPUs)" in text
    assert f"dask-gpu on 1 simulated GPU worker, {ml.AT_ONCE} fits at once on each: scikit-learn on NumPy" in text


def test_the_data_is_seeded_low_rank_with_balanced_enough_classes():
    a, b = ml.data(500, 16), ml.data(500, 16)
    assert all(np.array_equal(a[k], b[k]) for k in a) and a["X"].shape == (500, 16) and a["y"].shape == (500,)
    spectrum = np.linalg.svd(a["X"] - a["X"].mean(0), compute_uv=False) ** 2
    assert spectrum[:4].sum() > 0.9 * spectrum.sum()  # rank 4 of 16, the rest noise: PCA's search has an answer
    assert set(np.unique(a["classes"])) == set(range(ml.CLASSES))


def test_models_on_simulated_gpus_are_made_on_the_workers_and_match_scikit_learn(simulate, monkeypatch):
    simulate(1)
    monkeypatch.setattr(ml, "available_gpus", lambda *args: 1)  # Dask-ML's estimators stand in for cuML's
    plan = ml.plan("small", workloads=["kmeans", "linear"], gpus="1", model_rows=4000)
    assert [kind for _, kind, _ in plan.columns] == ["cpu", "gpu", "gpu-shared"] and plan.steps == 4
    made = []
    monkeypatch.setattr(models, "chunk", lambda *args, chunk=models.chunk: made.append(args) or chunk(*args))
    result = ml.run(plan)
    assert result["columns"] == [CPU, "dask-gpu, 1 GPU"]  # several fits on one GPU train no model
    gpu_runs = [r for r in result["runs"] if r["architecture"] == "dask-gpu, 1 GPU"]
    assert [r["workload"] for r in gpu_runs] == ["kmeans", "linear"] and all(r["correct"] for r in gpu_runs), gpu_runs
    assert len(made) == len(models.bounds(4000, 8))  # here, once, for scikit-learn: the workers made their own
    text = ml.table(result)
    assert "models on dask-gpu: Dask-ML's KMeans and LinearRegression on NumPy chunks (simulated GPUs)" in text
    assert re.search(rf"dask-gpu, 1 GPU: speed-up over {CPU} +\d+\.\d\dx +\d+\.\d\dx", text), text


def test_the_models_rows_are_the_same_chunk_by_chunk_in_any_process():
    whole = models.rows_here(1000, 4)
    parts = [models.chunk(i, start, stop) for i, (start, stop) in enumerate(models.bounds(1000, 4))]
    assert models.bounds(1000, 4) == [(0, 250), (250, 500), (500, 750), (750, 1000)]
    assert all(np.array_equal(np.concatenate([p[k] for p in parts]), whole[k]) for k in ("X", "y"))
    assert whole["X"].dtype == np.float32 and whole["X"].shape == (1000, models.FEATURES)
    assert not np.array_equal(parts[0]["X"], parts[1]["X"][:250])  # each chunk its own seed


def test_a_model_is_scored_on_the_first_rows_by_its_fitted_attributes():
    import types

    sample = models.rows_here(2000, 2)
    from sklearn.cluster import KMeans
    from sklearn.linear_model import LinearRegression

    kmeans = KMeans(models.CLUSTERS, random_state=0).fit(sample["X"])
    assert models.inertia(kmeans, sample) == pytest.approx(kmeans.inertia_, rel=1e-4)
    one_centre = types.SimpleNamespace(cluster_centers_=sample["X"][:1])
    assert models.inertia(one_centre, sample) > 10 * kmeans.inertia_  # a wrong answer scores far off
    linear = LinearRegression().fit(sample["X"], sample["y"])
    assert models.r2(linear, sample) == pytest.approx(linear.score(sample["X"], sample["y"]), rel=1e-6)


def test_ratios_are_over_scikit_learn_for_right_runs_only():
    columns = [(CPU, "cpu", 16), ("dask-gpu, 1 GPU", "gpu", 1)]
    runs = [{"workload": "pca", "architecture": CPU, "seconds": 8.0, "correct": True},
            {"workload": "pca", "architecture": "dask-gpu, 1 GPU", "seconds": 2.0, "correct": True},
            {"workload": "ridge", "architecture": CPU, "seconds": 1.0, "correct": True},
            {"workload": "ridge", "architecture": "dask-gpu, 1 GPU", "seconds": 0.5, "correct": False}]
    assert ml.ratios(runs, columns) == [{"workload": "pca", "architecture": "dask-gpu, 1 GPU", "against": CPU,
                                         "speedup": 4.0}]


@pytest.mark.parametrize(
    "args, match",
    [
        (["--size", "medium"], "--size medium: the ml suite has small and full"),
        (["--workloads", "pca,lasso"], r"unknown workloads \['lasso'\]"),
        (["--compare", "dask-cuda"], "--compare: the ml suite has no dask-cuda column"),
        (["--rows", "1000"], "--rows: options of --suite dataframe, not of --suite ml"),
        (["--data", "somewhere"], "--data: options of --suite dataframe or tpch, not of --suite ml"),
    ],
)
def test_bad_input_is_a_usage_error(args, match):
    result = CliRunner().invoke(gpu, ["bench", "--suite", "ml", *args])
    assert result.exit_code == 2 and re.search(match, result.output), result.output


def test_too_few_rows_for_the_folds_or_the_chunks_is_an_error():
    with pytest.raises(ValueError, match="rows must be at least 32 for 4 folds of 4 classes, not 10"):
        ml.plan("small", rows=10)
    with pytest.raises(ValueError, match="model_rows must be at least 64, not 10"):
        ml.plan("small", model_rows=10)


@pytest.mark.gpu
def test_the_gpu_column_is_right():
    plan = ml.plan("small", gpus="1")
    result = ml.run(plan)
    gpu_runs = [r for r in result["runs"] if r["architecture"] == "dask-gpu, 1 GPU"]
    assert len(gpu_runs) == 5 and all(r.get("correct") for r in gpu_runs), gpu_runs
    assert "scikit-learn on CuPy arrays" in ml.table(result)
    assert "models on dask-gpu: cuML's Dask estimators on CuPy chunks" in ml.table(result)
