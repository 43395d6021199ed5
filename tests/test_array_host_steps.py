"""The last steps of GPU reductions on the host (dask_gpu.array.host_steps): same answers, given back to the GPU."""

import functools
import os
import pickle
import subprocess
import sys

import dask
import dask.array as da
import numpy as np
import pytest
from dask.task_spec import Task

from dask_gpu import random
from dask_gpu.array import host_steps, optimization


class DeviceArray(np.ndarray):
    """A stand-in for CuPy's array: NumPy's, with CUDA's array interface, counting its copies to the host."""

    copies = 0
    __cuda_array_interface__ = property(lambda self: {})

    def get(self):
        DeviceArray.copies += 1
        return self.view(np.ndarray).copy()



class Squares:
    """NumPy's squares about a mean, for the kernel that dask-gpu gives CuPy."""

    def __call__(self, x, mean, axis=None, keepdims=False):
        return ((np.asarray(x, float) - np.asarray(mean)) ** 2).sum(axis=axis, keepdims=keepdims).view(DeviceArray)


@pytest.fixture
def stand_in(monkeypatch):
    """Chunks of stand-in GPU arrays that the graph pass takes for GPU data; answers given back as them; squares
    about a mean made by NumPy."""
    monkeypatch.setattr(optimization, "_gpu_draw", lambda draw: True)
    monkeypatch.setattr(host_steps, "_squares_kernel", Squares)
    monkeypatch.setattr(DeviceArray, "copies", 0)
    monkeypatch.setattr(host_steps, "to_device",
                        lambda v: np.asarray(v).view(DeviceArray) if isinstance(v, (np.ndarray, np.generic)) else v)
    x = random.default_rng(3).normal(10, 1, size=(60, 40), chunks=(20, 20))
    return x, x.map_blocks(lambda block: block.view(DeviceArray), dtype=x.dtype)


REDUCTIONS = {
    "var": lambda x: x.var(),
    "std": lambda x: x.std(ddof=1),
    "mean": lambda x: (x * 2).mean(),
    "argmax": lambda x: x.argmax(),
    "argmin": lambda x: x.argmin(),
    "nanargmax": lambda x: da.nanargmax(x),
    "argmax along an axis": lambda x: x.argmax(axis=0),
    "var along an axis": lambda x: x.var(axis=1),
}


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_the_last_steps_run_on_the_host_and_give_the_answer_back(stand_in, name):
    x, on_gpu = stand_in
    y = REDUCTIONS[name](on_gpu)
    got = y.compute()
    with dask.config.set({"gpu.array-optimize": False}):
        want = REDUCTIONS[name](x).compute()
    assert np.allclose(np.asarray(got), want, rtol=1e-12)
    assert isinstance(first_block(y), DeviceArray)  # the answer is on the GPU, as dask's meta says
    assert DeviceArray.copies >= 6  # each of the 6 chunks' results went to the host


def first_block(y):
    """``y``'s first output chunk: NumPy's concatenation of stand-ins (the answer's chunks) makes NumPy arrays."""
    return y.blocks[(0,) * y.ndim].compute() if y.ndim else y.compute()


def test_large_results_stay_on_the_gpu(stand_in, monkeypatch):
    monkeypatch.setattr(host_steps, "SMALL", 0)
    x, on_gpu = stand_in
    y = on_gpu.var(axis=0)
    assert np.allclose(np.asarray(y.compute()), x.var(axis=0).compute())
    assert DeviceArray.copies == 0  # dask's own steps, on the chunks' results where they are


def test_the_steps_are_in_the_rewritten_graph_and_numpy_graphs_keep_dask_s(stand_in):
    x, on_gpu = stand_in
    y = on_gpu.var()
    with dask.config.set({"optimization.fuse.active": False}):
        graph = optimized(y)
    steps = [t.func for t in graph.values() if isinstance(t.func, host_steps.Step)]
    assert len(steps) >= 2 and sum(step.last for step in steps) == 1  # combines, then one aggregate
    plain = da.ones((60, 40), chunks=20).var()
    assert not any(isinstance(t.func, host_steps.Step) for t in optimized(plain).values())


def optimized(y):
    return optimization.optimize(y.__dask_graph__(), y.__dask_keys__())


