"""GPU-aware optimization of dask.array graphs, run within dask's own (before its linear fusion).

Three rewrites:

- **Slices fold into counter-based draws.** ``x[::2, ::2]`` of a :mod:`dask_gpu.random`
  array (or of a ``gpu``-backend ``da.random.default_rng`` block) draws only the kept values.
- **Chains fuse into one kernel.** A reduction (sum, mean, min, max) of elementwise
  operations and slices of GPU data becomes one CUDA kernel that reads each input once,
  through its strides, and never runs a reduction on a strided view (CuPy's reduction of a
  strided view runs on one thread block: 80x slower than on contiguous data).
- **The last steps of mean, var, std, argmin and argmax run on the host** (:mod:`.host_steps`): they work
  on a few numbers a chunk, and each CuPy operation on them is a kernel to compile at first use.

Graphs with no GPU data are returned as they are. A rewritten task checks its inputs when it
runs: CuPy inputs take the kernel, anything else the original operations, one by one.
"""

from __future__ import annotations

import functools
import operator
import sys
import types

import numpy as np
from dask.array.chunk import astype as _astype
from dask.array.chunk import getitem
from dask.blockwise import Blockwise
from dask.core import flatten
from dask.highlevelgraph import HighLevelGraph, MaterializedLayer
from dask.task_spec import Alias, DataNode, GraphNode, Task, TaskRef
from dask.utils import ensure_dict

from dask_gpu.array import distributions, host_steps
from dask_gpu.array.fused import fused_reduce
from dask_gpu.array.plan import AsType, Call, DrawLeaf, Index, Leaf, Plan, _cupy_module, _is_cupy, in_band, sample
from dask_gpu.array.random import Philox, default_rng
from dask_gpu.internals import apply_random, apply_random_func, convert_legacy_graph, execute_subgraph
from dask_gpu.memory.collector import collector_paused

# Python's operators as dask's elementwise tasks call them; a Sym answers each as NumPy's ufunc.
ELEMENTWISE = frozenset(
    {operator.add, operator.sub, operator.mul, operator.truediv, operator.neg, operator.pos, operator.abs, operator.pow,
     operator.lt, operator.le, operator.gt, operator.ge, operator.eq, operator.ne}
)


class _Abort(Exception):
    pass


class _Extract:
    """Turns what a (fused) task computes into an expression over its leaves."""

    def __init__(self, graph):
        self.graph = graph
        self.inlined: set = set()
        self.leaves: list = []
        self.kinds: list[str] = []
        self.memo: dict = {}
        self.gpu = False

    def leaf(self, value, kind="value"):
        self.leaves.append(value)
        self.kinds.append(kind)
        return (DrawLeaf if kind == "draw" else Leaf)(len(self.leaves) - 1)

    def node(self, node, frames):
        """``frames``: the (inner graph, bound placeholders) pairs that ``node`` sits in."""
        if isinstance(node, Alias):
            return self.ref(node.target, frames)
        if isinstance(node, TaskRef):
            return self.ref(node.key, frames)
        if isinstance(node, DataNode):
            node = node.value
        if isinstance(node, Task):
            return self.task(node, frames)
        if np.isscalar(node):
            return node
        self.gpu |= _is_cupy(node)
        return self.leaf(DataNode(None, node))

    def ref(self, key, frames):
        if key not in self.memo:
            self.memo[key] = self._resolve(key, frames)
        return self.memo[key]

    def _resolve(self, key, frames):
        for graph, bindings in reversed(frames):
            if key in bindings:
                return bindings[key]
            if key in graph:
                return self.node(graph[key], frames)
        if self.graph.inlinable(key):
            self.inlined.add(key)
            return self.node(self.graph.dsk[key], [])
        self.gpu |= self.graph.is_gpu(key)
        return self.leaf(TaskRef(key))

    def task(self, task: Task, frames):
        if task.func is execute_subgraph:
            inner, outkey, inkeys, *deps = task.args
            bound = {k: self.node(d, frames) for k, d in zip(inkeys, deps)}
            return self.node(inner[outkey], [*frames, (inner, bound)])
        if task.func in ELEMENTWISE or isinstance(task.func, np.ufunc) and task.func.nout == 1:
            if task.kwargs:
                raise _Abort
            return Call(task.func, tuple(self.node(a, frames) for a in task.args))
        if task.func is _astype and set(task.kwargs) == {"astype_dtype"} and len(task.args) == 1:
            return Call(AsType(np.dtype(_plain(task.kwargs["astype_dtype"]))), (self.node(task.args[0], frames),))
        index = _getitem(task)
        if index is not None:
            return Index(index, self.node(task.args[0], frames))
        draw = as_draw(task)
        if draw is not None:
            self.gpu |= _gpu_draw(draw[0])
            return self.leaf(draw, "draw")
        if any(dep in graph or dep in bound for dep in task.dependencies for graph, bound in frames):
            raise _Abort  # it reads this task's own inner values: it cannot be lifted out as a leaf
        self.gpu |= _mentions_cupy(task)
        seeded = _seeded(task)
        return self.leaf(task) if seeded is None else self.leaf(seeded, "seeded")


