"""GPU-aware graph optimization: fused reductions, slices folded into draws, NumPy graphs left alone."""

import gc
import sys
import types

import dask
import dask.array as da
import distributed.protocol
import numpy as np
import pytest
from dask._task_spec import Task, _execute_subgraph
from dask.array.optimization import optimize as dask_optimize
from distributed.protocol.serialize import ToPickle

from dask_gpu import random
from dask_gpu.array import optimization, plan
from dask_gpu.array.fused import fused_reduce
from dask_gpu.array.plan import Call, DrawLeaf, Index

gpu = pytest.mark.gpu


def optimized(x):
    return optimization.optimize(x.__dask_graph__(), x.__dask_keys__())


def fused_tasks(graph):
    """The fused tasks, at the top of the graph or moved into the tasks that read them."""

    def walk(node):
        if isinstance(node, Task):
            yield from [node] if node.func is fused_reduce else []
            for arg in (*node.args, *node.kwargs.values()):
                yield from walk(arg)
        elif isinstance(node, (list, tuple, dict)):  # a dict: the inner graph of dask's fused task
            for arg in node.values() if isinstance(node, dict) else node:
                yield from walk(arg)

    return [t for task in graph.values() for t in walk(task)]


def test_dask_uses_it_once_dask_gpu_is_imported():
    import dask_gpu.array

    assert dask.config.get("array_optimize") is dask_gpu.array.optimize


NUMPY_WORKLOADS = {
    "seed": lambda x: (x + 1)[::2, ::2].sum(),
    "mean": lambda x: np.exp(x * 2)[1::3].mean(),
    "axis": lambda x: (x - x.T)[::2].max(axis=0),
    "plain": lambda x: x.sum(),
}


@pytest.mark.parametrize("cupy_imported", [False, True])
@pytest.mark.parametrize("workload", sorted(NUMPY_WORKLOADS))
def test_numpy_graphs_are_left_alone(workload, cupy_imported, monkeypatch):
    if cupy_imported:  # the whole pass runs, and still changes nothing
        monkeypatch.setitem(sys.modules, "cupy", types.ModuleType("cupy"))
    x = da.random.default_rng(0).normal(size=(40, 40), chunks=10)
    y = NUMPY_WORKLOADS[workload](x)
    ours, dasks = optimized(y), dask_optimize(y.__dask_graph__(), y.__dask_keys__())
    assert ours.keys() == dasks.keys() and all(repr(ours[k]) == repr(dasks[k]) for k in ours)
    assert not fused_tasks(ours)
    assert optimization.rewrite(dasks, y.__dask_keys__()) is dasks  # the whole pass, too, changes nothing


@pytest.fixture
def as_if_gpu(monkeypatch):
    """dask_gpu.random's NumPy draws count as GPU data: graphs are rewritten, and run on NumPy."""
    monkeypatch.setattr(optimization, "_gpu_draw", lambda draw: True)


CHAINS = [
    lambda x: (x + 1)[::2, ::2].sum(),
    lambda x: (x + 1)[::2, ::2].mean(),
    lambda x: np.sqrt(np.abs(x * 2.5 - 1))[3:, ::-2].max(),
    lambda x: (x[::2] * x[1::2]).min(),
    lambda x: (x.astype("f4") + 1)[::3].sum(dtype="f8"),
    lambda x: (x > 10.5).sum(),  # a count: booleans summed as integers
    lambda x: (x[::2] <= x[1::2]).mean(),
    lambda x: ((x * 0 + 3) == 3)[:, ::3].sum() + (x != x).sum(),
]


@pytest.mark.parametrize("dask_fuses", [True, False], ids=["dask-fused", "unfused"])  # distributed: unfused
@pytest.mark.parametrize("workload", CHAINS)
def test_gpu_chains_become_one_task_that_computes_the_same(as_if_gpu, workload, dask_fuses):
    x = random.default_rng(3).normal(10, 1, size=(60, 40), chunks=(20, 20))
    y = workload(x)
    with dask.config.set({"optimization.fuse.active": dask_fuses}):
        graph = optimized(y)
        assert fused_tasks(graph)
        fast = y.compute()  # rewritten, and every fused task falls back to NumPy's operations
    with dask.config.set({"gpu.array-optimize": False}):
        assert np.allclose(fast, y.compute(), rtol=1e-12)


def test_chunk_steps_move_into_the_task_that_combines_them(as_if_gpu):
    x = random.default_rng(3).normal(10, 1, size=(400, 400), chunks=(20, 20))  # 400 chunks
    with dask.config.set({"optimization.fuse.active": False}):
        graph = optimized((x + 1)[::2, ::2].sum())
    counts = [len(fused_tasks({k: t})) for k, t in graph.items()]
    assert sum(counts) == 400 and len(graph) < 20 and max(counts) <= 4 * optimization.BATCH


