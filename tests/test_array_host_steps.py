"""The last steps of GPU reductions on the host (dask_gpu.array.host_steps): same answers, given back to the GPU."""

import pickle

import dask
import dask.array as da
import numpy as np
import pytest

from dask_gpu import random
from dask_gpu.array import host_steps, optimization


class DeviceArray(np.ndarray):
    """A stand-in for CuPy's array: NumPy's, with CUDA's array interface, counting its copies to the host."""

    copies = 0
    __cuda_array_interface__ = property(lambda self: {})

    def get(self):
        DeviceArray.copies += 1
        return self.view(np.ndarray).copy()



@pytest.fixture
def stand_in(monkeypatch):
    """Chunks of stand-in GPU arrays that the graph pass takes for GPU data; answers given back as them."""
    monkeypatch.setattr(optimization, "_gpu_draw", lambda draw: True)
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


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_on_cupy_the_answers_equal_numpy_s_and_stay_cupy(name):
    import cupy

    x = da.random.default_rng(0).random((2000, 1500), chunks=500)
    got = REDUCTIONS[name](x.map_blocks(cupy.asarray)).compute()
    assert isinstance(got, cupy.ndarray)
    assert np.allclose(cupy.asnumpy(got), REDUCTIONS[name](x).compute(), rtol=1e-10)
