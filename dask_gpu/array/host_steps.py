"""The last steps of GPU reductions, run on the host: no CUDA kernel to compile for a handful of numbers.

dask's mean, var, std, argmin and argmax reduce each chunk to a few numbers, then combine and aggregate
those with more array operations. On CuPy each of them is a CUDA kernel that a new machine compiles at
its first use, about a tenth of a second each: a first ``x.var()`` compiled 18 kernels, 11 of them for these
steps, and a first ``x.argmax()`` 13, most to turn each chunk's position into a flat index. Here a chunk's
result moves to the host when it is small, those steps run on NumPy, and the last one gives its answer
back to the GPU. The chunks' reductions themselves stay on the GPU.

The chunk steps of mean and var count a chunk's elements from its shape, on the host, where dask fills
a GPU array with the count (a kernel for each dtype). var's chunk step then takes the squares about the
chunk's mean in one kernel of its own (:func:`squares_about`), where dask's makes four: the count's
type, the division, the difference and the square.

A result moved to the host travels as :class:`Moved`, so that the last step knows to give its answer back
as CuPy; steps that see no GPU data, or large results (a reduction along one axis of large chunks), run as
they are.
"""

from __future__ import annotations

import functools
import math

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
    if {"mean_chunk", "moment_chunk"} & set(names) and _counts_all(task.func):
        return Task(task.key, CountChunk(task.func), *task.args, **task.kwargs)
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


def _counts_all(func) -> bool:
    """dask's chunk step of a mean or a var that counts every element (nanmean's counts only numbers)."""
    return isinstance(func, functools.partial) and "numel" not in func.keywords


class CountChunk:
    """dask's ``mean_chunk`` or ``moment_chunk`` with the chunk's count made on the host, and var's squares about
    the mean in one kernel; the result moves to the host when small."""

    def __init__(self, chunk: functools.partial):
        self.chunk = chunk

    def __call__(self, x, *args, **kwargs):
        if not _is_device(x):
            return self.chunk(x, *args, **kwargs)
        keywords = {**self.chunk.keywords, **kwargs}
        if self.chunk.func.__name__ == "moment_chunk":  # dask's divides a GPU total by the count: kept there
            return _moment2(x, **keywords) if _plain_variance(x, keywords) else self.chunk(x, *args, **kwargs)
        return _placed(self.chunk.func(x, *args, numel=count, **keywords))


def _placed(answer: dict):
    """A chunk step's answer moved to the host where its total is small, else all of it on the GPU (a count made
    on the host goes there by a copy, no kernel)."""
    if answer["total"].size <= SMALL:
        return Moved(_convert(answer, to_host))
    return _convert(answer, to_device)


def _plain_variance(x, keywords) -> bool:
    """A second moment of real numbers, summed by dask's own sum: what :func:`_moment2` computes."""
    extra = set(keywords) - {"order", "dtype", "axis", "keepdims", "implicit_complex_dtype"}
    return (not extra and keywords.get("order", 2) == 2 and keywords.get("keepdims")
            and (x.dtype.kind in "biu" or x.dtype in (np.float32, np.float64))
            and np.dtype(keywords.get("dtype", "f8")) in (np.float32, np.float64))


def _moment2(x, dtype="f8", axis=None, keepdims=True, **_):
    """dask's ``moment_chunk`` of order 2: the total, the count and the sum of squares about the mean."""
    n = count(x, axis=axis, keepdims=keepdims, dtype=np.int64)
    total = x.sum(axis=axis, dtype=dtype, keepdims=keepdims)
    where = to_host if total.size <= SMALL else to_device  # a small total's mean on the host: no kernel
    total, n = where(total), where(n)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = total / n
    squares = squares_about(x, to_device(mean), axis, np.dtype(dtype))
    return _placed({"total": total, "n": n, "M": squares[..., np.newaxis]})


def count(x, axis=None, keepdims=False, dtype=np.float64, **_):
    """dask's ``numel`` of ``x``, from its shape, as a NumPy array."""
    axes = range(x.ndim) if axis is None else axis if isinstance(axis, (tuple, list)) else (axis,)
    axes = {a % x.ndim for a in axes}
    shape = [1 if a in axes else n for a, n in enumerate(x.shape) if keepdims or a not in axes]
    return np.full(shape, math.prod(x.shape[a] for a in axes), dtype=dtype)


def squares_about(x, mean, axis, dtype):
    """The sum of ``(x - mean) ** 2`` along ``axis``, kept, in ``dtype``, in one CuPy kernel (accumulating in
    float64), where ``mean`` has ``x``'s dimensions."""
    return _squares_kernel()(x, mean.astype(np.float64, copy=False), axis=axis, keepdims=True).astype(dtype, copy=False)


@functools.cache
def _squares_kernel():
    import cupy

    return cupy.ReductionKernel("T x, float64 mean", "float64 squares", "(double(x) - mean) * (double(x) - mean)",
                                "a + b", "squares = a", "0", "dask_gpu_squares_about_mean")


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
    """NumPy arrays and scalars as CuPy arrays, by a copy: CuPy fills a 0-d array with a kernel of its own, so
    each goes as one dimension and takes its shape on the GPU. Anything else as it is."""
    if isinstance(value, (np.ndarray, np.generic)):
        import cupy

        value = np.asarray(value)
        return cupy.asarray(value.reshape(-1)).reshape(value.shape)
    return value