def _getitem(task: Task):
    if (task.func is getitem or task.func is operator.getitem) and len(task.args) == 2:
        index = _plain(task.args[1])
        index = index if isinstance(index, tuple) else (index,)
        if all(isinstance(i, slice) for i in index):
            return index
    return None


def as_draw(task: Task):
    """``(Draw, region)`` when ``task`` makes counter-based random values, else None."""
    if task.func is sample and not task.kwargs:
        draw, region = map(_plain, task.args)
        return draw, region
    if task.func is apply_random_func and _plain(task.args[0]) is Philox:
        _, method, seed, size, args, kwargs = map(_plain, task.args)
        if any(isinstance(a, (Task, TaskRef)) for a in (*args, *kwargs.values())):
            return None
        try:
            draw = default_rng(Philox(seed)).draw(method, tuple(args), dict(kwargs), size)
        except (TypeError, ValueError, KeyError):
            return None
        return draw, distributions.whole(draw.shape)
    return None


RESEEDABLE = frozenset({"normal", "standard_normal", "random_sample", "uniform", "lognormal"})


def _seeded(task: Task):
    """dask.array's block of a CuPy ``RandomState`` as plain data, which the fused task draws from
    (:func:`~dask_gpu.array.plan.reseeded_random`) with a generator reused in its thread; else None.

    Making a cuRAND generator allocates and frees device memory, which waits for the GPU;
    seeding one again does not, and draws the same values. As data rather than a task of its
    own, the block costs the scheduler and the worker a tuple to pickle, not a task.
    """
    if task.func is not apply_random or len(task.args) != 6 or task.kwargs:
        return None
    cls, method, state, size, args, kwargs = map(_plain, task.args)
    if not (isinstance(cls, type) and _is_cupy_class(cls) and method in RESEEDABLE):
        return None
    if not isinstance(args, (list, tuple)) or not isinstance(kwargs, dict) or any(
        isinstance(a, (GraphNode, TaskRef)) for a in (size, *args, *kwargs.values())
    ):
        return None  # a parameter computed by another task
    return cls, method, in_band(state), size, tuple(args), kwargs


def _is_cupy_class(cls) -> bool:
    return cls.__module__.split(".")[0] == "cupy"


def _gpu_draw(draw) -> bool:
    return draw.library == "cupy"


def _plain(arg):
    return arg.value if isinstance(arg, DataNode) else arg


def _mentions_cupy(task: Task) -> bool:
    """Whether a task's function or arguments come from CuPy (e.g. CuPy's RandomState)."""
    random = task.func is apply_random or task.func is apply_random_func
    for value in task.args[:1] if random else (task.func, *task.args, *task.kwargs.values()):
        value = _plain(value)
        if value is Philox or _is_cupy(value):
            return True
        if isinstance(value, (type, types.FunctionType, types.BuiltinFunctionType)) and _cupy_module(value.__module__):
            return True
    return False


# --- the graph pass --------------------------------------------------------------------------

REDUCTIONS = {"sum": "sum", "chunk_max": "max", "chunk_min": "min", "mean_chunk": "mean", "max": "max", "min": "min"}


