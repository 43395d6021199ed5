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


def test_a_library_is_prepared_as_it_is_imported_even_after_code_asked_whether_it_is_installed(tmp_path, monkeypatch):
    """Asking ``importlib.util.find_spec`` executes nothing: the preparation waits for the import itself."""
    import importlib.util

    from dask_gpu.imports import cancel, when_imported

    (tmp_path / "stand_in_library.py").write_text("VALUE = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "stand_in_library", raising=False)
    prepared = []

    def prepare(module):
        prepared.append(module.VALUE)

    when_imported("stand_in_library", prepare)
    when_imported("stand_in_library", lambda module: prepared.append("second"))
    try:
        assert importlib.util.find_spec("stand_in_library") is not None  # a lookup: nothing prepared yet
        assert importlib.util.find_spec("stand_in_library") is not None
        assert prepared == []
        import stand_in_library  # noqa: F401

        assert prepared == [42, "second"]  # each once, in the order asked
        importlib.reload(stand_in_library)
        assert prepared == [42, "second"]
    finally:
        cancel(prepare)
