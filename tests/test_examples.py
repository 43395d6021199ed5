"""Every script in examples/ runs on the CPU: simulated GPU workers, NumPy or pandas chunks, small sizes.

Each runs as a user runs it (``python examples/NAME.py ARGS``, a process of its own) and must exit 0, say in
one line what stands in for the GPU, print its results as right, and leave no traceback.
"""

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
SIMULATED = "no GPU with CuPy here: 2 simulated GPU workers, NumPy chunks"

CASES = {
    "seed_2tb.py": [
        (["--size", "2000", "--chunks", "500"], [SIMULATED, r"0.032 GB, 2 GPU worker\(s\): .*right \(expected 11\)"]),
        (["--size", "2000", "--chunks", "250", "--rng", "counter", "--mean"], [r"mean 1[01]\.\d+, right"]),
    ],
    "seed_svd.py": [(["--rows", "2000", "--cols", "100", "--chunks", "500"],
                     [SIMULATED, r"u \(2000, 100\), s \(100,\), v \(100, 100\); relative reconstruction error "
                                 r"\S+, right"])],
    "random_arrays.py": [(["--size", "800"], [SIMULATED, "chunks 400 and 100: every value the same: True",
                                               r"drawn sliced (\S+), sliced after drawing \1: equal",
                                               r"uniform\(0, 2\): .*right", r"exponential\(3\): .*right",
                                               r"lognormal\(0, 0.5\): .*right"])],
    "dataframe_pipeline.py": [(["--rows", "20000", "--partitions", "4"],
                               ["(cuDF and dask-cudf are not installed here|no GPU here): "
                                "pandas partitions on simulated GPU workers",
                                r"centre +\d+\.\d\d +\d+", "20,000 orders in 4 partitions: merge, groupby, sort "
                                                           "match pandas"])],
    "mixed_workers.py": [(["--tasks", "20"], [
        r"compute\(resources=GPU\) tasks ran on \{'gpu-0': \d+, 'gpu-1': \d+\}, seeing GPUs \['0,1', '1,0'\]; "
        r"results right",
        r"annotate\(resources=GPU\) tasks ran on \{'gpu-0': \d+, 'gpu-1': \d+\}, .*results right",
        r"map\(workers=cpu-\*\) tasks ran on \{'cpu-0': 20\}, seeing GPUs \['none'\]; results right"])],
    "ml_search.py": [(["--rows", "2000", "--features", "16"], [
        "no GPU with CuPy here: 2 simulated GPU workers, NumPy arrays",
        r"fits on 2 simulated GPU workers: scikit-learn on NumPy arrays \(simulated GPUs\)",
        r"GridSearchCV\(PCA\), by log-likelihood: 32 fits on \{'gpu-0': \d+, 'gpu-1': \d+\}, none on CPU workers; "
        r"best n_components=\d+, the same scores as scikit-learn here: right",
        r"RandomizedSearchCV\(Ridge\), by R²: 32 fits on \{'gpu-0': \d+, 'gpu-1': \d+\}, none on CPU workers; "
        r".*right"])],
    "spilling.py": [(["--arrays", "20", "--mb", "4", "--limit", "16MB"], [
        "no GPU with CuPy here: a simulated GPU worker holding host arrays registered as a device type",
        r"20 arrays of 3.81 MiB through a device_memory_limit of 16MB: .* [1-9]\d* moves to host .*, [1-9]\d* back; "
        r"sums right"])],
}
NEEDS = {"ml_search.py": ("dask_ml", "sklearn")}  # what an example imports beyond dask-gpu's own requirements


def skip_without_its_libraries(name):
    for module in NEEDS.get(name, ()):
        pytest.importorskip(module)


RUNS = [pytest.param(name, args, expected, id=f"{name}-{i}") for name, runs in CASES.items()
        for i, (args, expected) in enumerate(runs)]


def test_every_example_is_run_here_and_guards_its_main():
    scripts = sorted(p.name for p in EXAMPLES.glob("*.py"))
    assert scripts == sorted(CASES)
    for name in scripts:
        tree = ast.parse((EXAMPLES / name).read_text())
        guards = [node for node in tree.body if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test)]
        assert guards, f"{name} has no if __name__ == '__main__': guard (spawned workers would run it)"
        assert ast.get_docstring(tree), f"{name} does not say what it shows"


@pytest.mark.timeout(180)
@pytest.mark.parametrize("name, args, expected", RUNS)
def test_example_runs_on_the_cpu(name, args, expected, tmp_path):
    skip_without_its_libraries(name)
    env = {**os.environ, "DASK_GPU__SIMULATE": "2", "PYTHONPATH": os.pathsep.join([str(ROOT),
                                                                                   os.environ.get("PYTHONPATH", "")])}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    done = subprocess.run([sys.executable, str(EXAMPLES / name), *args], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=170)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    for pattern in expected:
        assert re.search(pattern, done.stdout), f"{pattern!r} not in:\n{done.stdout}"
    assert "WRONG" not in done.stdout and "DIFFER" not in done.stdout


@pytest.mark.gpu
@pytest.mark.timeout(300)
@pytest.mark.parametrize("name, args", [pytest.param(name, args, id=f"{name}-{i}") for name, runs in CASES.items()
                                        for i, (args, _) in enumerate(runs)])
def test_example_runs_on_a_gpu(name, args, tmp_path):
    skip_without_its_libraries(name)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("DASK_GPU__SIMULATE", None)
    done = subprocess.run([sys.executable, str(EXAMPLES / name), *args], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=290)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "simulated" not in done.stdout and "NumPy chunks" not in done.stdout, done.stdout  # the GPU's own path
    assert re.search(r"\bright\b|match pandas", done.stdout) and "WRONG" not in done.stdout, done.stdout