def test_chunk_steps_that_read_their_input_are_batched_fewer_to_a_task(as_if_gpu):
    x = random.default_rng(3).normal(10, 1, size=(800, 400), chunks=(20, 20))
    with dask.config.set({"optimization.fuse.active": False}):
        graph = optimized((x[::2] * x[1::2]).sum())  # its chunk steps read two computed chunks
    counts = [len(fused_tasks({k: t})) for k, t in graph.items()]
    assert sum(counts) == 800 and max(counts) <= optimization.BATCH // optimization.HEAVY


def test_the_seed_chain_is_a_slice_of_a_sum_of_a_draw(as_if_gpu):
    x = random.default_rng(1).normal(10, 1, size=(40, 40), chunks=20)
    (task, *_) = fused_tasks(optimized((x + 1)[::2, ::2].sum()))
    plan = task.args[0]
    assert plan.reduction == "sum" and isinstance(plan.expr, Index)
    assert isinstance(plan.expr.child, Call) and plan.expr.child.args[1] == 1
    assert isinstance(plan.expr.child.args[0], DrawLeaf)


def test_switched_off_by_config(as_if_gpu):
    x = (random.default_rng(1).normal(size=(40, 40), chunks=20) + 1)[::2, ::2].sum()
    with dask.config.set({"gpu.array-optimize": False}):
        assert not fused_tasks(optimized(x))
    assert fused_tasks(optimized(x))
    with dask.config.set({"gpu.array-optimize": "false"}), pytest.raises(ValueError, match="gpu.array-optimize"):
        optimized(x)  # a string is not read as True


def test_slices_fold_into_draws_whatever_the_library():
    x = random.default_rng(1).random(size=(40, 40), chunks=20)
    graph = optimized(x[::2, 1::3] + 1)
    samples = [
        t for task in graph.values() if isinstance(task, Task) and task.func is _execute_subgraph
        for t in task.args[0].values()
        if isinstance(t, Task) and t.func is plan.sample
    ]
    assert len(samples) == 4 and all(t.args[1][0].step == 2 for t in samples)


def test_a_value_read_twice_is_one_input(as_if_gpu):
    y = random.default_rng(1).normal(size=(40, 40), chunks=20) + 1
    for task in fused_tasks(optimized((y * y)[::2].sum())):
        assert task.args[0].kinds == ("draw",)


# --- on a GPU ---------------------------------------------------------------------------------


def compute_both(expression):
    """(optimized, not optimized) results, as NumPy."""
    import cupy

    fast = expression.compute()
    with dask.config.set({"gpu.array-optimize": False}):
        slow = expression.compute()
    return [cupy.asnumpy(v) if hasattr(v, "get") else np.asarray(v) for v in (fast, slow)]


@gpu
def test_the_seed_code_with_cupy_randomstate_fuses_and_agrees():
    import cupy

    rs = da.random.RandomState(RandomState=cupy.random.RandomState)
    x = rs.normal(10, 1, size=(4000, 4000), chunks=(1000, 1000))
    y = (x + 1)[::2, ::2]
    assert fused_tasks(optimized(y.sum()))
    fast, slow = compute_both(y.sum())
    assert np.allclose(fast, slow, rtol=1e-12)
    fast, slow = compute_both(y.mean())
    assert np.allclose(fast, slow, rtol=1e-12) and abs(float(fast) - 11) < 1e-2


@gpu
@pytest.mark.parametrize(
    "workload",
    [
        lambda x: (x + 1)[::2, ::2].sum(),
        lambda x: (x + 1)[::2, ::2].mean(),
        lambda x: np.sqrt(np.abs(x * 2.5 - 1))[3:, ::-2].max(),
        lambda x: (x[::2] * x[1::2]).min(),
        lambda x: (x.astype("f4") + 1)[::3].sum(),
        lambda x: (x - 10)[::2].sum(axis=0),
        lambda x: (x > 10.5).sum(),
        lambda x: (x[::2] <= x[1::2]).mean(),
        lambda x: ((x * 0 + 3) == 3)[:, ::3].sum() + (x != x).sum(),
    ],
)
def test_dask_gpu_random_on_the_gpu_agrees_with_numpy(workload):
    def make():
        return random.default_rng(2).normal(10, 1, size=(3000, 2000), chunks=(1000, 1000))

    expected = workload(make()).compute()
    with dask.config.set({"array.backend": "gpu"}):
        x = make()
    fast, slow = compute_both(workload(x))
    assert np.allclose(fast, expected, rtol=1e-9) and np.allclose(slow, expected, rtol=1e-9)


