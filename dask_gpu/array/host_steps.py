"""The last steps of GPU reductions, run on the host: no CUDA kernel to compile for a handful of numbers.

dask's mean, var, std, argmin and argmax reduce each chunk to a few numbers, then combine and aggregate
those with more array operations. On CuPy each of them is a CUDA kernel that a new machine compiles at
its first use, about a tenth of a second each: a first ``x.var()`` compiled 18 kernels, 11 of them for these
steps, and a first ``x.argmax()`` 13, most to turn each chunk's position into a flat index. Here a chunk's
result moves to the host when it is small, those steps run on NumPy, and the last one gives its answer
back to the GPU. The chunks' reductions themselves stay on the GPU.

A result moved to the host travels as :class:`Moved`, so that the last step knows to give its answer back
as CuPy; steps that see no GPU data, or large results (a reduction along one axis of large chunks), run as
they are.
"""

from __future__ import annotations

import functools

import numpy as np
from dask.task_spec import Task

SMALL = 4096  # elements: a chunk's result up to this size moves to the host, one small copy a chunk

# dask.array.reductions' steps after the chunk's: the last ones give their answer back to the GPU
STEPS = {"mean_combine": False, "moment_combine": False, "arg_combine": False,
         "mean_agg": True, "moment_agg": True, "arg_agg": True, "nanarg_agg": True}


class Moved:
    """A reduction step's result, moved from the GPU to the host."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __reduce__(self):
        return Moved, (self.value,)


def on_host(task: Task) -> Task | None:
    """``task`` with its reduction step on the host where it is one of dask's steps above; None otherwise."""
    if not isinstance(task, Task):
        return None
    names = [getattr(f, "__name__", None) for f in _functions(task.func)]
    if "arg_chunk" in names:
        return Task(task.key, ArgChunk(task.func), *task.args, **task.kwargs)
    last = [STEPS[name] for name in names if name in STEPS]
    return Task(task.key, Step(task.func, last[0]), *task.args, **task.kwargs) if last else None


def _functions(func):
    """The functions that ``func`` calls as dask.array.reductions' own: through partials and compositions."""
    if isinstance(func, functools.partial):
        yield from _functions(func.func)
    elif type(func).__name__ == "Compose":  # toolz's compose, as dask's arg reductions use it
        for inner in (func.first, *func.funcs):
            yield from _functions(inner)
    elif getattr(func, "__module__", None) == "dask.array.reductions":
        yield func


class Step:
    """A combine or aggregate step that runs on NumPy copies of its small GPU inputs; with ``last``, its
    answer goes back to the GPU."""

    def __init__(self, func, last: bool):
        self.func, self.last = func, last

    def __call__(self, *args, **kwargs):
        arrays, moved = _device_arrays((args, kwargs))
        if not arrays and not moved:  # no GPU data after all: as it is
            return self.func(*args, **kwargs)
        if any(a.size > SMALL for a in arrays):  # large results stay on the GPU, moved ones return there
            return self.func(*_convert(args, _same, to_device), **_convert(kwargs, _same, to_device))
        answer = self.func(*_convert(args, to_host), **_convert(kwargs, to_host))
        return _convert(answer, to_device) if self.last else Moved(answer)


class ArgChunk:
    """dask's ``arg_chunk`` with the chunk's min or max and its position taken to the host when small, so that
    making the position a flat index and pairing it with the value run on NumPy."""

    def __init__(self, chunk: functools.partial):
        self.chunk = chunk

    def __call__(self, x, *args, **kwargs):
        if not _is_device(x):
            return self.chunk(x, *args, **kwargs)
        func, argfunc, *rest = self.chunk.args
        moved = []
        answer = self.chunk.func(_small_to_host(func, moved), _small_to_host(argfunc, moved), *rest, x, *args,
                                 **{**self.chunk.keywords, **kwargs})
        return Moved(answer) if moved else answer


def _small_to_host(func, moved: list):
    @functools.wraps(func)
    def call(x, **kwargs):
        value = func(x, **kwargs)
        if _is_device(value) and value.size <= SMALL:
            moved.append(True)
            return to_host(value)
        return value

    return call


def _is_device(value) -> bool:
    """A GPU array that can copy itself to the host: CuPy's (found without importing CuPy)."""
    return hasattr(type(value), "__cuda_array_interface__") and hasattr(value, "get")


def _device_arrays(tree) -> tuple[list, bool]:
    """The GPU arrays in ``tree`` (lists, tuples and dicts), and whether it holds moved results."""
    arrays, moved = [], False
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (list, tuple)):
            stack.extend(node)
        elif isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, Moved):
            moved = True
        elif _is_device(node):
            arrays.append(node)
    return arrays, moved


def _convert(tree, convert, moved=None):
    """``tree`` with each value in it passed through ``convert``, and the values of its moved results through
    ``moved`` (``convert`` where not given)."""
    if isinstance(tree, Moved):
        return _convert(tree.value, moved or convert)
    if isinstance(tree, (list, tuple)):
        return type(tree)(_convert(node, convert, moved) for node in tree)
    if isinstance(tree, dict):
        return {key: _convert(node, convert, moved) for key, node in tree.items()}
    return convert(tree)


def _same(value):
    return value


def to_host(value):
    return value.get() if _is_device(value) else value


def to_device(value):
    """NumPy arrays and scalars as CuPy arrays (a copy, no kernel); anything else as it is."""
    if isinstance(value, (np.ndarray, np.generic)):
        import cupy

        return cupy.asarray(value)
    return value