def _reduction(task: Task):
    """(kind, func, kwargs) when ``task`` is dask's chunk step of a sum, mean, min or max."""
    func, kwargs = task.func, dict(task.kwargs)
    if isinstance(func, functools.partial):
        func, kwargs = func.func, {**func.keywords, **kwargs}
    kind = REDUCTIONS.get(getattr(func, "__name__", None))
    if kind is None or getattr(func, "__module__", "") not in ("numpy", "dask.array.reductions"):
        return None
    # Other keywords (nanmean's own sum and numel, say) mean another computation: left alone.
    if len(task.args) != 1 or set(kwargs) - {"dtype", "axis", "keepdims"} or not kwargs.get("keepdims"):
        return None
    return kind, task.func, kwargs


class _Graph:
    """A graph being rewritten: which keys are GPU data, and which can move into their one reader."""

    def __init__(self, dsk: dict, keys, futures=()):
        """``futures``: the keys of persisted values, which dask's task graph leaves out, with their futures."""
        self.dsk, self.keys = dsk, set(keys)
        self.is_gpu = functools.partial(_is_gpu, dsk, {key: _is_cupy(future) for key, future in futures})
        self._readers: dict | None = None
        self._plans: dict = {}

    def plan(self, plan: Plan) -> Plan:
        """One object for equal plans: a task holding many chunk steps pickles its plan once."""
        try:
            return self._plans.setdefault(plan, plan)
        except TypeError:  # an unhashable argument of dask's chunk function
            return plan

    def readers(self, key) -> list:
        if self._readers is None:
            self._readers = {}
            for k, task in self.dsk.items():
                for dep in getattr(task, "dependencies", ()):
                    self._readers.setdefault(dep, []).append(k)
        return self._readers.get(key, [])

    def inlinable(self, key) -> bool:
        """Read by one task only and not asked for: its task can move into that reader."""
        return len(self.readers(key)) == 1 and key not in self.keys and isinstance(self.dsk.get(key), Task)


def rewrite(dsk: dict, keys=()) -> dict:
    """The graph with GPU reductions fused, their last steps on the host and slices folded into draws;
    ``dsk`` itself if none.

    Each reduction's chain is taken whole, from the tasks that only it reads, so this works
    with or without dask's own linear fusion (:func:`optimize` runs it first). Fused chunk
    steps then move into the task that combines them: one scheduler task per combine, not
    one per chunk.
    """
    original, dsk = dsk, convert_legacy_graph(dsk)  # unfused graphs still hold tuple tasks
    graph = _Graph(dsk, keys, [(k, v) for k, v in original.items() if k not in dsk])
    out, gone = dict(dsk), set()
    for key, task in dsk.items():
        if key in gone:
            continue
        new, inlined = _rewrite(key, task, graph)
        if new is task:
            hosted = _on_host(task)
            new = hosted if hosted is not None and graph.is_gpu(key) else task
        if new is not task:
            out[key] = new
            gone |= inlined
    for key in gone:
        out.pop(key, None)
    out = _fold_top_level_slices(out, graph)
    if not gone and all(out[k] is dsk.get(k) for k in out):
        return original
    return _inline_fused(out, graph)


def _on_host(task):
    """:func:`host_steps.on_host` of ``task``, or of the tasks in it where dask fused a chain with the step."""
    if not (isinstance(task, Task) and task.func is execute_subgraph):
        return host_steps.on_host(task)
    inner = {k: host_steps.on_host(t) or t for k, t in task.args[0].items()}
    if all(inner[k] is t for k, t in task.args[0].items()):
        return None
    return Task(task.key, execute_subgraph, inner, *task.args[1:])


def _is_gpu(dsk, memo, key) -> bool:
    """Whether ``key``'s value is GPU data: made by CuPy, or computed from GPU data."""
    stack = [key]
    while stack:
        k = stack[-1]
        if k in memo:
            stack.pop()
            continue
        task = dsk.get(k)
        if not isinstance(task, Task) or _makes_gpu_data(task):
            memo[k] = isinstance(task, Task) or _is_cupy(_plain(task))  # a value, or a future of one
            stack.pop()
            continue
        pending = [d for d in task.dependencies if d not in memo]
        if pending:
            memo.update((d, False) for d in pending if d not in dsk)
            stack.extend(d for d in pending if d in dsk)
            if any(d in dsk for d in pending):
                continue
        memo[k] = any(memo.get(d, False) for d in task.dependencies)
        stack.pop()
    return memo[key]