@gpu
def test_the_backend_default_rng_folds_slices_and_fuses():
    with dask.config.set({"array.backend": "gpu"}):
        x = da.random.default_rng(4).normal(10, 1, size=(4000, 4000), chunks=1000)
    y = (x + 1)[::2, ::2].sum()
    assert fused_tasks(optimized(y))
    fast, slow = compute_both(y)
    assert np.allclose(fast, slow, rtol=1e-12)


@gpu
@pytest.mark.parametrize("method", sorted(optimization.RESEEDABLE))
def test_a_reseeded_cupy_randomstate_draws_the_same_values(method):
    import cupy
    from dask.array.random import _apply_random, random_state_data

    args = {"normal": (10.0, 2.0), "uniform": (-1.0, 3.0), "lognormal": (0.0, 0.5)}.get(method, ())
    for state in random_state_data(3):
        fresh = _apply_random(cupy.random.RandomState, method, state, (300, 200), args, {})
        again = plan.reseeded_random(cupy.random.RandomState, method, state, (300, 200), args, {})
        assert bool((fresh == again).all())


class FakeCupyRandomState(np.random.RandomState):
    """Stands for CuPy's RandomState (by its module's name) in a graph that is only built."""


FakeCupyRandomState.__module__ = "cupy.random._generator"