def test_with_a_large_result_moved_ones_return_to_the_gpu_and_other_values_stay(stand_in, monkeypatch):
    monkeypatch.setattr(host_steps, "SMALL", 4)
    large, small = np.ones(8).view(DeviceArray), host_steps.Moved({"n": np.array([2.0])})
    seen = {}
    step = host_steps.Step(lambda pairs, ddof=None: seen.update(pairs=pairs, ddof=ddof), last=False)
    step([large, small], ddof=np.int64(1))
    assert seen["pairs"][0] is large and isinstance(seen["pairs"][1]["n"], DeviceArray)
    assert type(seen["ddof"]) is np.int64 and DeviceArray.copies == 0


def test_a_step_without_gpu_data_runs_as_it_is():
    step = host_steps.Step(lambda pairs, axis=None: pairs["total"] / pairs["n"], last=True)
    answer = step({"total": np.array([6.0]), "n": np.array([3])})
    assert type(answer) is np.ndarray and answer[0] == 2.0


def test_steps_and_moved_results_travel_by_pickle():
    step = pickle.loads(pickle.dumps(host_steps.Step(np.sum, last=False)))
    moved = pickle.loads(pickle.dumps(host_steps.Moved({"n": np.array([2])})))
    assert step.func is np.sum and not step.last and moved.value["n"][0] == 2


@pytest.fixture
def unfused(stand_in, monkeypatch):
    """Persisted stand-in chunks, whose chunk steps are tasks of their own."""
    is_cupy = optimization._is_cupy
    monkeypatch.setattr(optimization, "_is_cupy", lambda value: isinstance(value, DeviceArray) or is_cupy(value))
    monkeypatch.setattr(optimization, "_worth_a_look", lambda dsk: True)  # as where CuPy is imported
    x, on_gpu = stand_in
    return x, on_gpu.persist(scheduler="sync")


CHUNKED = {"var": lambda x: x.var(), "std along an axis": lambda x: x.std(axis=0, ddof=1),
           "mean": lambda x: x.mean(), "mean along an axis": lambda x: x.mean(axis=1),
           "float32 var": lambda x: x.astype("float32").var(), "nanmean": lambda x: da.nanmean(x)}


@pytest.mark.parametrize("name", sorted(CHUNKED))
def test_the_chunk_steps_count_on_the_host_with_dask_s_answers(unfused, name):
    x, on_gpu = unfused
    y = CHUNKED[name](on_gpu)
    counted = [f for f in functions(optimized(y)) if isinstance(f, host_steps.CountChunk)]
    assert bool(counted) == (name != "nanmean")  # nanmean counts only numbers: dask's own step
    with dask.config.set({"gpu.array-optimize": False}):
        want = CHUNKED[name](x).compute()
    assert np.allclose(np.asarray(y.compute()), want, rtol=1e-6 if "float32" in name else 1e-12)


def functions(graph) -> list:
    """The functions of the graph's tasks, those in dask's fused tasks included."""
    tasks, found = list(graph.values()), []
    while tasks:
        task = tasks.pop()
        if isinstance(task, Task):
            found.append(task.func)
            tasks.extend(a for a in task.args if isinstance(a, dict) for a in a.values())
    return found


def test_a_chunk_s_count_comes_from_its_shape():
    x = np.ones((4, 6, 5))
    assert host_steps.count(x, axis=(0, 2), keepdims=True).tolist() == [[[20.0]] * 6]
    assert host_steps.count(x, axis=1, dtype=np.int64).tolist() == [[6] * 5] * 4
    assert host_steps.count(x).shape == () and host_steps.count(x) == 120


def test_a_small_chunk_result_moves_to_the_host_and_a_large_one_stays(unfused, monkeypatch):
    from dask.array.reductions import mean_chunk, moment_chunk

    block = np.arange(12.0).reshape(3, 4).view(DeviceArray)
    var = host_steps.CountChunk(functools.partial(moment_chunk, implicit_complex_dtype=False, dtype=np.float64))
    moved = var(block, axis=(0, 1), keepdims=True)
    want = moment_chunk(np.arange(12.0).reshape(3, 4), axis=(0, 1), keepdims=True)
    assert isinstance(moved, host_steps.Moved) and set(moved.value) == {"total", "n", "M"}
    assert all(np.allclose(moved.value[k], want[k]) and type(moved.value[k]) is np.ndarray for k in want)
    monkeypatch.setattr(host_steps, "SMALL", 0)
    mean = host_steps.CountChunk(functools.partial(mean_chunk, dtype=np.float64))(block, axis=(0,), keepdims=True)
    assert isinstance(mean["n"], DeviceArray) and isinstance(mean["total"], DeviceArray)
    assert mean["n"].tolist() == [[3.0] * 4]


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_on_cupy_the_answers_equal_numpy_s_and_stay_cupy(name):
    import cupy

    x = da.random.default_rng(0).random((2000, 1500), chunks=500)
    got = REDUCTIONS[name](x.map_blocks(cupy.asarray)).compute()
    assert isinstance(got, cupy.ndarray)
    assert np.allclose(cupy.asnumpy(got), REDUCTIONS[name](x).compute(), rtol=1e-10)