def _makes_gpu_data(task: Task) -> bool:
    if task.func is execute_subgraph:
        return any(isinstance(t, Task) and _makes_gpu_data(t) for t in task.args[0].values())
    draw = as_draw(task)
    return _gpu_draw(draw[0]) if draw else _mentions_cupy(task)


def _rewrite(key, task, graph: _Graph):
    """(new task, keys moved into it)."""
    if not isinstance(task, Task):
        return task, set()
    inner = task.args[0] if task.func is execute_subgraph else None
    root = inner.get(task.args[1]) if inner is not None else task
    reduction = _reduction(root) if isinstance(root, Task) else None
    fallback = (_fold_slices(task) if inner is not None else task), set()
    if reduction is None:
        return fallback
    extract = _Extract(graph)
    try:
        frames = []
        if inner is not None:
            inkeys, deps = task.args[2], task.args[3:]
            frames = [(inner, {k: extract.node(d, []) for k, d in zip(inkeys, deps)})]
        expr = extract.node(root.args[0], frames)
    except _Abort:
        return fallback
    if not extract.gpu or not _worth_it(expr):
        return fallback
    kind, func, kwargs = reduction
    plan = graph.plan(Plan(expr, kind, func, tuple(sorted(kwargs.items())), tuple(extract.kinds)))
    return Task(key, fused_reduce, plan, *extract.leaves), extract.inlined


def _worth_it(expr) -> bool:
    """A chain with an operation, a slice or a draw: a plain reduction is already fast."""
    return not isinstance(expr, Leaf)


def _fold_slices(task: Task) -> Task:
    """``task`` (a fused one) with each slice of a draw in it drawn directly."""
    sources = (sample, apply_random_func)
    if not any(isinstance(t, Task) and t.func in sources for t in task.args[0].values()):
        return task
    inner = dict(task.args[0])
    changed = False
    for k, t in list(inner.items()):
        source = _sliced_draw(t, inner)
        if source is None or any(
            kk != k and isinstance(v, Task) and source in v.dependencies for kk, v in inner.items()
        ):
            continue
        inner[k] = _drawn_slice(k, t, inner[source])
        del inner[source]
        changed = True
    if not changed:
        return task
    return Task(task.key, execute_subgraph, inner, *task.args[1:])


def _fold_top_level_slices(dsk: dict, graph: _Graph) -> dict:
    for key, task in list(dsk.items()):
        source = _sliced_draw(task, dsk)
        if source is not None and graph.inlinable(source):
            dsk[key] = _drawn_slice(key, task, dsk.pop(source))
    return dsk


def _sliced_draw(task, graph):
    """The key of the draw that ``task`` slices (within ``graph``), where the slice folds into it."""
    index = _getitem(task) if isinstance(task, Task) else None
    source = task.args[0] if index is not None else None
    if not isinstance(source, TaskRef) or not isinstance(graph.get(source.key), Task):
        return None
    draw = as_draw(graph[source.key])
    return source.key if draw and distributions.compose(draw[1], index) is not None else None


def _drawn_slice(key, getitem_task, draw_task):
    draw, region = as_draw(draw_task)
    return Task(key, sample, draw, distributions.compose(region, _getitem(getitem_task)))


BATCH = 64  # chunk steps per scheduler task: tens of milliseconds of GPU work against a few of scheduling
HEAVY = 4  # a chunk step that reads or makes its whole input counts this many drawn-in-place ones