@pytest.mark.parametrize("dask_fuses", [True, False], ids=["dask-fused", "unfused"])
def test_the_seed_code_with_cupy_randomstate_is_found_and_fused(dask_fuses, monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", types.ModuleType("cupy"))
    rs = da.random.RandomState(RandomState=FakeCupyRandomState)  # the seed's code, with CuPy's class
    y = (rs.normal(10, 1, size=(400, 400), chunks=(100, 100)) + 1)[::2, ::2].sum()
    with dask.config.set({"optimization.fuse.active": dask_fuses}):
        graph = optimized(y)
    tasks = fused_tasks(graph)
    assert len(tasks) == 16 and all(t.args[0].kinds == ("seeded",) for t in tasks)  # each thread reuses its generator
    leaves = [t.args[1] for t in tasks]
    assert all(isinstance(leaf, tuple) and leaf[0] is FakeCupyRandomState for leaf in leaves)  # data, not tasks
    assert all(isinstance(leaf[2], bytes) for leaf in leaves)  # seed states travel in their task's message
    top = [t for t in graph.values() if isinstance(t, Task)]
    assert len(distributed.protocol.dumps([ToPickle(t) for t in top])) <= 2 * len(top) + 2  # no frame per state
    with dask.config.set({"optimization.fuse.active": dask_fuses}):
        fast = y.compute()  # NumPy under the fake class: every fused task takes the original operations
        with dask.config.set({"gpu.array-optimize": False}):
            assert fast == pytest.approx(y.compute(), rel=1e-12)


@pytest.mark.parametrize("side, plans", [(400, 1), (450, 4)], ids=["even-chunks", "edge-chunks"])
def test_equal_chunk_steps_share_one_plan(side, plans, monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", types.ModuleType("cupy"))
    rs = da.random.RandomState(RandomState=FakeCupyRandomState)
    y = (rs.normal(10, 1, size=(side, side), chunks=(100, 100)) + 1)[::2, ::2].sum()
    tasks = fused_tasks(optimized(y))
    assert len(tasks) == (-(-side // 100)) ** 2
    assert len({id(t.args[0]) for t in tasks}) == plans  # a task of many chunk steps pickles each plan once


def test_the_pass_runs_with_the_cycle_collector_paused(monkeypatch, collector_on):
    monkeypatch.setitem(sys.modules, "cupy", types.ModuleType("cupy"))
    seen, rewrite = [], optimization.rewrite

    def watched(*args):
        seen.append(gc.isenabled())
        return rewrite(*args)

    monkeypatch.setattr(optimization, "rewrite", watched)
    rs = da.random.RandomState(RandomState=FakeCupyRandomState)
    assert fused_tasks(optimized((rs.normal(size=(40, 40), chunks=10) + 1).sum()))
    assert seen == [False] and gc.isenabled()


def test_a_randomstate_block_with_a_computed_parameter_stays_a_task(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", types.ModuleType("cupy"))
    rs = da.random.RandomState(RandomState=FakeCupyRandomState, seed=3)
    loc = da.arange(400, chunks=100).astype(float)  # each block's parameter is another task's result
    y = (rs.normal(loc, 1, size=(400, 400), chunks=(100, 100)) + 1)[::2, ::2].sum()
    tasks = fused_tasks(optimized(y))
    assert tasks and all("seeded" not in t.args[0].kinds for t in tasks)
    fast = y.compute()
    with dask.config.set({"gpu.array-optimize": False}):
        assert fast == pytest.approx(y.compute(), rel=1e-12)


def test_dataframe_and_delayed_graphs_never_reach_the_gpu_pass(monkeypatch):
    import dask.dataframe as dd
    import pandas as pd

    def no(*args, **kwargs):
        raise AssertionError("the GPU graph pass ran")

    monkeypatch.setattr(optimization, "rewrite", no)
    df = dd.from_pandas(pd.DataFrame({"s": np.arange(100) % 7, "x": np.arange(100.0)}), npartitions=4)
    assert df.groupby("s").x.sum().compute().sum() == 4950
    assert dask.delayed(sum)([1, 2, 3]).compute() == 6
    assert float(da.ones(100, chunks=10).sum().compute()) == 100  # NumPy chunks: dask's own graph, untouched


def test_a_computed_future_of_cupy_data_is_gpu_data(monkeypatch):
    def future(kind, key="k"):
        return type("Future", (), {"__module__": "distributed.client", "type": kind, "key": key})()

    cupy_array = type("ndarray", (), {"__module__": "cupy"})
    assert plan._is_cupy(future(cupy_array)) and not plan._is_cupy(future(np.ndarray))
    assert not plan._is_cupy(future(None))  # pending, and no scheduler here knows it
    # a future unpickled by the scheduler knows no type; the scheduler that holds its key does
    known = {"on-gpu": "cupy._core.core.ndarray", "on-host": "numpy.ndarray"}
    monkeypatch.setattr(plan.internals, "known_type_name", known.get)
    assert plan._is_cupy(future(None, "on-gpu")) and not plan._is_cupy(future(None, "on-host"))


def test_persisted_chunks_whose_futures_say_gpu_fuse(monkeypatch):
    from distributed import Client, LocalCluster, wait

    with LocalCluster(n_workers=1, processes=False, dashboard_address=":0") as cluster, Client(cluster):
        x = da.random.default_rng(5).random((300, 200), chunks=100).persist()
        wait(x)
        y = (x > 0.5).sum()
        assert not fused_tasks(optimized(y))  # NumPy chunks: left alone
        is_cupy = plan._is_cupy
        monkeypatch.setattr(optimization, "_is_cupy", lambda v: type(v).__name__ == "Future" or is_cupy(v))
        monkeypatch.setitem(sys.modules, "cupy", sys.modules.get("cupy") or types.ModuleType("cupy"))
        assert fused_tasks(optimized(y))  # futures of GPU data: the fused kernel, checking its inputs as it runs
        assert int(y.compute()) == int((x.compute() > 0.5).sum())


@gpu
def test_the_scheduler_taking_a_graph_in_knows_its_futures_hold_cupy_chunks(monkeypatch):
    import cupy
    from distributed import Client, futures_of, wait

    from dask_gpu import LocalCUDACluster, internals

    asked = []
    known = internals.known_type_name
    monkeypatch.setattr(internals, "known_type_name", lambda key: asked.append((key, known(key))) or asked[-1][1])
    with LocalCUDACluster(n_workers=1, dashboard_address=False) as cluster, Client(cluster) as client:
        x = da.random.default_rng(5).random((3000, 2000), chunks=1000)
        y = x.map_blocks(cupy.asarray).persist()
        wait(y)
        got = client.compute((y > 0.5).sum()).result()  # materialized, and optimized, by the scheduler
        assert int(got) == int((x > 0.5).sum().compute())
        assert {key for key, _ in asked} <= {future.key for future in futures_of(y)}
        assert asked and all(name.startswith("cupy") for _, name in asked)


@gpu
def test_persisted_cupy_chunks_fuse_on_a_cluster():
    import cupy
    from distributed import Client, wait

    from dask_gpu import LocalCUDACluster

    with LocalCUDACluster(n_workers=1, dashboard_address=False) as cluster, Client(cluster):
        x = da.random.default_rng(5).random((3000, 2000), chunks=1000)
        y = x.map_blocks(cupy.asarray).persist()
        wait(y)
        for workload in [lambda a: (a > 0.5).sum(), lambda a: (a * 2 + 1)[::2].mean()]:
            assert fused_tasks(optimized(workload(y)))  # the client knows the chunks are CuPy's
            assert np.allclose(float(workload(y).compute()), float(workload(x).compute()), rtol=1e-9)
