import subprocess
import sys


def run(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_import_without_cuda_libraries():
    """No CuPy, no NVML bindings: import works and discovery reports the state."""
    code = (
        "import sys\n"
        "for m in ('cupy', 'pynvml', 'rmm', 'cudf', 'torch'): sys.modules[m] = None\n"
        "import dask_gpu\n"
        "print(dask_gpu.discover().state.value)"
    )
    assert run(code) == "no-nvml"


def test_import_is_lazy():
    """dask_gpu imports no GPU library beyond what distributed itself imports."""
    heavy = "('cupy', 'rmm', 'cudf', 'torch', 'bokeh', 'numba')"
    loaded = f"sorted(m for m in {heavy} if m in sys.modules)"
    before = run(f"import sys, distributed\nprint({loaded})")
    assert run(f"import sys, distributed, dask_gpu, dask_gpu.cli\nprint({loaded})") == before