def _inline_fused(dsk: dict, graph: _Graph) -> dict:
    """Fused chunk steps move into the tasks that combine them, until a task holds ``BATCH``.

    A step whose every input is drawn in the kernel counts 1, any other ``HEAVY``: fewer of
    those to a task keeps the work of several GPUs even.

    A chunk step takes well under a millisecond on a GPU, and the scheduler's cost per task
    is of that order: moving steps (and then small combine steps) into the one task that
    reads them keeps the GPU busy. A moved task runs as an argument, in place.
    """
    weight = {
        k: 1 if set(t.args[0].kinds) == {"draw"} else HEAVY
        for k, t in dsk.items()
        if isinstance(t, Task) and t.func is fused_reduce
    }
    while True:
        readers = _Graph(dsk, graph.keys).readers
        moves = {}  # the key a reader names -> the task that moves into it
        for key in [k for k, w in weight.items() if w < BATCH and k in dsk and k not in graph.keys]:
            (reader, *more) = readers(key) or [None]
            if reader is None or more:
                continue
            if isinstance(dsk[reader], Alias):  # dask's fused graphs name chunk results through one
                (key, reader, *more) = [reader, *(readers(reader) or [None])]
                if reader is None or more or key in graph.keys:
                    continue
                moves[key] = dsk[key].target
            else:
                moves[key] = key
            weight[reader] = weight.get(reader, 0) + weight[moves[key]]
        if not moves:
            return dsk
        gone = set(moves) | set(moves.values())
        dsk = {k: _with_inlined(t, dsk, moves) if isinstance(t, Task) else t for k, t in dsk.items() if k not in gone}


def _with_inlined(task: Task, dsk, moves):
    if not any(d in moves for d in task.dependencies):
        return task

    def swap(arg):
        if isinstance(arg, (TaskRef, Alias)):
            key = arg.target if isinstance(arg, Alias) else arg.key
            return dsk[moves[key]] if key in moves else arg
        if isinstance(arg, Task):
            return _with_inlined(arg, dsk, moves)
        if isinstance(arg, (list, tuple)):
            return type(arg)(swap(a) for a in arg)
        return arg

    return Task(task.key, task.func, *map(swap, task.args), **{k: swap(v) for k, v in task.kwargs.items()})


# --- installing it ---------------------------------------------------------------------------


def optimize(dsk, keys, **kwargs):
    """dask.array's ``optimize``, with :func:`rewrite` before its linear fusion, unless ``gpu.array-optimize`` is off.

    The rewrite leaves a task or two for every hundred chunks, so dask's fusion, which costs about as
    much as the rewrite for every task it looks at, runs on those few instead of on every chunk.
    """
    import dask
    from dask.array.optimization import optimize as dask_optimize

    from dask_gpu.parse import flag

    if not flag(dask.config.get("gpu.array-optimize", True), "gpu.array-optimize") or not _worth_a_look(dsk):
        return dask_optimize(dsk, keys, **kwargs)  # nothing from CuPy and no draw: dask's graph as it is
    with collector_paused():
        with dask.config.set({"optimization.fuse.active": False}):
            layers = dask_optimize(dsk, keys, **kwargs)  # blockwise fusion and culling, still layers
        out = rewrite(ensure_dict(layers), flatten(keys) if isinstance(keys, list) else [keys])
        return dask_optimize(out, keys, **kwargs)  # dask's linear fusion, of the tasks the rewrite left


def _worth_a_look(dsk) -> bool:
    """Whether the graph holds a draw or anything from CuPy, found without materializing it.

    Unfused graphs (distributed's) are still layers: sources such as random arrays sit in
    materialized layers, and a blockwise layer's functions in its one task for every block.
    """
    if isinstance(dsk, HighLevelGraph):
        tasks = (
            task
            for layer in dsk.layers.values()
            for task in (
                layer.mapping.values() if isinstance(layer, MaterializedLayer)
                else (layer.task,) if isinstance(layer, Blockwise) else ()
            )
        )
    else:
        tasks = dsk.values()
    if "cupy" not in sys.modules:  # no GPU data can exist before CuPy is imported
        return any(isinstance(t, Task) and _draws(t) for t in tasks)
    return any(_draws(t) or _makes_gpu_data(t) if isinstance(t, Task) else _is_cupy(_plain(t)) for t in tasks)


def _draws(task: Task) -> bool:
    if task.func is execute_subgraph:
        return any(isinstance(t, Task) and _draws(t) for t in task.args[0].values())
    return task.func is sample