def test_the_scheduler_taking_a_graph_in_knows_the_type_of_a_persisted_value(simulate, monkeypatch):
    """The array optimizer runs as the scheduler materializes a graph; the futures there know no type, and the
    scheduler taking the graph in is asked for it (none is asked outside that)."""
    import types

    from distributed import Client, futures_of, wait

    from dask_gpu import LocalCUDACluster, internals

    asked = []
    known = internals.known_type_name
    monkeypatch.setattr(internals, "known_type_name", lambda key: asked.append((key, known(key))) or asked[-1][1])
    monkeypatch.setitem(sys.modules, "cupy", sys.modules.get("cupy") or types.ModuleType("cupy"))  # GPU data may be
    simulate(1)
    with LocalCUDACluster(dashboard_address=False) as cluster, Client(cluster) as client:
        x = da.ones((40, 30), chunks=10).persist()
        wait(x)
        assert float(client.compute((x > 0.5).sum()).result()) == 1200
        assert asked and {name for _, name in asked} == {"numpy.ndarray"}
        assert {key for key, _ in asked} <= {future.key for future in futures_of(x)}
        assert known(asked[0][0]) is None  # outside a graph's taking in


FAKE_CUPY = '''
"""CuPy's array as far as dask and dask-gpu look at it: NumPy's, counting its copies to the host."""
import types
import numpy as np

class ndarray(np.ndarray):
    copies = 0
    __cuda_array_interface__ = property(lambda self: {})

    def get(self):
        ndarray.copies += 1
        return self.view(np.ndarray).copy()

    @property
    def data(self):
        base = self
        while isinstance(base.base, np.ndarray):
            base = base.base
        return types.SimpleNamespace(mem=types.SimpleNamespace(ptr=base.ctypes.data, size=base.nbytes))

ndarray.__module__ = "cupy._core.core"
concatenate, take, tensordot, empty, einsum = np.concatenate, np.take, np.tensordot, np.empty, np.einsum
def asarray(a, **kwargs): return np.asarray(a).view(ndarray)
def asnumpy(a, **kwargs): return np.asarray(a).view(np.ndarray)

class ReductionKernel:  # the one dask-gpu makes: squares about a mean
    def __init__(self, *args, **kwargs): pass
    def __call__(self, x, mean, axis=None, keepdims=False):
        return asarray(((np.asarray(x, float) - np.asarray(mean)) ** 2).sum(axis=axis, keepdims=keepdims))
'''

PERSISTED = '''
import dask.array as da
from distributed import Client, wait
import cupy
from dask_gpu import LocalCUDACluster

if __name__ == "__main__":
    with LocalCUDACluster(n_workers=1, dashboard_address=False) as cluster, Client(cluster) as client:
        x = client.persist(da.random.default_rng(0).random((200, 150), chunks=50).map_blocks(cupy.asarray))
        wait(x)
        value = float(x.var().map_blocks(cupy.asnumpy, dtype=float).compute())  # to the client as NumPy
        copies = list(client.run(lambda: __import__("cupy").ndarray.copies).values())
        print(value, copies)
'''


def test_over_persisted_gpu_chunks_on_a_cluster_the_last_steps_run_on_the_host(tmp_path):
    """The scheduler takes the graph in with the persisted chunks as futures of unknown type: it still finds
    them to be GPU data, and the worker's last steps copy the chunks' results to the host."""
    (tmp_path / "cupy").mkdir()
    (tmp_path / "cupy" / "__init__.py").write_text(FAKE_CUPY)
    (tmp_path / "persisted.py").write_text(PERSISTED)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
           "DASK_GPU__SIMULATE": "1"}
    done = subprocess.run([sys.executable, str(tmp_path / "persisted.py")], env=env, capture_output=True, text=True,
                          timeout=100)
    assert done.returncode == 0, done.stderr[-3000:]
    value, copies = done.stdout.strip().splitlines()[-1].split(" ", 1)
    x = da.random.default_rng(0).random((200, 150), chunks=50)
    assert abs(float(value) - float(x.var().compute())) < 1e-12
    assert copies != "[0]" and int(copies.strip("[]")) >= 12  # each of the 12 chunks' results went to the host
